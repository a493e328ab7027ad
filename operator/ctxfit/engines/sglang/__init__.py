"""SGLang: memory model, flags, probes, defaults and metric names (one engine, one package).

Flags (``python3 -m sglang.launch_server``): ``--model-path``, ``--tp-size``, ``--pp-size``,
``--dp-size``, ``--ep-size``, ``--context-length``, ``--mem-fraction-static``, ``--kv-cache-dtype``,
``--max-running-requests``, ``--cuda-graph-max-bs`` (``--cuda-graph-max-bs-decode`` from 0.5.23),
``--enable-metrics`` (B.1, B.3). Health: ``GET /health``; readiness log "The server is fired up and
ready to roll!"; KV metric ``sglang:token_usage``.

Metrics (SGLang ``python/sglang/srt/metrics/collector.py`` ``SchedulerMetricsCollector``, exported with
``--enable-metrics``): ``sglang:token_usage`` (0-1 fraction of the KV pool's tokens in use) and
``sglang:num_queue_reqs`` (requests in the waiting queue) have kept their names across 0.4-0.5; one series per
data-parallel rank, from its TP-0 scheduler (all TP ranks only with ``--enable-metrics-for-all-schedulers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import AttentionKind, EffectiveConfig, EngineKind, InferenceServerSpec, MiB
from ctxfit.api.routing import rank_ports_apply
from ctxfit.engines import ranks as engine_ranks
from ctxfit.engines.base import BudgetTerms, EngineBase, KVDtypeDecision, Launch
from ctxfit.engines.common import container_defaults, format_fraction

from . import features, flags, memory

if TYPE_CHECKING:
    from ctxfit.engines.group import GroupRoles
    from ctxfit.vocab.inputs import PlanInputs

DEFAULT_VERSION = "0.5.23"
MAMBA_FULL_MEMORY_RATIO = 0.9
"""``ServerArgs.mamba_full_memory_ratio`` default (``server_args.py``): state pool = ratio x KV pool."""
IMAGE_REPOSITORY = "lmsysorg/sglang"
COMMAND = ("python3", "-m", "sglang.launch_server")
DECODE_GRAPH_FLAG_SINCE = (0, 5, 14)
DP_RANK_ENV = "SGLANG_DP_RANK"
"""Read by SGLang's scheduler when no DP controller gives it a rank ("[For Router]", 0.4.0 - 0.5.23)."""
"""``--cuda-graph-max-bs-decode`` exists from 0.5.14 and ``--cuda-graph-max-bs`` up to 0.5.19
(tests/fixtures/engine-flags/sglang.json)."""
PAGE_SIZE = 1
UNPLANNED_MEM_FRACTION_STATIC = 0.85
"""mem-fraction-static of a spec that cannot be planned: a typical value of SGLang's heuristic on 80 GB GPUs."""
UNPLANNED_CUDA_GRAPH_MAX_BS = 256
"""cuda-graph-max-bs of a spec that cannot be planned: SGLang's H100-class ``cuda_graph_max_bs``."""


