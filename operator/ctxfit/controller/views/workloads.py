"""Drift: what matters in the live workload compared with the desired one (pure, no kopf, no API client).

``live_deployment`` keeps the fields ctxfit renders; ``drifted`` names those that differ, compared semantically.
Why field by field and how defaults are handled: docs/design/drift.md.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from kubernetes.utils.quantity import parse_quantity

from ctxfit.render.deployment import PORT_NAME
from ctxfit.render.labels import selector_labels
from ctxfit.render.leaderworkerset import LWS_KIND, WORKER_INDEX_LABEL
from ctxfit.render.scaledobject import PAUSED_ANNOTATION
from ctxfit.vocab.text import capped

from .ownership import Holder, holder_of

CONTAINER_FIELDS = ("image", "command", "args", "env", "resources", "ports", "volumeMounts",
                    "startupProbe", "readinessProbe", "livenessProbe", "securityContext", "envFrom", "volumeDevices",
                    "lifecycle", "workingDir")
"""Container fields (the engine's and the init containers') that are drift also when only the live object has
them (a ``command``, ``securityContext.privileged`` or ``envFrom`` added by hand). Every other field ctxfit
renders is compared too; fields the API server defaults (``imagePullPolicy``, ``terminationMessagePath``...)
and ctxfit does not render are left alone."""
POD_FIELDS = ("volumes", "containers", "initContainers", "nodeSelector", "affinity", "tolerations", "nodeName",
              "hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace", "securityContext",
              "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "runtimeClassName")
"""Pod spec fields that are drift also when only the live object has them (a node choice, a host namespace, a
privilege, another identity); ``containers``/``initContainers`` are the container names. Every other pod field
ctxfit renders is compared too."""
GROUP_ROLES = ("leader", "worker")
"""LeaderWorkerSet templates compared (``spec.leaderWorkerTemplate.<role>Template``)."""
GROUP_FIELDS = ("size", "restartPolicy")
"""``spec.leaderWorkerTemplate`` fields compared with the rendering (keys ``group.<field>``)."""
MAX_LIVE_BYTES = 1 << 20
"""A live workload's compared fields over this many bytes (compact JSON) are not kept, only their size: no rendering
comes near it (the spec's bounds: 64 KiB of env, 128 args of 1 KiB, 64 pod annotations of 3 KiB; a LeaderWorkerSet
renders two templates: tests/unit/controller/views/test_drift.py), so such a workload has drifted (``OVERSIZED``) and
is rendered again. One view is held per indexed workload: its size is bounded in bytes whatever a hand edit puts
into the template."""
OVERSIZED = "pod.template"
"""``drifted``'s answer for a workload whose compared fields are over ``MAX_LIVE_BYTES``."""
ZLIB_LEVEL = 6
"""zlib level of a kept ``LiveDeployment`` (deterministic: equal fields give equal bytes, so views still hash
and compare by value); ~17 us to compress a rendered Deployment's fields, ~6 us to expand them."""
REPLICA_FAILURE = "ReplicaFailure"
"""Deployment condition set when its ReplicaSet cannot create pods (``pkg/controller/deployment/util``
``NewDeploymentCondition(ReplicaFailure, ...)`` copied from the ReplicaSet's condition)."""


