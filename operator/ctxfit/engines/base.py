"""The engine Protocol: what every engine module provides, and the budget terms it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, Protocol

from ctxfit.api import EffectiveConfig, EngineKind, InferenceServerSpec
from ctxfit.engines.common import probe_effective
from ctxfit.engines.extras import ExtraTerm
from ctxfit.engines.flags import missing_in_version, refusals, unknown
from ctxfit.vocab.version import parse_version

if TYPE_CHECKING:
    from ctxfit.engines.flags import FlagEffects, FlagTable, Occurrence
    from ctxfit.vocab.inputs import PlanInputs
    from ctxfit.vocab.patterns import FailurePattern, PhaseMarker
    from ctxfit.vocab.startup import StartupReport

    from .group import GroupRoles


@dataclass(frozen=True)
class BudgetTerms:
    """Per-GPU memory budget, bytes. ``usable = weights + activation + cuda_graph + other + in-budget extras +
    kv_cache``.

    Attributes:
        total_bytes: NVML / GFD total of one GPU.
        cuda_total_bytes: CUDA-visible total (NVML minus the driver reserve).
        usable_bytes: what the engine budgets (vLLM: utilization x CUDA total; SGLang: fraction x free).
        weights_bytes: model weights on one GPU.
        activation_bytes: transient peak of the profile run (forward or sampler warm-up).
        cuda_graph_bytes: CUDA-graph pool counted inside the budget (0 where the engine does not deduct it).
        other_bytes: non-torch memory counted in the budget (NCCL / custom all-reduce buffers, workspace).
        kv_cache_bytes: the KV pool (may be negative: then nothing fits).
        outside_bytes: memory the engine uses outside ``usable`` (CUDA context, graphs not deducted).
        notes: one line per term explaining its source.
        extras: the terms LoRA and speculative decoding add (``engines.extras.ExtraTerm``), each with its source.
    """

    total_bytes: int
    cuda_total_bytes: int
    usable_bytes: int
    weights_bytes: int
    activation_bytes: int
    cuda_graph_bytes: int
    other_bytes: int
    kv_cache_bytes: int
    outside_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    extras: tuple[ExtraTerm, ...] = ()

    @property
    def extra_in_budget_bytes(self) -> int:
        """The extras that come out of the budget, bytes."""
        return sum(e.bytes for e in self.extras if e.in_budget)


@dataclass(frozen=True)
class KVDtypeDecision:
    """The KV dtype an engine will actually use, and why it differs from the request (if it does)."""

    kv_cache_dtype: str
    reason: str | None = None


@dataclass(frozen=True)
class Launch:
    """How the engine container starts and where it serves.

    Attributes:
        command: the container's ``command`` (program).
        args: the container's ``args``.
        ports: the API ports of the pod, in order (the first is ``spec.serving.port``); more than one when
            each data-parallel rank serves its own (``ctxfit.engines.vllm.ranks``).
        readiness_command: an exec readiness probe checking every port (None: an HTTP probe on the first).
    """

    command: list[str]
    args: list[str]
    ports: tuple[int, ...]
    readiness_command: list[str] | None = None


class Engine(Protocol):
    """One inference engine: memory model, flags, probes, defaults, metric names.

    Implementations: ``ctxfit.engines.vllm.VLLM``, ``ctxfit.engines.sglang.SGLang``.
    """

    kind: EngineKind
    default_port: int
    health_path: str
    metrics_path: str
    kv_usage_metrics: tuple[str, ...]
    preemption_metric: str
    waiting_metric: str
    command: tuple[str, ...]
    display_name: str
    """The engine's name in sentences: "vLLM", "SGLang"."""
    tp_splits_experts: bool
    """MoE: tensor parallelism shards the experts (SGLang's default MoE TP), so TP must divide their count or
    intermediate size; vLLM's fused MoE layers pad instead."""
    state_pool_ratio: float | None
    """Hybrid models: the fixed ratio of recurrent-state pool to KV pool (SGLang ``mamba_full_memory_ratio``);
    None when state and KV share one block pool (vLLM)."""
    memory_knob: str
    """Wire name (``EffectiveConfig.to_wire``) of the memory fraction this engine budgets with:
    "gpuMemoryUtilization" (vLLM), "memFractionStatic" (SGLang)."""
    display_with_article: str
    """``display_name`` with its indefinite article, for sentences: "a vLLM", "an SGLang"."""

    def draft_own_geometry(self, inputs: PlanInputs) -> bool:
        """The draft's KV follows its own geometry (vLLM; SGLang's separate draft pool before 0.5.14), else the
        target's per-layer size (SGLang's joint cell from 0.5.14)."""
        ...

    def draft_pool_in_budget(self, inputs: PlanInputs) -> bool:
        """The draft's KV shares the budgeted pool (each token costs target + draft bytes); False: a second pool
        allocated after the target's, outside the budget."""
        ...

    def default_image(self, version: str | None) -> str:
        """Container image for a version (the official one)."""
        ...

    def capability_problems(self, inputs: PlanInputs) -> list[str]:
        """Sentences for each compute-capability rule of this engine version the plan's GPU breaks
        (``<engine>.capability``); [] when none does or the capability is unknown."""
        ...

    def unplanned_defaults(self, spec: InferenceServerSpec) -> tuple[float | None, float | None, int]:
        """(gpu-memory-utilization, mem-fraction-static, CUDA-graph max batch) for a spec that cannot be planned: the
        spec's value, else this engine's default; the fraction the engine does not have is None
        (``recovery.current.fallback_effective``)."""
        ...

    def free_at_load_bytes(self, inputs: PlanInputs) -> int | None:
        """Memory free at weight load that this engine's memory fraction multiplies, bytes, as the plan computes it
        (SGLang ``mem-fraction-static``: the weights come out of it); None where the fraction multiplies the GPU's
        total (vLLM)."""
        ...

    def image_cuda(self, version: str | None) -> tuple[int, int] | None:
        """CUDA (major, minor) the official image of ``version`` needs from the node's driver (None: unknown)."""
        ...

    def failure_patterns(self) -> tuple[tuple[FailurePattern, ...], tuple[PhaseMarker, ...]]:
        """The engine's failure wordings and start-up phase markers (``<engine>.failures``)."""
        ...

    def parse_startup(self, text: str) -> StartupReport:
        """The engine's own start-up accounting in its log ``text`` (``<engine>.startup``); never raises."""
        ...

    def logged_version(self, text: str) -> tuple[int, int] | None:
        """(major, minor) of the engine that wrote ``text`` when its log states it; None when not observed."""
        ...

    def group_roles(self, spec: InferenceServerSpec, effective: EffectiveConfig,
                    engine_args: list[str]) -> GroupRoles:
        """Leader and worker wiring for a multi-node group (``<engine>.multinode``)."""
        ...

    def resolve_kv_dtype(self, inputs: PlanInputs, requested: str) -> KVDtypeDecision:
        """The KV dtype this engine version supports on this GPU for this attention kind."""
        ...

    def sizing_dtype(self, inputs: PlanInputs, kv_cache_dtype: str) -> str:
        """The dtype whose layout sizes the KV cache (may differ from the flag, e.g. SGLang DSA fp8)."""
        ...

    def block_size(self, inputs: PlanInputs) -> int:
        """KV block (page) size in tokens, for rounding."""
        ...

    def null_blocks(self, inputs: PlanInputs) -> int:
        """Blocks the engine keeps besides requests (vLLM's null block)."""
        ...

    def in_flight_tokens(self, inputs: PlanInputs) -> int:
        """Tokens in flight that sliding-window layers must keep beyond the window."""
        ...

    def finalize(self, inputs: PlanInputs, effective: EffectiveConfig, pool_tokens: int) -> EffectiveConfig:
        """Adjust engine-derived values once the context is chosen (e.g. SGLang max running requests)."""
        ...

    def default_effective(self, inputs: PlanInputs, *, kv_cache_dtype: str) -> EffectiveConfig:
        """Effective configuration before the context is chosen (context_length = 0)."""
        ...

    def budget(self, inputs: PlanInputs, effective: EffectiveConfig) -> BudgetTerms:
        """Per-GPU memory budget for this configuration."""
        ...

    def check_rest(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """Problems outside the KV pool (e.g. SGLang's (1 - fraction) slack too small); empty if none."""
        ...

    def rest_blocking(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """Problems outside the KV pool that would make the start fail (the plan then does not fit)."""
        ...

    def engine_args(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> list[str]:
        """The engine's command line (program and flags, each flag and value a separate item)."""
        ...

    def flag_refusals(self, spec: InferenceServerSpec) -> list[tuple[str, str]]:
        """Why the spec cannot run as planned: (spec field, message) per managed, refused or (not allowed)
        conditional flag of ``engine.args`` (the message names the spec field to use), and per flag ctxfit would
        render that the engine version does not have (``engines.flags``); empty when none."""
        ...

    def flag_effects(self, inputs: PlanInputs) -> FlagEffects:
        """What the modelled flags of ``spec.engine.args`` change before budgeting (``engines.flags``)."""
        ...

    def feature_problems(self, inputs: PlanInputs) -> list[tuple[str, str]]:
        """(spec field, message) for LoRA / speculative settings this engine version cannot run."""
        ...

    def unknown_flags(self, spec: InferenceServerSpec) -> list[str]:
        """Flags of ``spec.engine.args`` in no version of the engine ctxfit read (their memory effect is unknown)."""
        ...

    def api_ports(self, spec: InferenceServerSpec) -> tuple[int, ...]:
        """The API ports of one single-node pod: ``(serving.port,)``, or one per data-parallel rank when the engine
        serves each rank on its own port (vLLM in an InferencePool, ``ctxfit.engines.vllm.ranks``)."""
        ...

    def launch(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> Launch:
        """The single-pod container's command, args and API ports (``command`` + ``engine_args`` on
        ``serving.port``, unless the engine serves one port per data-parallel rank)."""
        ...


_FeatureArgs = Callable[[InferenceServerSpec, EffectiveConfig, tuple[int, int, int]], list[str]]
"""``<package>.features.lora_args`` / ``speculative_args``: (spec, effective, engine version) -> flags."""


class EngineBase:
    """What the engine packages implement alike, from the modules every one has (``<package>.cuda``, ``.failures``,
    ``.startup``, ``.flags``, ``.features``) and a few class attributes; ``ctxfit.engines.vllm.VLLM`` and
    ``ctxfit.engines.sglang.SGLang`` derive from it and add the rest of the ``Engine`` Protocol.

    Class attributes a subclass sets: ``package`` (its package, ``ctxfit.engines.vllm``), ``default_version``,
    ``image_repository``, ``display_name``, ``command``, and its memory knob for the probe configuration
    ``flag_refusals`` renders with (``probe_utilization``: vLLM; ``probe_fraction``: SGLang).
    """

    health_path = "/health"
    metrics_path = "/metrics"
    package: ClassVar[str]
    default_version: ClassVar[str]
    image_repository: ClassVar[str]
    probe_utilization: ClassVar[float | None] = None
    probe_fraction: ClassVar[float | None] = None
    display_name: str
    command: tuple[str, ...]

    def _part(self, name: str) -> ModuleType:
        """The engine package's module ``name`` (imported on first use, as the engines' lazy imports did)."""
        return import_module(f"{self.package}.{name}")

    def _version(self, version: str | None) -> tuple[int, int, int]:
        """``version`` parsed; ``default_version`` when None or unparsable."""
        return parse_version(version, default=parse_version(self.default_version, default=(0, 0, 0)))

    def _flags(self) -> tuple[FlagTable, Callable[[InferenceServerSpec], list[Occurrence]]]:
        """The engine's flag table and parser (``<package>.flags`` ``TABLE``, ``occurrences``)."""
        flags = self._part("flags")
        table: FlagTable = flags.TABLE
        occurrences: Callable[[InferenceServerSpec], list[Occurrence]] = flags.occurrences
        return table, occurrences

    def engine_args(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> list[str]:
        """The engine's command line (subclasses)."""
        raise NotImplementedError

    def default_image(self, version: str | None) -> str:
        """``<image_repository>:v<version>`` (default ``default_version``): the engine's official image."""
        return f"{self.image_repository}:v{(version or self.default_version).lstrip('v')}"

    def image_cuda(self, version: str | None) -> tuple[int, int] | None:
        """``<package>.cuda.image_cuda`` of ``version`` (default ``default_version``)."""
        image_cuda: Callable[[tuple[int, int, int]], tuple[int, int] | None] = self._part("cuda").image_cuda
        return image_cuda(self._version(version))

    def failure_patterns(self) -> tuple[tuple[FailurePattern, ...], tuple[PhaseMarker, ...]]:
        """``<package>.failures`` ``FAILURE_PATTERNS`` and ``PHASE_MARKERS``."""
        failures = self._part("failures")
        patterns: tuple[FailurePattern, ...] = failures.FAILURE_PATTERNS
        markers: tuple[PhaseMarker, ...] = failures.PHASE_MARKERS
        return patterns, markers

    def parse_startup(self, text: str) -> StartupReport:
        """``<package>.startup.parse_startup``."""
        parse: Callable[[str], StartupReport] = self._part("startup").parse_startup
        return parse(text)

    def flag_refusals(self, spec: InferenceServerSpec) -> list[tuple[str, str]]:
        """See ``engines.flags.refusals`` (the table: ``<package>.flags.RULES``) and
        ``engines.flags.missing_in_version`` (what ctxfit would render, with the probe knobs, that the version's
        parser does not have)."""
        table, occurrences = self._flags()
        text = (spec.engine.version or self.default_version).lstrip("v")
        probe = probe_effective(gpu_memory_utilization=self.probe_utilization, mem_fraction_static=self.probe_fraction,
                                max_loras=1, max_lora_rank=8, max_cpu_loras=1, num_speculative_tokens=1)
        rendered = self.engine_args(spec, probe)
        return [*refusals(occurrences(spec), spec, self.display_name, text),
                *missing_in_version(rendered, table, self._version(text))]

    def flag_effects(self, inputs: PlanInputs) -> FlagEffects:
        """See ``<package>.flags.effects``."""
        effects: Callable[[PlanInputs], FlagEffects] = self._part("flags").effects
        return effects(inputs)

    def unknown_flags(self, spec: InferenceServerSpec) -> list[str]:
        """Flags in no parser of the engine read (``<package>.flags.TABLE.versions_read``)."""
        return unknown(self._flags()[1](spec))

    def feature_problems(self, inputs: PlanInputs) -> list[tuple[str, str]]:
        """See ``<package>.features.problems``."""
        problems: Callable[[PlanInputs], list[tuple[str, str]]] = self._part("features").problems
        return problems(inputs)

    def feature_args(self, spec: InferenceServerSpec, effective: EffectiveConfig, version: tuple[int, int, int]
                     ) -> list[str]:
        """The end of the engine's command line: ``<package>.features`` LoRA and speculative-decoding flags,
        ``--served-model-name`` (``spec.routing.servedModelName``), then the user's ``engine.args``."""
        features = self._part("features")
        lora_args: _FeatureArgs = features.lora_args
        speculative_args: _FeatureArgs = features.speculative_args
        args = lora_args(spec, effective, version) + speculative_args(spec, effective, version)
        if spec.routing.served_model_name:
            args += ["--served-model-name", spec.routing.served_model_name]
        return args + list(spec.engine.args)
