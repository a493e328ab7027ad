"""``spec.routing`` and ``status.routing``: the server behind the inference gateway (Gateway API Inference
Extension ``InferencePool``, ``inference.networking.k8s.io/v1``).

A server either creates a pool (owned by it, garbage-collected with it), joins one by name (created by
another InferenceServer, or by hand), or has none (no ``inferencePool``). Every server of one pool serves
one model under one ``--served-model-name``. Shapes of the GIE's own types are kept (``endpointPickerRef``
with ``group``/``kind``/``name``/``port.number``/``failureMode``: GIE v1.6.0 ``api/v1/inferencepool_types.go``),
so a reference copied from the GIE's documentation works unchanged. docs/design/gateway.md has the why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import WireModel
from .validation import DNS1035_LABEL, DNS1035_MAX

GIE_GROUP = "inference.networking.k8s.io"
GIE_VERSION = "v1"
POOL_KIND = "InferencePool"
POOL_PLURAL = "inferencepools"
MAX_TARGET_PORTS = 8
"""``InferencePool.spec.targetPorts`` holds at most 8 ports (GIE v1 ``+kubebuilder:validation:MaxItems=8``)."""

GROUP_PATTERN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KIND_PATTERN = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
SERVED_MODEL_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_./:]*[A-Za-z0-9])?$"
"""What clients put in the request body's ``model``: letters, digits and ``-_./:`` inside (a Hugging Face id
fits); no whitespace or quotes, so it is one engine argument and one annotation value."""
SERVED_MODEL_NAME_MAX = 253


class PortNumber(WireModel):
    """A port (GIE ``Port``)."""

    number: Annotated[int, Field(ge=1, le=65535)]
    """Port number, 1-65535."""


class EndpointPickerRef(WireModel):
    """The endpoint picker a created pool names (GIE v1 ``endpointPickerRef``), e.g. llm-d's router Service."""

    group: Annotated[str, Field(max_length=253, pattern=GROUP_PATTERN)] = ""
    """API group of the referent. Default: `""` (the core group)."""
    kind: Annotated[str, Field(min_length=1, max_length=63, pattern=KIND_PATTERN)] = "Service"
    """Kind of the referent (ExternalName Services are not supported by GIE implementations). Default: `Service`."""
    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Name of the referent, in the pool's namespace."""
    port: PortNumber | None = None
    """The picker's port (the Service port, not its target port); required when kind is Service."""
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    """What the gateway does when the picker does not answer: FailClose (drop the request) or FailOpen (forward
    it to an endpoint of its own choosing). Default: `FailClose`."""

    @model_validator(mode="after")
    def _service_port(self) -> EndpointPickerRef:
        if self.kind == "Service" and self.port is None:
            raise ValueError(PICKER_PORT_MESSAGE)
        return self


PoolName = Annotated[str, Field(min_length=1, max_length=DNS1035_MAX, pattern=DNS1035_LABEL)]
"""A pool name: a DNS-1035 label (it is the InferencePool's name and the value of the pod label that selects
the pool's pods, so <= 63 characters)."""


class PoolCreate(WireModel):
    """A pool this server creates and owns."""

    name: PoolName | None = None
    """The InferencePool's name. Unset: the server's name."""
    endpoint_picker_ref: EndpointPickerRef | None = None
    """The endpoint picker the pool names (GIE v1 `endpointPickerRef`). Optional in the API since GIE v1.5, but
    most gateway implementations still need it."""


class PoolJoin(WireModel):
    """An existing pool this server adds its pods to."""

    name: PoolName
    """The InferencePool's name, in the server's namespace: created by another InferenceServer's
    `routing.inferencePool.create`, or by hand (its selector must then select this server's pods)."""


class InferencePoolRouting(WireModel):
    """Exactly one of ``create`` and ``join``."""

    create: PoolCreate | None = None
    """Create an InferencePool owned by this server (garbage-collected with it)."""
    join: PoolJoin | None = None
    """Join an existing InferencePool by name."""

    @model_validator(mode="after")
    def _one(self) -> InferencePoolRouting:
        if (self.create is None) == (self.join is None):
            raise ValueError(ONE_OF_MESSAGE)
        return self

    @property
    def creates(self) -> bool:
        return self.create is not None

    def pool_name(self, server: str) -> str:
        """The pool's name: ``join.name``, ``create.name``, else the server's name."""
        if self.join is not None:
            return self.join.name
        assert self.create is not None
        return self.create.name or server


class RoutingSpec(WireModel):
    """How the inference gateway reaches this server: its InferencePool and the model name clients ask for."""

    served_model_name: Annotated[str, Field(min_length=1, max_length=SERVED_MODEL_NAME_MAX,
                                            pattern=SERVED_MODEL_NAME)] | None = None
    """The model name clients put in requests (`--served-model-name`); the same on every server of a pool.
    Unset: spec.model.name."""
    inference_pool: InferencePoolRouting | None = None
    """The InferencePool (inference.networking.k8s.io/v1) the server's engine pods belong to: `create` one, or
    `join` one by name. Unset: none."""

    def served_name(self, model: str) -> str:
        """``servedModelName``, else the model's name."""
        return self.served_model_name or model


PICKER_PORT_MESSAGE = "routing.inferencePool.create.endpointPickerRef.port: required when kind is Service"
ONE_OF_MESSAGE = "routing.inferencePool: set exactly one of create and join"