@dataclass(frozen=True)
class LiveDeployment:
    """The compared fields of a stored Deployment and its ReplicaFailure message.

    Attributes:
        fields_zlib: ``container.<field>`` / ``pod.<field>`` -> value as stored (absent fields are missing), as
            compact JSON, zlib-compressed: one is kept per Deployment in the operator's indexes; the decoded
            pod-template pieces cost ~9 KiB each, the text ~3-8 KiB (the download init container's script),
            compressed ~1-3 KiB (bench/README.md, 1,000 servers). ``fields_json`` is the text.
        replica_failure: the ReplicaFailure condition's message when True and the Deployment controller has
            seen the current generation (``status.observedGeneration``); None otherwise.
        oversized: the compared fields' size in bytes when it is over ``MAX_LIVE_BYTES`` (then ``fields_json`` is
            empty: not kept), else 0.
    """

    fields_zlib: bytes
    replica_failure: str | None = None
    oversized: int = 0

    @classmethod
    def of(cls, fields: Mapping[str, Any], replica_failure: str | None = None) -> LiveDeployment:
        """A ``LiveDeployment`` of ``fields`` (a mapping as ``_fields`` returns); over ``MAX_LIVE_BYTES`` (of
        uncompressed JSON) only their size is kept."""
        text = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        failure = capped(replica_failure) if replica_failure is not None else None
        if len(text) > MAX_LIVE_BYTES:
            return cls(b"", failure, len(text))
        return cls(zlib.compress(text, ZLIB_LEVEL), failure)

    @property
    def fields_json(self) -> str:
        """The compared fields as compact JSON ("" when oversized)."""
        return zlib.decompress(self.fields_zlib).decode() if self.fields_zlib else ""

    @property
    def fields(self) -> dict[str, Any]:
        """The compared fields, decoded (a new dict per access: read it once per comparison); {} when oversized."""
        return cast(dict[str, Any], json.loads(self.fields_json)) if self.fields_zlib else {}


def _engine_container(template_spec: Mapping[str, Any], container_name: str) -> Mapping[str, Any]:
    containers = template_spec.get("containers") or []
    return next((c for c in containers if c.get("name") == container_name), {})


def _present(value: Any) -> bool:
    return value not in (None, {}, [])


def _template_fields(template: Mapping[str, Any], container_name: str, prefix: str) -> dict[str, Any]:
    """The pod template as compared keys: ``container.<field>`` (the engine), ``init.<name>.<field>`` (init
    containers), ``pod.<field>`` (the pod spec; ``pod.containers``/``pod.initContainers``: the names),
    ``pod.labels``/``pod.annotations`` (the template's metadata)."""
    template_spec = template.get("spec") or {}
    meta = template.get("metadata") or {}
    out: dict[str, Any] = {}
    for key, value in _engine_container(template_spec, container_name).items():
        if key != "name" and _present(value):
            out[f"{prefix}container.{key}"] = value
    for init in template_spec.get("initContainers") or []:
        for key, value in init.items():
            if key != "name" and _present(value):
                out[f"{prefix}init.{init.get('name')}.{key}"] = value
    for key, value in template_spec.items():
        if key not in ("containers", "initContainers") and _present(value):
            out[f"{prefix}pod.{key}"] = value
    for key in ("containers", "initContainers"):
        if template_spec.get(key):
            out[f"{prefix}pod.{key}"] = [c.get("name") for c in template_spec[key]]
    for key in ("labels", "annotations"):
        if _present(meta.get(key)):
            out[f"{prefix}pod.{key}"] = meta[key]
    return out


def _guarded(key: str) -> bool:
    """A compared key that is drift also when only the live object has it (see ``POD_FIELDS``)."""
    parts = key.split(".")
    if parts[0] in GROUP_ROLES:
        parts = parts[1:]
    if parts[0] == "group":
        return True
    if parts[0] == "container" or parts[0] == "init":
        return parts[-1] in CONTAINER_FIELDS
    return parts[0] == "pod" and parts[-1] in POD_FIELDS