class SGLang(EngineBase):
    """The SGLang engine (0.4 - 0.5.23)."""

    kind = EngineKind.SGLANG
    package = __name__
    default_version = DEFAULT_VERSION
    image_repository = IMAGE_REPOSITORY
    probe_fraction = 0.8
    default_port = 30000
    kv_usage_metrics: tuple[str, ...] = ("sglang:token_usage",)
    preemption_metric = "sglang:num_retracted_reqs"
    waiting_metric = "sglang:num_queue_reqs"
    command: tuple[str, ...] = COMMAND
    display_name = "SGLang"
    tp_splits_experts = True
    state_pool_ratio: float | None = MAMBA_FULL_MEMORY_RATIO
    memory_knob = "memFractionStatic"
    display_with_article = "an SGLang"

    def draft_own_geometry(self, inputs: PlanInputs) -> bool:
        """The draft worker's own pool (before 0.5.14) follows its model; the joint cell does not."""
        return not features.draft_pool_in_budget(inputs)

    def draft_pool_in_budget(self, inputs: PlanInputs) -> bool:
        """See ``features.draft_pool_in_budget``."""
        return features.draft_pool_in_budget(inputs)

    def capability_problems(self, inputs: PlanInputs) -> list[str]:
        """``capability.capability_problems``."""
        from .capability import capability_problems

        return capability_problems(inputs)

    def unplanned_defaults(self, spec: InferenceServerSpec) -> tuple[float | None, float | None, int]:
        """The spec's fraction, else ``UNPLANNED_MEM_FRACTION_STATIC``; graph batch ``UNPLANNED_CUDA_GRAPH_MAX_BS``."""
        return None, spec.memory.mem_fraction_static or UNPLANNED_MEM_FRACTION_STATIC, UNPLANNED_CUDA_GRAPH_MAX_BS

    def free_at_load_bytes(self, inputs: PlanInputs) -> int | None:
        """``memory.pre_free_bytes``: mem-fraction-static is of the memory free at weight load."""
        return memory.pre_free_bytes(inputs)

    def logged_version(self, text: str) -> tuple[int, int] | None:
        """None: SGLang does not log its version in the start-up lines it prints."""
        return None

    def group_roles(self, spec: InferenceServerSpec, effective: EffectiveConfig,
                    engine_args: list[str]) -> GroupRoles:
        """``multinode.sglang_group_roles``."""
        from .multinode import sglang_group_roles

        return sglang_group_roles(spec, effective, engine_args)

    def resolve_kv_dtype(self, inputs: PlanInputs, requested: str) -> KVDtypeDecision:
        """SGLang dtype names (``fp8`` -> ``fp8_e4m3``); e4m3 needs SM 8.9+; DSA on SM120 keeps bf16
        (TileLang DSA backend, flashinfer issue #5290 [3rd-party]); no ``fp8_ds_mla`` flag in SGLang."""
        arch = inputs.architecture
        cc = inputs.compute_capability
        dtype = "fp8_e4m3" if requested in ("fp8", "fp8_ds_mla") else requested
        if dtype == "fp8_e4m3" and cc is not None and cc < (8, 9):
            return KVDtypeDecision("auto", f"FP8 e4m3 KV cache needs SM 8.9+; this GPU is SM {cc[0]}.{cc[1]}")
        if dtype == "nvfp4" and cc is not None and cc < (10, 0):
            return KVDtypeDecision("auto", f"nvfp4 KV cache needs SM100 or SM120; this GPU is SM {cc[0]}.{cc[1]}")
        if dtype.startswith("fp8") and arch.index_head_dim and cc is not None and cc[0] == 12:
            return KVDtypeDecision("auto", "SGLang runs DSA models on SM120 with a bf16 KV cache (TileLang backend)")
        if dtype != requested:
            return KVDtypeDecision(dtype, f"SGLang spells {requested} as {dtype}")
        return KVDtypeDecision(dtype)

    def sizing_dtype(self, inputs: PlanInputs, kv_cache_dtype: str) -> str:
        """The dtype to size the cell with: an fp8 DSA cache uses the 656 B layout (B.1)."""
        arch = inputs.architecture
        if kv_cache_dtype.startswith("fp8") and arch.attention is AttentionKind.MLA and arch.index_head_dim:
            return "fp8_ds_mla"
        return kv_cache_dtype

    def block_size(self, inputs: PlanInputs) -> int:
        """``--page-size`` from engine.args, else SGLang's default page of one token."""
        return flags.page_size(inputs) or PAGE_SIZE

    def null_blocks(self, inputs: PlanInputs) -> int:
        """SGLang reserves no null page."""
        return 0

    def in_flight_tokens(self, inputs: PlanInputs) -> int:
        """Sliding layers hold the window plus one prefill chunk."""
        return self._chunked_prefill(inputs)

    def _gpu_mem_mib(self, inputs: PlanInputs) -> int:
        return inputs.gpu_total_bytes // MiB

    def _chunked_prefill(self, inputs: PlanInputs) -> int:
        if inputs.spec.batching.max_num_batched_tokens:
            return inputs.spec.batching.max_num_batched_tokens
        return memory.capacity_defaults(self._gpu_mem_mib(inputs), inputs.tp)[0]

    def default_effective(self, inputs: PlanInputs, *, kv_cache_dtype: str) -> EffectiveConfig:
        """Spec values, else SGLang defaults (fraction and graph batch by GPU memory)."""
        spec = inputs.spec
        gpu_mib = self._gpu_mem_mib(inputs)
        chunked = self._chunked_prefill(inputs)
        max_bs = spec.batching.cuda_graph_max_batch_size or memory.capacity_defaults(gpu_mib, inputs.tp)[1]
        graphs_off = flags.graphs_off(flags.occurrences(spec))
        reserve_bs = 0 if graphs_off and inputs.engine_version >= flags.DISABLED_GRAPH_RESERVE_SINCE else max_bs
        fraction = spec.memory.mem_fraction_static or memory.default_mem_fraction_static(
            gpu_mib, inputs.tp, inputs.pp, chunked, reserve_bs, extra_mib=features.reserve_mib(inputs)
        )
        pool = int(fraction * memory.pre_free_bytes(inputs)) - inputs.weights_per_gpu_bytes
        host = flags.host_bytes(spec, replica_weights_bytes=inputs.read_weights_per_gpu_bytes * inputs.tp * inputs.pp,
                                kv_pool_bytes=pool)
        mem_limit, shm, startup = container_defaults(inputs, host + features.host_bytes(inputs))
        return EffectiveConfig(
            context_length=0,
            gpu_memory_utilization=None,
            mem_fraction_static=fraction,
            kv_cache_dtype=kv_cache_dtype,
            max_num_seqs=spec.batching.max_num_seqs or 2048,
            cuda_graph_max_batch_size=max_bs,
            memory_limit_bytes=mem_limit,
            shm_bytes=shm,
            startup_timeout_seconds=startup,
            **features.default_knobs(inputs),
        )

    def finalize(self, inputs: PlanInputs, effective: EffectiveConfig, pool_tokens: int) -> EffectiveConfig:
        """Set the running-request cap SGLang would derive for the chosen context (unless the spec set it)."""
        if inputs.spec.batching.max_num_seqs:
            return effective
        seqs = memory.default_max_running_requests(pool_tokens, effective.context_length)
        return effective.model_copy(update={"max_num_seqs": seqs})

    def budget(self, inputs: PlanInputs, effective: EffectiveConfig) -> BudgetTerms:
        """See ``memory.budget``."""
        graphs_off = flags.graphs_off(flags.occurrences(inputs.spec))
        return memory.budget(inputs, effective, chunked_prefill=self._chunked_prefill(inputs), graphs_off=graphs_off,
                             extras=features.extra_terms(inputs, effective))

    def check_rest(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """Advisory: the ``1 - fraction`` slack is below SGLang's own reservation heuristic plus req_to_token."""
        assert effective.mem_fraction_static is not None
        slack = memory.pre_free_bytes(inputs) - terms.usable_bytes
        if terms.outside_bytes > slack:
            return [
                f"mem-fraction-static {effective.mem_fraction_static} leaves {slack / 2**30:.2f} GiB for "
                f"activations, CUDA graphs (bs {effective.cuda_graph_max_batch_size}) and req_to_token at "
                f"context {effective.context_length}; SGLang's reservation heuristic asks ~"
                f"{terms.outside_bytes / 2**30:.2f} GiB"
            ]
        return []

    def rest_blocking(self, inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms) -> list[str]:
        """Blocking: the slack cannot hold even the floor (CUDA graphs, buffers, req_to_token, a minimal
        activation reserve ``memory.MIN_ACTIVATION_RESERVE_MIB``): the engine would run out of memory."""
        assert effective.mem_fraction_static is not None
        slack = memory.pre_free_bytes(inputs) - terms.usable_bytes
        floor = terms.outside_bytes - terms.activation_bytes + memory.MIN_ACTIVATION_RESERVE_MIB * MiB
        if floor > slack:
            return [
                f"mem-fraction-static {effective.mem_fraction_static} leaves {slack / 2**30:.2f} GiB, less than the "
                f"{floor / 2**30:.2f} GiB that CUDA graphs, buffers and req_to_token at context "
                f"{effective.context_length} need at the least"
            ]
        return []

    def engine_args(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> list[str]:
        """``sglang.launch_server`` arguments (after the program), user ``engine.args`` last (``feature_args``)."""
        version = self._version(spec.engine.version)
        p = spec.parallelism
        args = ["--model-path", spec.model.name, "--host", "0.0.0.0", "--port", str(spec.serving.port)]
        args += ["--tp-size", str(p.tensor)]
        if p.pipeline > 1:
            args += ["--pp-size", str(p.pipeline)]
        if p.data > 1:
            args += ["--dp-size", str(p.data)]
        if p.expert:
            args += ["--ep-size", str(p.tensor)]
        args += ["--context-length", str(effective.context_length)]
        assert effective.mem_fraction_static is not None
        args += ["--mem-fraction-static", format_fraction(effective.mem_fraction_static)]
        args += ["--kv-cache-dtype", effective.kv_cache_dtype]
        args += ["--max-running-requests", str(effective.max_num_seqs)]
        if spec.batching.max_num_batched_tokens:
            args += ["--chunked-prefill-size", str(spec.batching.max_num_batched_tokens)]
        graph_flag = "--cuda-graph-max-bs-decode" if version >= DECODE_GRAPH_FLAG_SINCE else "--cuda-graph-max-bs"
        args += [graph_flag, str(effective.cuda_graph_max_batch_size)]
        args += ["--enable-metrics"]
        return args + self.feature_args(spec, effective, version)

    def api_ports(self, spec: InferenceServerSpec) -> tuple[int, ...]:
        """``serving.port + r`` per data-parallel rank in a pool (``launch``), else ``(serving.port,)``."""
        per_rank = rank_ports_apply("sglang", spec.nodes, spec.parallelism.data,
                                    spec.routing.inference_pool is not None, spec.engine.args)
        return engine_ranks.rank_ports(spec, per_rank)

    def launch(self, spec: InferenceServerSpec, effective: EffectiveConfig) -> Launch:
        """``sglang.launch_server`` on ``serving.port``. In a pool with data parallelism (and no
        ``--enable-dp-attention``), one server per replica instead, so the endpoint picker sees every rank: the
        shared rank launcher (``ctxfit.engines.ranks``) starts ``launch_server`` per rank without ``--dp-size``
        (each is one replica: SGLang's ``--dp-size`` replicas are whole models, its DP controller only balances
        them), on ``serving.port + r``, with ``SGLANG_DP_RANK=r`` (``managers/scheduler.py`` "[For Router]": the
        rank in the log prefix, "DPr TPn", read 0.4.0 - 0.5.23, so every rank's start-up lines stay its own)."""
        args = self.engine_args(spec, effective)
        ports = self.api_ports(spec)
        if len(ports) == 1:
            return Launch(list(self.command), args, ports)
        command, rank_args = engine_ranks.rank_launch(spec, self.command, engine_ranks.without_flag(args, "--dp-size"),
                                                      rank_env=DP_RANK_ENV)
        return Launch(command, rank_args, ports, engine_ranks.readiness_command(self.health_path, ports))