ROUTING_CEL_RULES: dict[str, list[dict[str, str]]] = {
    "EndpointPickerRef": [{
        "rule": "(has(self.kind) && self.kind != 'Service') || has(self.port)",
        "message": PICKER_PORT_MESSAGE,
        "reason": "FieldValueRequired",
    }],
    "InferencePoolRouting": [{
        "rule": "has(self.create) != has(self.join)",
        "message": ONE_OF_MESSAGE,
        "reason": "FieldValueInvalid",
    }],
}
"""CEL for ``ctxfit.api.crd`` (the same rules as the validators above)."""


PoolRole = Literal["Created", "Joined"]


class PoolMember(WireModel):
    """One server of the pool as its creator sees it (``status.routing.members``)."""

    server: Annotated[str, Field(max_length=253)]
    """The InferenceServer's name."""
    gpu_product: Annotated[str, Field(max_length=253)] | None = None
    """The GPU product it runs on."""
    context_length: int | None = None
    """Tokens its pods say they hold (the context label)."""
    target_context_length: int | None = None
    """Tokens it promised (spec.context.target, else its planned context)."""
    ready_replicas: int | None = None
    """Its engine replicas that are Ready."""


class RoutingStatus(WireModel):
    """``status.routing``: the pool in force and the context each pod of this server says it holds.

    Attributes:
        pool: the InferencePool's name.
        role: Created (this server owns it) or Joined.
        served_model_name: ``--served-model-name`` in force.
        context_length: tokens the Ready pods' context labels say (the shortest when two attempts overlap): their
            attempt's effective context, lowered to what the engine reported holding (``status.observed``); with no
            Ready pod, what the current attempt's pods will say.
        context_range: the router label's value (``llm-d.ai/context-length-range``), ``0-<contextLength>``.
        target_ports: the ports of this server's pods in the pool (one per data-parallel rank when each rank
            serves its own port).
        pool_target_context_length: the longest context any server of the pool promised.
        pool_max_context_length: the longest context a Ready replica of the pool holds.
        ready_replicas: this server's engine replicas (pods, or group leaders) that are Ready in the pool.
        members: the pool's servers (written by the pool's creator).
    """

    pool: Annotated[str, Field(max_length=63)]
    role: PoolRole
    served_model_name: Annotated[str, Field(max_length=SERVED_MODEL_NAME_MAX)] | None = None
    context_length: int | None = None
    context_range: Annotated[str, Field(max_length=63)] | None = None
    target_ports: list[int] = Field(default_factory=list, max_length=MAX_TARGET_PORTS)
    pool_target_context_length: int | None = None
    pool_max_context_length: int | None = None
    ready_replicas: int | None = None
    members: list[PoolMember] = Field(default_factory=list, max_length=1000)


SHARED_DP_FLAG = "--enable-dp-attention"
"""SGLang's data-parallel attention: its DP ranks are one model instance (attention split by DP, the MoE layers
shared across them), so they run as one server behind one port (``srt/server_args.py`` ``enable_dp_attention``,
0.4.0 - 0.5.23)."""


def rank_ports_apply(engine: str, nodes: int, data: int, pooled: bool, engine_args: Sequence[str] = ()) -> bool:
    """Whether each data-parallel rank serves its own port: one pod per replica, data > 1, in a pool, and the
    engine can run a rank as a server of its own: vLLM (external load balancing, ``--data-parallel-rank``;
    ``ctxfit.engines.vllm.ranks``), SGLang unless ``--enable-dp-attention`` is in ``engine.args``
    (``ctxfit.engines.sglang.launch``: one ``launch_server`` per replica)."""
    if not (pooled and nodes == 1 and data > 1):
        return False
    if engine == "vllm":
        return True
    return engine == "sglang" and SHARED_DP_FLAG not in engine_args


def pool_port_problem(engine: str, nodes: int, data: int, port: int, pooled: bool,
                      engine_args: Sequence[str] = ()) -> str | None:
    """Why the ports of a pooled server do not fit an InferencePool, None when they do (one sentence)."""
    if not rank_ports_apply(engine, nodes, data, pooled, engine_args):
        return None
    if data > MAX_TARGET_PORTS:
        return (f"routing.inferencePool: each of the {data} data-parallel ranks serves its own port, and an "
                f"InferencePool holds at most {MAX_TARGET_PORTS} (lower parallelism.data)")
    if port + data - 1 > 65535:
        return f"serving.port: ranks serve ports {port}..{port + data - 1}, above 65535"
    return None


POOL_PORT_CEL_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.routing) || !has(self.routing.inferencePool) || "
        "(self.engine.kind != 'vllm' && self.engine.kind != 'sglang') || "
        f"(self.engine.kind == 'sglang' && has(self.engine.args) && '{SHARED_DP_FLAG}' in self.engine.args) || "
        "(has(self.nodes) && self.nodes > 1) || !has(self.parallelism) || !has(self.parallelism.data) || "
        f"self.parallelism.data <= {MAX_TARGET_PORTS}",
        "message": f"routing.inferencePool: each data-parallel rank serves its own port, and an InferencePool "
        f"holds at most {MAX_TARGET_PORTS} (lower parallelism.data)",
        "reason": "FieldValueInvalid",
    },
]
"""CEL on ``InferenceServerSpec`` (``pool_port_problem``'s first rule; the port bound is the validator's)."""