def _group_template(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((workload.get("spec") or {}).get("leaderWorkerTemplate") or {})


def _fields(workload: Mapping[str, Any], container_name: str) -> dict[str, Any]:
    if workload.get("kind") == LWS_KIND:
        group = _group_template(workload)
        out: dict[str, Any] = {}
        for role in GROUP_ROLES:
            out.update(_template_fields(group.get(f"{role}Template") or {}, container_name, f"{role}."))
        out.update({f"group.{key}": group[key] for key in GROUP_FIELDS if group.get(key) is not None})
        return out
    return _template_fields((workload.get("spec") or {}).get("template") or {}, container_name, "")


def live_deployment(deployment: Mapping[str, Any], container_name: str) -> LiveDeployment:
    """Fold a Deployment or a LeaderWorkerSet (dict, rendered or as stored) into a ``LiveDeployment``."""
    failure = None
    status = deployment.get("status") or {}
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    current = int(status.get("observedGeneration") or 0) >= generation
    for cond in status.get("conditions") or [] if current else []:
        if cond.get("type") == REPLICA_FAILURE and cond.get("status") == "True":
            failure = str(cond.get("message") or cond.get("reason") or REPLICA_FAILURE)
    return LiveDeployment.of(_fields(deployment, container_name), failure)


def _quantity(value: Any) -> Decimal | None:
    if isinstance(value, (str, int, float)):
        try:
            return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
        except ValueError:
            return None
    return None


def _same(desired: Any, live: Any, *, quantities: bool) -> bool:
    """``desired`` is contained in ``live`` (defaults added by the API server are ignored)."""
    if desired == live:  # the common case, compared in C before walking the parts
        return True
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            _same(value, live.get(key), quantities=quantities or key == "resources") for key, value in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(
            _same(d, v, quantities=quantities) for d, v in zip(desired, live, strict=True))
    if quantities:
        want, have = _quantity(desired), _quantity(live)
        return want is not None and want == have
    return False


def drifted(desired: Mapping[str, Any], live: LiveDeployment, container_name: str) -> list[str]:
    """Names (``container.args``, ``pod.volumes``; ``leader.container.image``, ``group.size``... for a
    LeaderWorkerSet) of the compared fields where ``live`` differs from the rendered ``desired``; [] when it
    matches."""
    if live.oversized:
        return [OVERSIZED]
    want = _fields(desired, container_name)
    have = live.fields
    changed = [key for key, value in want.items()
               if not _same(value, have.get(key), quantities=key.endswith(".resources"))]
    return changed + [key for key in have if key not in want and _guarded(key)]


def describe_drift(changed: list[str], desired: Mapping[str, Any], live: LiveDeployment,
                   container_name: str) -> str:
    """One line for the Event: which fields were reverted, with the image values when the image changed and
    the first changed argument; a LeaderWorkerSet's fields name their role (``worker args ...``, ``size 3 -> 2``)."""
    if live.oversized:
        return f"the pod template ({live.oversized} bytes as stored, more than any rendering)"
    want_fields = _fields(desired, container_name)
    parts = []
    for key in changed:
        role, _, rest = key.rpartition(".")
        name = rest
        where = role.split(".")[0] + " " if role.split(".")[0] in GROUP_ROLES else ""
        want, have = want_fields.get(key), live.fields.get(key)
        if role.split(".")[-2:-1] == ["init"] or role.startswith("init."):
            init = role.split(".")[-1]
            parts.append(f"{where}init container {init} {name}" + (f" {have!r} -> {want!r}" if name == "image"
                                                                    else ""))
        elif key.endswith("container.image"):
            parts.append(f"{where}image {have!r} -> {want!r}")
        elif key.endswith(("container.args", "container.command")) and isinstance(want, list) \
                and isinstance(have, list):
            parts.append(f"{where}{name} {_list_change(have, want)}")
        elif key.startswith("group."):
            parts.append(f"{name} {have!r} -> {want!r}")
        else:
            parts.append(f"{where}{name}")
    return ", ".join(parts)


def _list_change(have: list[Any], want: list[Any]) -> str:
    """The first difference of two argument lists, with the flag before it: ``--max-model-len 999999 -> 32768``."""
    for index, (old, new) in enumerate(zip(have, want, strict=False)):
        if old != new:
            flag = f"{want[index - 1]} " if index and str(want[index - 1]).startswith("-") else ""
            return f"{flag}{old} -> {new}"
    longer, extra = (have, "removed") if len(have) > len(want) else (want, "restored")
    return f"{extra} {' '.join(str(a) for a in longer[min(len(have), len(want)):])}"


def owned_service_port(service: Mapping[str, Any], server: str, *, leaders_only: bool = False) -> int | None:
    """The port of server ``server``'s Service as stored, or None when it is not the one ctxfit renders
    (``render/service.py``: ClusterIP, selector ``{ctxfit.io/server: NAME}``, one port targeting ``http``, or, when
    each data-parallel rank serves its own port, ``http``, ``http-rank1``... on consecutive ports): None makes the
    operator apply the rendering again, exactly as for a missing Service. ``leaders_only``: the rendering of a
    multi-node server (``render/leaderworkerset.render_group_service``: the selector adds ``worker-index: "0"``)."""
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    if (spec.get("type") or "ClusterIP") != "ClusterIP" or dict(spec.get("selector") or {}) != _selector(server,
                                                                                                         leaders_only):
        return None
    if not ports or any("port" not in p for p in ports):
        return None
    first = int(ports[0]["port"])
    for rank, port in enumerate(ports):
        name = PORT_NAME if rank == 0 else f"{PORT_NAME}-rank{rank}"
        if port.get("targetPort") != name or int(port["port"]) != first + rank:
            return None
    return first


def _selector(server: str, leaders_only: bool) -> dict[str, str]:
    return {**selector_labels(server), WORKER_INDEX_LABEL: "0"} if leaders_only else selector_labels(server)


@dataclass(frozen=True)
class ServiceView:
    """The Service named like a server: its port when it is one ctxfit renders (``owned_service_port``; None
    otherwise), which rendering (``leaders_only``: the multi-node one, selecting the group leaders) and whose it is
    (``ownership``; a Service that is not the server's counts as absent)."""

    port: int | None
    holder: Holder | None = None
    leaders_only: bool = False

    def port_for(self, server_uid: str, via: tuple[str, ...] = (), *, leaders_only: bool = False) -> int | None:
        """The port when the Service is the server's of ``server_uid`` (``Holder.owns``) and rendered for the
        server's shape (``leaders_only``: ``spec.nodes`` > 1), else None (absent, or to be applied again)."""
        if self.holder is None or not self.holder.owns(server_uid, "Service", via) or \
                self.leaders_only is not leaders_only:
            return None
        return self.port


def service_view(service: Mapping[str, Any], server: str) -> ServiceView:
    """Fold a Service (dict) into a ``ServiceView``: either rendering (one node, or a multi-node group's)."""
    plain = owned_service_port(service, server)
    if plain is not None:
        return ServiceView(plain, holder_of(service))
    group = owned_service_port(service, server, leaders_only=True)
    return ServiceView(group, holder_of(service), leaders_only=group is not None)


@dataclass(frozen=True)
class ScaledObjectView:
    """The live ScaledObject as reconciliation needs it.

    Attributes:
        spec: its ``spec`` as stored.
        annotations, labels: its metadata (``autoscaling.keda.sh/paused`` among the annotations).
        ready: KEDA's ``Ready`` condition status (``True``/``False``/``Unknown``; None: not reported yet).
        ready_message: that condition's message.
        holder: whose it is (``ownership``).
    """

    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    ready: str | None = None
    ready_message: str = ""
    holder: Holder | None = None

    @property
    def paused(self) -> bool:
        """Paused by the annotation (any value but a false boolean, as KEDA's ``getBoolAnnotation``)."""
        value = self.annotations.get(PAUSED_ANNOTATION)
        return value is not None and value.strip().lower() not in ("false", "0", "f")


def scaled_object_view(obj: Mapping[str, Any]) -> ScaledObjectView:
    """Fold a ScaledObject (dict as the API returns it) into a ``ScaledObjectView``."""
    meta = obj.get("metadata") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return ScaledObjectView(spec=dict(obj.get("spec") or {}), annotations=dict(meta.get("annotations") or {}),
                            labels=dict(meta.get("labels") or {}), ready=ready.get("status"),
                            ready_message=str(ready.get("message") or ready.get("reason") or ""),
                            holder=holder_of(obj))


