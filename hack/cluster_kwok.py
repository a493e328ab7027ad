"""kwok, the fake kubelet of every node: its configuration (stages), its CRDs, its command line, and the
pod logs it serves.

kwok's stages decide what happens to a pod: kwok's stock "fast" node and pod stages, then ctxfit's
simulated engine (hack/kwok/sim-stages.yaml, driven by pod labels and annotations: contract in
hack/README.md) and the simulated model download (cluster_storage.py). Everything is written to one
``kwok.yaml``. ``kubectl logs`` reaches kwok through the apiserver; kwok serves files named by its
``ClusterLogs``/``Logs`` objects, in CRI log format (``PodLogsMixin``, ``cri_log``).
"""

from __future__ import annotations

import copy
import datetime
import os
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import cluster_storage
import yaml
from cluster_kubectl import KubectlClient
from cluster_procs import HACK_DIR, HarnessError

SIM_STAGES_FILE = HACK_DIR / "kwok" / "sim-stages.yaml"
KWOK_VERSION = "v0.7.0"
KWOK_POD_CIDR = "10.244.0.1/16"  # the pool hands out addresses from .0.1 on
# kwok v0.7.0 cannot template an Event message, so never-ready pods report this fixed pod IP and the
# Unhealthy event names it (see hack/kwok/sim-stages.yaml).
NEVER_READY_IP = "10.244.255.254"


# --------------------------------------------------------------------------------------------
# configuration


def _load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def stock_stage(bin_dir: Path, rel: str) -> dict[str, Any]:
    """A stock kwok stage, from the copy k8s-bins.sh keeps beside the binaries (or the module cache)."""
    candidates = [bin_dir / "kwok-stages" / rel]
    gomodcache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    candidates.append(Path(gomodcache) / f"sigs.k8s.io/kwok@{KWOK_VERSION}" / "kustomize" / "stage" / rel)
    for c in candidates:
        if c.exists():
            return _load_yaml_docs(c)[0]
    raise HarnessError(f"kwok stage {rel} not found in {[str(c) for c in candidates]}")


def kwok_crd(bin_dir: Path, name: str) -> Path:
    """One of kwok's CRD manifests (e.g. kwok.x-k8s.io_logs.yaml), from the copy k8s-bins.sh keeps beside
    the binaries (or the module cache). Raises HarnessError if neither has it."""
    candidates = [bin_dir / "kwok-crds" / name]
    gomodcache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    candidates.append(
        Path(gomodcache) / f"sigs.k8s.io/kwok@{KWOK_VERSION}" / "kustomize" / "crd" / "bases" / name
    )
    for c in candidates:
        if c.exists():
            return c
    raise HarnessError(f"kwok CRD {name} not found in {[str(c) for c in candidates]}")


def sim_stages(pod_ready: dict[str, Any]) -> list[dict[str, Any]]:
    """ctxfit's simulated-engine stages (hack/kwok/sim-stages.yaml), anchors resolved."""
    text = SIM_STAGES_FILE.read_text().replace("NEVER_READY_IP", NEVER_READY_IP)
    items = yaml.safe_load(text)
    stages = [it for it in items if isinstance(it, dict)]
    for st in stages:
        if st["spec"].get("next") == "STOCK_POD_READY":
            st["spec"]["next"] = copy.deepcopy(pod_ready["spec"]["next"])
    return stages


class _LiteralDumper(yaml.SafeDumper):
    """Dumps multi-line strings (templates) as literal blocks, so kwok.yaml stays readable."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_LiteralDumper.add_representer(str, _str_representer)


def kwok_config(bin_dir: Path) -> str:
    """The full kwok config: KwokConfiguration, stock node and pod stages, then ours."""
    pod_ready = stock_stage(bin_dir, "pod/fast/pod-ready.yaml")
    docs: list[dict[str, Any]] = [
        {"kind": "KwokConfiguration", "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "options": {}},
        stock_stage(bin_dir, "node/fast/node-initialize.yaml"),
        stock_stage(bin_dir, "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"),
        pod_ready,
        stock_stage(bin_dir, "pod/fast/pod-complete.yaml"),
        stock_stage(bin_dir, "pod/fast/pod-delete.yaml"),
        *cluster_storage.keep_download_times(sim_stages(pod_ready)),
        *cluster_storage.download_stages(),
    ]
    return yaml.dump_all(docs, Dumper=_LiteralDumper, sort_keys=False, width=1000)


def cri_log(lines: Iterable[str] | str, stream: str = "stdout") -> str:
    """Text in the CRI log format kwok serves (`<RFC3339Nano> stdout F <line>`)."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    ts = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return "".join(f"{ts} {stream} F {ln}\n" for ln in lines)


def kwok_args(port: int, kubeconfig: Path, config_file: Path, pki: Path) -> list[str]:
    """kwok's command line: manage the nodes annotated kwok.x-k8s.io/node=fake, serve their kubelet API
    (logs) on 127.0.0.1:`port` with the admin certificate, watch Logs/ClusterLogs objects."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={config_file}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={pki / 'admin.crt'}",
        f"--tls-private-key-file={pki / 'admin.key'}",
        f"--cidr={KWOK_POD_CIDR}",
        "--node-lease-duration-seconds=40",
        "--enable-crds=Logs,ClusterLogs",
    ]


# --------------------------------------------------------------------------------------------
# pod logs served by kwok (`kubectl logs`, `kubectl logs --previous`)


class PodLogsMixin(KubectlClient):
    """Cluster methods that choose the text kwok serves as pod logs (files under pod_logs_dir)."""

    @property
    @abstractmethod
    def pod_logs_dir(self) -> Path:
        """Where the served log files are written."""

    def set_default_logs(self, current: str, previous: str | None = None) -> None:
        """Text served for every pod's containers unless a pod has its own (set_pod_logs)."""
        self.pod_logs_dir.mkdir(parents=True, exist_ok=True)
        cur = self.pod_logs_dir / "default.log"
        prev = self.pod_logs_dir / "default-previous.log"
        cur.write_text(cri_log(current))
        prev.write_text(cri_log(previous if previous is not None else ""))
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": "ctxfit-default"},
                "spec": {"selector": {}, "logs": [{"logsFile": str(cur), "previousLogsFile": str(prev)}]},
            }
        )

    def set_pod_logs(
        self,
        namespace: str,
        pod: str,
        current: str,
        previous: str | None = None,
        containers: list[str] | None = None,
    ) -> None:
        """Serve `current` (and `previous` for --previous) as the logs of one pod (a kwok Logs object
        named like the pod). Text is plain lines; it is written in CRI format."""
        d = self.pod_logs_dir / namespace
        d.mkdir(parents=True, exist_ok=True)
        cur, prev = d / f"{pod}.log", d / f"{pod}-previous.log"
        cur.write_text(cri_log(current))
        prev.write_text(cri_log(previous if previous is not None else ""))
        entry: dict[str, Any] = {"logsFile": str(cur), "previousLogsFile": str(prev)}
        if containers:
            entry["containers"] = containers
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [entry]},
            }
        )
