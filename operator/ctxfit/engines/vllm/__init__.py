"""vLLM: memory model, flags, probes, defaults and metric names (one engine, one package).

Flags: ``vllm serve MODEL`` with ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
``--data-parallel-size``, ``--enable-expert-parallel``, ``--max-model-len``,
``--gpu-memory-utilization``, ``--kv-cache-dtype``, ``--max-num-seqs``, ``--max-num-batched-tokens``
and ``--max-cudagraph-capture-size`` (0.11+; vLLM ``config/compilation.py``) [flag history
unverified before 0.11]. Health: ``GET /health`` (0.33 ``entrypoints/serve/instrumentator/health.py``);
metrics: ``vllm:kv_cache_usage_perc`` (older ``vllm:gpu_cache_usage_perc``) (A.4).

Metric names across versions (vLLM ``vllm/v1/metrics/loggers.py``; the rename is PR #18354,
https://github.com/vllm-project/vllm/pull/18354): up to 0.9.1 only ``vllm:gpu_cache_usage_perc``; from 0.9.2
both, the old one "DEPRECATED: Use vllm:kv_cache_usage_perc instead"; 0.11 hides the old one (shown only with
``--show-hidden-metrics-for-version=0.10``); from 0.12 only ``vllm:kv_cache_usage_perc``. Both are a 0-1 fraction
of the KV blocks in use, one series per engine (label ``engine``: one per data-parallel rank).
``vllm:num_requests_waiting`` kept its name throughout. The autoscaler reads both KV names
(``ctxfit.render.scaledobject``), newer first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import EffectiveConfig, EngineKind, InferenceServerSpec
from ctxfit.engines.base import BudgetTerms, EngineBase, KVDtypeDecision, Launch
from ctxfit.engines.common import container_defaults, format_fraction
from ctxfit.vocab.version import parse_version

from . import features, flags, memory
from .dtypes import resolve_kv_dtype

if TYPE_CHECKING:
    from ctxfit.engines.group import GroupRoles
    from ctxfit.vocab.inputs import PlanInputs

DEFAULT_VERSION = "0.20.0"
IMAGE_REPOSITORY = "vllm/vllm-openai"
COMMAND = ("vllm", "serve")
DEFAULT_UTILIZATION_OLD = 0.90
DEFAULT_UTILIZATION_NEW = 0.92
UTILIZATION_092_SINCE = (0, 20, 0)
DEFAULT_CUDA_GRAPH_CAPTURE = 512
UNPLANNED_VERSION = (99, 0, 0)
"""Version assumed by ``unplanned_defaults`` when the spec names none: the newest defaults."""
CAPTURE_SIZE_FLAG_SINCE = (0, 12, 0)
"""``--max-cudagraph-capture-size`` exists from 0.12.0 (tests/fixtures/engine-flags/vllm.json; 0.11.0 has neither the
flag nor ``CompilationConfig.max_cudagraph_capture_size``)."""
GRAPH_SIZES_FLAG = ((0, 9, 0), (0, 12, 0))
"""``--cuda-graph-sizes N`` (0.9.0-0.12.0): one value is the largest captured size ("if one value is provided, then
the capture list would follow the pattern: [1, 2, 4] + [i for i in range(8, cuda_graph_sizes + 1, 8)]",
``config.py SchedulerConfig.cuda_graph_sizes``); ctxfit renders it where the capture-size flag does not exist."""
BLOCK_SIZE_GQA = 16
BLOCK_SIZE_MLA = 64
NULL_BLOCK_SINCE = (0, 20, 0)


class VLLM(EngineBase):
    """The vLLM engine (V1; V0 wording handled by the failure patterns)."""

    kind = EngineKind.VLLM
    package = __name__
    default_version = DEFAULT_VERSION
    image_repository = IMAGE_REPOSITORY
    probe_utilization = 0.9
    default_port = 8000
    kv_usage_metrics: tuple[str, ...] = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    preemption_metric = "vllm:num_preemptions_total"
    waiting_metric = "vllm:num_requests_waiting"
    command: tuple[str, ...] = COMMAND
    display_name = "vLLM"
    tp_splits_experts = False
    state_pool_ratio: float | None = None  # state and KV share one block pool (V1 hybrid allocator)
    memory_knob = "gpuMemoryUtilization"
    display_with_article = "a vLLM"

    def draft_own_geometry(self, inputs: PlanInputs) -> bool:
        """The drafter's layers get their own KV specs."""
        return True

    def draft_pool_in_budget(self, inputs: PlanInputs) -> bool:
        """The drafter's layers get KV blocks in the target's pool (module ``features``)."""
        return True

    def capability_problems(self, inputs: PlanInputs) -> list[str]:
        """``capability.capability_problems``."""
        from .capability import capability_problems

        return capability_problems(inputs)

    def unplanned_defaults(self, spec: InferenceServerSpec) -> tuple[float | None, float | None, int]:
        """The spec's utilization, else the default of its version (unknown: the newest, 0.92); graph batch 512."""
        version = parse_version(spec.engine.version, default=UNPLANNED_VERSION)
        default = DEFAULT_UTILIZATION_NEW if version >= UTILIZATION_092_SINCE else DEFAULT_UTILIZATION_OLD
        return spec.memory.gpu_memory_utilization or default, None, DEFAULT_CUDA_GRAPH_CAPTURE

    def free_at_load_bytes(self, inputs: PlanInputs) -> int | None:
        """None: vLLM's utilization is of the CUDA total, not of the memory free at load."""
        return None

    def logged_version(self, text: str) -> tuple[int, int] | None:
        """``startup.logged_version`` (vLLM logs its version at start-up)."""
        from .startup import logged_version

        return logged_version(text)

    def group_roles(self, spec: InferenceServerSpec, effective: EffectiveConfig,
                    engine_args: list[str]) -> GroupRoles:
        """``multinode.vllm_group_roles``."""
        from .multinode import vllm_group_roles

        return vllm_group_roles(spec, effective, engine_args)

    def resolve_kv_dtype(self, inputs: PlanInputs, requested: str) -> KVDtypeDecision:
        """See ``dtypes.resolve_kv_dtype``."""
        return resolve_kv_dtype(
            requested, arch=inputs.architecture, cc=inputs.compute_capability, version=inputs.engine_version
        )

    def sizing_dtype(self, inputs: PlanInputs, kv_cache_dtype: str) -> str:
        """vLLM sizes the cache with the dtype it runs (``fp8_ds_mla`` has its own 656 B layout)."""
        return kv_cache_dtype

    def finalize(self, inputs: PlanInputs, effective: EffectiveConfig, pool_tokens: int) -> EffectiveConfig:
        """vLLM needs no adjustment once the context is chosen."""
        return effective

    def block_size(self, inputs: PlanInputs) -> int:
        """KV block size in tokens: ``--block-size`` from engine.args, else 16 (FlashAttention default), 64 for MLA
        backends (FlashMLA)."""
        from ctxfit.api import AttentionKind

        given = flags.block_size(inputs)
        if given is not None:
            return given
        return BLOCK_SIZE_MLA if inputs.architecture.attention is AttentionKind.MLA else BLOCK_SIZE_GQA

    def null_blocks(self, inputs: PlanInputs) -> int:
        """Blocks reserved besides requests: one null block from 0.20 (``check_memory = available - block``)."""
        return 1 if inputs.engine_version >= NULL_BLOCK_SINCE else 0

    def max_num_batched_tokens(self, inputs: PlanInputs, kv_cache_dtype: str | None = None) -> int:
        """The spec's value, else vLLM's server default by device memory (and engine: a ``kv_cache_dtype`` that
        sends 0.8-0.10 to V0 gets V0's; None: the dtype the spec's request resolves to)."""
        if inputs.spec.batching.max_num_batched_tokens:
            return inputs.spec.batching.max_num_batched_tokens
        if kv_cache_dtype is None:
            kv_cache_dtype = self.resolve_kv_dtype(inputs, inputs.spec.memory.kv_cache_dtype).kv_cache_dtype
        product = inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product
        return memory.batch_defaults(
            inputs.cuda_total_bytes, inputs.engine_version, product, memory.container_env(inputs),
            inputs.compute_capability, kv_cache_dtype, mla=memory.is_mla(inputs),
        )[0]

    def in_flight_tokens(self, inputs: PlanInputs) -> int:
        """Tokens in flight for sliding-window reservations: 2 x max_num_batched_tokens (async scheduling)."""
        return 2 * self.max_num_batched_tokens(inputs)

    def default_effective(self, inputs: PlanInputs, *, kv_cache_dtype: str) -> EffectiveConfig:
        """Spec values, else vLLM defaults: utilization 0.90 (<= 0.19) / 0.92, seqs by device memory."""
        spec = inputs.spec
        version = inputs.engine_version
        default_util = DEFAULT_UTILIZATION_NEW if version >= UTILIZATION_092_SINCE else DEFAULT_UTILIZATION_OLD
        product = inputs.gpu.product if inputs.gpu else spec.gpu.product
        default_seqs = memory.batch_defaults(
            inputs.cuda_total_bytes, version, product, memory.container_env(inputs), inputs.compute_capability,
            kv_cache_dtype, mla=memory.is_mla(inputs),
        )[1]
        mem_limit, shm, startup = container_defaults(inputs, flags.host_bytes(spec) + features.host_bytes(inputs))
        return EffectiveConfig(
            context_length=0,
            gpu_memory_utilization=spec.memory.gpu_memory_utilization or default_util,
            mem_fraction_static=None,
            kv_cache_dtype=kv_cache_dtype,
            max_num_seqs=spec.batching.max_num_seqs or default_seqs,
            cuda_graph_max_batch_size=spec.batching.cuda_graph_max_batch_size or DEFAULT_CUDA_GRAPH_CAPTURE,
            memory_limit_bytes=mem_limit,
            shm_bytes=shm,
            startup_timeout_seconds=startup,
            **features.default_knobs(inputs),
        )

    def budget(self, inputs: PlanInputs, effective: EffectiveConfig) -> BudgetTerms:
        """See ``memory.budget``."""
        tokens = self.max_num_batched_tokens(inputs, effective.kv_cache_dtype)
        return memory.budget(inputs, effective, max_num_batched_tokens=tokens)

    def check_rest(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """Warn when what vLLM keeps outside the budget (CUDA context, graphs not deducted, Model Runner V2's
        sampler state) exceeds what is left."""
        left = terms.cuda_total_bytes - terms.usable_bytes
        if terms.outside_bytes > left:
            return [
                f"gpu-memory-utilization {effective.gpu_memory_utilization} leaves {left / 2**30:.2f} GiB outside "
                f"the budget, but what vLLM keeps outside it (CUDA context, graphs, sampler state) needs "
                f"~{terms.outside_bytes / 2**30:.2f} GiB: "
                "risk of CUDA OOM during graph capture"
            ]
        return []

    def rest_blocking(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """vLLM checks its own budget at start-up; nothing outside it blocks a plan."""
        return []

    def engine_args(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> list[str]:
        """``vllm serve`` arguments (after the program), user ``engine.args`` last (``feature_args``)."""
        version = self._version(spec.engine.version)
        p = spec.parallelism
        args = [spec.model.name, "--host", "0.0.0.0", "--port", str(spec.serving.port)]
        args += ["--tensor-parallel-size", str(p.tensor)]
        if p.pipeline > 1:
            args += ["--pipeline-parallel-size", str(p.pipeline)]
        if p.data > 1:
            args += ["--data-parallel-size", str(p.data)]
        if p.expert:
            args += ["--enable-expert-parallel"]
        args += ["--max-model-len", str(effective.context_length)]
        assert effective.gpu_memory_utilization is not None
        args += ["--gpu-memory-utilization", format_fraction(effective.gpu_memory_utilization)]
        args += ["--kv-cache-dtype", effective.kv_cache_dtype]
        args += ["--max-num-seqs", str(effective.max_num_seqs)]
        if spec.batching.max_num_batched_tokens:
            args += ["--max-num-batched-tokens", str(spec.batching.max_num_batched_tokens)]
        if version >= CAPTURE_SIZE_FLAG_SINCE:
            args += ["--max-cudagraph-capture-size", str(effective.cuda_graph_max_batch_size)]
        elif GRAPH_SIZES_FLAG[0] <= version < GRAPH_SIZES_FLAG[1]:
            args += ["--cuda-graph-sizes", str(effective.cuda_graph_max_batch_size)]
        return args + self.feature_args(spec, effective, version)

    def api_ports(self, spec: InferenceServerSpec) -> tuple[int, ...]:
        """See ``ranks.rank_ports``."""
        from . import ranks

        return ranks.rank_ports(spec)

    def launch(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> Launch:
        """``vllm serve`` on ``serving.port``; in a pool with data parallelism, one API server per rank
        (``ranks``: the ports ``serving.port + rank`` and an exec readiness probe over all of them)."""
        from . import ranks

        args = self.engine_args(spec, effective)
        ports = self.api_ports(spec)
        if len(ports) == 1:
            return Launch(list(self.command), args, ports)
        command, rank_args = ranks.rank_launch(spec, self.command, args)
        return Launch(command, rank_args, ports, ranks.readiness_command(self.health_path, ports))
