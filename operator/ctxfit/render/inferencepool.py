"""InferencePool (``inference.networking.k8s.io/v1``) and the pool metadata of engine pods (pure, deterministic).

Shape (GIE v1.6.0 ``api/v1/inferencepool_types.go``; docs/design/gateway.md):

- ``spec.selector.matchLabels``: ``{ctxfit.io/inference-pool: POOL}``. ctxfit puts that label on exactly the
  pods that serve the API: every pod of a single-node server, the leader of each LeaderWorkerSet group
  (workers run no API server), and only when the server is in that pool. The endpoint picker itself skips
  pods that are not Ready (GIE ``pkg/lwepp/datastore``: ``IsPodReady``), so the pool's endpoints are the
  Ready engine pods of its servers.
- ``spec.targetPorts``: the API ports of the pool's pods: ``serving.port``, or one per data-parallel rank when
  each rank serves its own (``ctxfit.engines.vllm.ranks``); a shared pool lists the union of its servers'
  ports (at most 8), and each pod says which of them it serves with the active-ports annotations
  (``llm-d.ai/active-ports``, read by llm-d's router, and GIE's ``inference.networking.k8s.io/active-ports``,
  read by the lightweight picker), so no endpoint points at a closed port.
- ``spec.appProtocol`` ``http`` and the ``endpointPickerRef`` written out with GIE's defaults (group ``""``,
  kind Service, failureMode FailClose), so the stored object equals the rendered one and drift is a plain
  comparison.
- Owned by the creating InferenceServer (controller ownerReference: garbage-collected with it); annotations
  ``ctxfit.io/served-model-name`` and ``ctxfit.io/model`` say what every server of the pool must serve.

Pod metadata (``pool_pod_metadata``) in a pool: the pool label, the context labels (``llm-d.ai/context-length-
range: 0-N``, the label llm-d's ``context-length-aware`` scorer reads, format ``min-max`` as its
``parseContextRange`` parses it; ``ctxfit.io/served-context-length: N``) and the active-ports annotations.
The template carries the effective context; the operator lowers the live pods' labels to what the engine
reported serving (``context_labels``) without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND, EngineKind, InferenceServerSpec
from ctxfit.api.routing import GIE_GROUP, GIE_VERSION, POOL_KIND, EndpointPickerRef
from ctxfit.engines import get_engine

from .labels import DOMAIN, common_labels, owner_reference

POOL_API_VERSION = f"{GIE_GROUP}/{GIE_VERSION}"
POOL_LABEL = f"{DOMAIN}/inference-pool"
"""Pod label selecting a pool's serving pods; its value is the pool's name."""
CONTEXT_RANGE_LABEL = "llm-d.ai/context-length-range"
"""llm-d router ``context-length-aware`` scorer's default label (``DefaultContextLengthLabel``), ``min-max``."""
CONTEXT_LABEL = f"{DOMAIN}/served-context-length"
"""ctxfit's own: tokens the engine holds, a plain integer."""
ACTIVE_PORTS_ANNOTATIONS = ("llm-d.ai/active-ports", "inference.networking.k8s.io/active-ports")
"""Which of the pool's target ports a pod serves (comma-separated): llm-d's router and GIE's name for it."""
SERVED_MODEL_ANNOTATION = f"{DOMAIN}/served-model-name"
MODEL_ANNOTATION = f"{DOMAIN}/model"
ROUTING_LABELS = (POOL_LABEL, CONTEXT_RANGE_LABEL, CONTEXT_LABEL)
"""Labels only ctxfit sets on engine pods (a user's ``spec.pod.labels`` entry for one is dropped)."""
ROUTING_ANNOTATIONS = ACTIVE_PORTS_ANNOTATIONS


def context_range(tokens: int) -> str:
    """The router label's value for a pod holding ``tokens``: ``0-<tokens>`` (any prompt up to it)."""
    return f"0-{tokens}"


def context_labels(tokens: int) -> dict[str, str]:
    """The two context labels of a pod holding ``tokens``."""
    return {CONTEXT_RANGE_LABEL: context_range(tokens), CONTEXT_LABEL: str(tokens)}


