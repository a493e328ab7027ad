"""Storage for the local control plane: a default StorageClass whose claims really bind, and the kwok
stages that simulate the model download (the `model-download` init container).

kwok nodes have no kubelet, so nothing mounts a volume; "bind" is the PersistentVolume controller in
kube-controller-manager. With `--enable-hostpath-provisioner` it provisions a hostPath PV (a directory
under /tmp/hostpath_pv on this machine, deleted with the claim: reclaimPolicy Delete) for every claim of
the `kubernetes.io/host-path` provisioner, the in-tree test provisioner (kube-controller-manager
`--help`: "testing and development of provisioning features"). That provisioner cannot expand
volumes, so the StorageClass says `allowVolumeExpansion: false` and a full claim is replaced by a new,
larger one.

Used by hack/cluster_components.py (controller-manager flags), hack/cluster_kwok.py (kwok config) and
hack/ctxfit_cluster.py (install after start); tests import the names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import yaml

DOWNLOAD_STAGES_FILE = Path(__file__).resolve().parent / "kwok" / "download-stages.yaml"
STORAGE_CLASS_NAME = "standard"
CONTROLLER_MANAGER_FLAGS = ("--enable-hostpath-provisioner", "--pvclaimbinder-sync-period=2s")
"""kube-controller-manager flags: the hostPath test provisioner, and a short PV/PVC resync."""

DOWNLOAD_MS = "sim.ctxfit.io/download-ms"
DOWNLOAD_MESSAGE = "sim.ctxfit.io/download-message"
DOWNLOAD_EXIT_CODE = "sim.ctxfit.io/download-exit-code"
DOWNLOAD_FAIL_BELOW = "sim.ctxfit.io/download-fail-below"


class _Applies(Protocol):
    def apply(self, objs: dict[str, Any] | list[dict[str, Any]] | str, namespace: str | None = None) -> str: ...


def storage_class(name: str = STORAGE_CLASS_NAME, default: bool = True) -> dict[str, Any]:
    """The harness StorageClass (default class unless ``default`` is False)."""
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": "kubernetes.io/host-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": False,
    }


def install_storage(cluster: _Applies) -> None:
    """Create the default StorageClass."""
    cluster.apply(storage_class())


def download_stages() -> list[dict[str, Any]]:
    """The simulated-download kwok stages (hack/kwok/download-stages.yaml), anchors resolved."""
    items = yaml.safe_load(DOWNLOAD_STAGES_FILE.read_text())
    return [it for it in items if isinstance(it, dict)]


KEEP_INIT_TIMES = (
    '{{ $initName := .name }}{{ $initStart := $now }}{{ $initEnd := $now }}'
    '{{ range ( or $.status.initContainerStatuses list ) }}{{ if eq .name $initName }}'
    '{{ $initStart = dig "state" "terminated" "startedAt" $now . }}'
    '{{ $initEnd = dig "state" "terminated" "finishedAt" $now . }}'
    '{{ end }}{{ end }}'
)
"""Template prefix for one init container: its recorded start/end when it already terminated (else now)."""


def keep_download_times(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine stages, with their init-container statuses keeping the times a simulated download
    recorded (they otherwise write ``now`` for both, and ``status.model.downloadSeconds`` would read 0).

    Rewrites, inside each ``initContainerStatuses`` range of a stage's status template, the terminated
    ``startedAt``/``finishedAt`` of ``$now``. Stages without such a block are returned unchanged.
    """
    start = "initContainerStatuses:"
    for stage in stages:
        template = (stage.get("spec", {}).get("next") or {}).get("statusTemplate")
        if not isinstance(template, str) or start not in template:
            continue
        head, tail = template.split(start, 1)
        opener = "{{ range .spec.initContainers }}"
        if opener not in tail:
            continue
        before, block = tail.split(opener, 1)
        body, after = block.split("{{ end }}\n", 1) if "{{ end }}\n" in block else (block, "")
        if "terminated:" not in body:
            continue
        body = body.replace("finishedAt: {{ $now | Quote }}", "finishedAt: {{ $initEnd | Quote }}")
        body = body.replace("startedAt: {{ $now | Quote }}", "startedAt: {{ $initStart | Quote }}")
        stage["spec"]["next"]["statusTemplate"] = (head + start + before + opener + KEEP_INIT_TIMES + body
                                                   + ("{{ end }}\n" + after if after or block.endswith("\n") else ""))
    return stages


def with_download(obj: dict[str, Any], *, delay_ms: int | None = None, message: str | None = None,
                  exit_code: int | None = None, fail_below_bytes: int | None = None) -> dict[str, Any]:
    """Set the simulated download's fate on an InferenceServer's pod template (spec.pod.annotations)."""
    annotations = obj["spec"].setdefault("pod", {}).setdefault("annotations", {})
    if delay_ms is not None:
        annotations[DOWNLOAD_MS] = str(delay_ms)
    if message is not None:
        annotations[DOWNLOAD_MESSAGE] = message
    if exit_code is not None:
        annotations[DOWNLOAD_EXIT_CODE] = str(exit_code)
    if fail_below_bytes is not None:
        annotations[DOWNLOAD_FAIL_BELOW] = str(fail_below_bytes)
    return obj