def pool_pod_metadata(pool: str, tokens: int, ports: tuple[int, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` of a pod serving in ``pool`` on ``ports`` with context ``tokens``."""
    active = ",".join(str(p) for p in ports)
    return ({POOL_LABEL: pool, **context_labels(tokens)}, dict.fromkeys(ACTIVE_PORTS_ANNOTATIONS, active))


def server_ports(spec: InferenceServerSpec) -> tuple[int, ...]:
    """The API ports of one serving pod of a server: the leader's one port for ``nodes`` > 1, else the engine's
    ``api_ports`` (one per data-parallel rank when each rank serves its own)."""
    if spec.nodes > 1:
        return (spec.serving.port,)
    return get_engine(spec.engine.kind).api_ports(spec)


def target_ports(*members: tuple[int, ...]) -> list[int]:
    """A pool's ``targetPorts`` numbers: the sorted union of its servers' API ports."""
    return sorted({port for ports in members for port in ports})


@dataclass(frozen=True)
class PoolInput:
    """Everything the InferencePool renderer reads.

    Attributes:
        name, namespace: the pool.
        owner, owner_uid: the InferenceServer that creates it (its controller ownerReference).
        engine: that server's engine (the ``app.kubernetes.io/name`` label).
        ports: ``targetPorts`` numbers (``target_ports`` over the pool's servers), 1-8 of them.
        served_model_name: the name every server of the pool serves (``--served-model-name``).
        model: the model every server of the pool serves (``spec.model.name``).
        endpoint_picker: ``routing.inferencePool.create.endpointPickerRef``, or None.
    """

    name: str
    namespace: str
    owner: str
    owner_uid: str
    engine: EngineKind
    ports: tuple[int, ...]
    served_model_name: str
    model: str
    endpoint_picker: EndpointPickerRef | None = None


def pool_input(server: str, namespace: str, uid: str, spec: InferenceServerSpec,
               member_ports: tuple[tuple[int, ...], ...] = ()) -> PoolInput:
    """The pool a creating server renders: its name, owner, model, served name, picker, and the target ports of
    this server and of the servers that joined it (``member_ports``).

    Raises:
        ValueError: the server does not create a pool (``routing.inferencePool.create`` unset).
    """
    pool = spec.routing.inference_pool
    if pool is None or pool.create is None:
        raise ValueError(f"{server}: spec.routing.inferencePool.create is not set; it renders no InferencePool")
    ports = tuple(target_ports(server_ports(spec), *member_ports))
    return PoolInput(name=pool.pool_name(server), namespace=namespace, owner=server, owner_uid=uid,
                     engine=spec.engine.kind, ports=ports, served_model_name=spec.routing.served_name(spec.model.name),
                     model=spec.model.name, endpoint_picker=pool.create.endpoint_picker_ref)


def _picker(ref: EndpointPickerRef) -> dict[str, Any]:
    out: dict[str, Any] = {"group": ref.group, "kind": ref.kind, "name": ref.name}
    if ref.port is not None:
        out["port"] = {"number": ref.port.number}
    out["failureMode"] = ref.failure_mode
    return out


def render_inference_pool(inp: PoolInput) -> dict[str, Any]:
    """The InferencePool (module docstring for every field).

    Raises:
        ValueError: no port, or more than 8 (GIE ``targetPorts`` bounds).
    """
    if not 1 <= len(inp.ports) <= 8:
        raise ValueError(f"InferencePool {inp.name}: {len(inp.ports)} target ports; GIE allows 1 to 8")
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {POOL_LABEL: inp.name}},
        "targetPorts": [{"number": port} for port in sorted(set(inp.ports))],
        "appProtocol": "http",
    }
    if inp.endpoint_picker is not None:
        spec["endpointPickerRef"] = _picker(inp.endpoint_picker)
    labels = {**common_labels(inp.owner, inp.engine), POOL_LABEL: inp.name}
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL_KIND,
        "metadata": {
            "name": inp.name,
            "namespace": inp.namespace,
            "labels": dict(sorted(labels.items())),
            "annotations": {MODEL_ANNOTATION: inp.model, SERVED_MODEL_ANNOTATION: inp.served_model_name},
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.owner, inp.owner_uid)],
        },
        "spec": spec,
    }


def selects(pool: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    """Whether an InferencePool's ``selector.matchLabels`` selects a pod with ``pod_labels``."""
    wanted = ((pool.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(wanted) and all(pod_labels.get(k) == v for k, v in wanted.items())
