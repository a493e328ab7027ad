"""SGLang: LoRA and speculative decoding, rendered per version and budgeted (docs/engine-flags.md, engines/extras.py).

Rendering (flags and ``--speculative-algorithm`` choices read in the wheels, tests/fixtures/engine-flags/sglang.json):
- LoRA: ``--lora-paths name=path ...`` and ``--max-loras-per-batch N`` (0.4+); ``--enable-lora``,
  ``--max-lora-rank R`` and ``--lora-target-modules`` from 0.4.10; ``--max-loaded-loras C`` from 0.5.1.
- Speculative decoding: ``--speculative-algorithm`` EAGLE (0.4.2+), NEXTN for MTP (0.4.4+), EAGLE3 (0.4.5+),
  STANDALONE for a draft model (0.5.2+), NGRAM (0.5.3+); ``--speculative-draft-model-path``,
  ``--speculative-num-steps k``, ``--speculative-eagle-topk t``, ``--speculative-num-draft-tokens`` (``k + 1``
  verified tokens for a chain).

Budget: the LoRA memory pool (``lora/mem_pool.py``) is allocated in ``init_lora_manager`` before ``init_memory_pool``
profiles free memory, so it comes out of the KV pool. The draft: before 0.5.14 the target sizes its pool alone and
the draft worker then loads its weights and allocates a second pool of the same tokens with the draft's layers
(0.5.4 ``model_runner.init_memory_pool``: ``draft_runner_cache_size``; 0.5.10 ``memory_pool_config`` shared), all in
the ``1 - mem_fraction_static`` slack, for which SGLang's default fraction reserves 2 GiB more (6 GiB for
STANDALONE; 0.4.9-0.5.13 ``server_args.py``: "draft model and larger cuda graph buffers"). From 0.5.14 the target's
cell size includes the draft's layers at the target's per-layer size (``pool_configurator``
``eagle_draft_num_layers``) and the draft's weights are loaded before the pool is sized ("Loaded weights (target +
draft)", 0.5.23 ``kv_cache_configurator``), so both come out of the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import ADAPTER_ROOT, DRAFT_ROOT, EffectiveConfig, InferenceServerSpec, SpeculativeMethod
from ctxfit.engines.extras import ExtraTerm, lora_buffer_bytes
from ctxfit.vocab.lorageometry import EXPERTS

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

ENABLE_LORA_SINCE = (0, 4, 10)
MAX_LOADED_LORAS_SINCE = (0, 5, 1)
JOINT_DRAFT_POOL_SINCE = (0, 5, 14)
MOE_LORA_SINCE = (0, 5, 10)
"""First release with LoRA buffers for the routed experts (``lora/mem_pool.py`` ``gate_up_proj_moe`` /
``down_proj_moe``: ``[slots, experts, rank, hidden]``)."""
LAYER_TYPES_LORA_SINCE = (0, 5, 12)
"""First release whose ``lora/utils.get_default_hidden_dim`` sizes MLA (``kv_b_proj``, ``q_b_proj``,
``fused_qkv_a_proj``...) and hybrid mixer modules (``in_proj``, ``in_proj_qkvz``); before it ``get_hidden_dim``
knows qkv/o/gate_up/down and the embeddings only and raises "get_hidden_dim not implemented for <module>"."""
DRAFT_RESERVE = ((0, 4, 9), (0, 5, 14))
DRAFT_RESERVE_MIB = 2048
STANDALONE_RESERVE_MIB = 6144
STANDALONE_RESERVE_SINCE = (0, 5, 2)
ALGORITHMS = {
    SpeculativeMethod.EAGLE: ("EAGLE", (0, 4, 2)),
    SpeculativeMethod.MTP: ("NEXTN", (0, 4, 4)),
    SpeculativeMethod.EAGLE3: ("EAGLE3", (0, 4, 5)),
    SpeculativeMethod.DRAFT_MODEL: ("STANDALONE", (0, 5, 2)),
    SpeculativeMethod.NGRAM: ("NGRAM", (0, 5, 3)),
}
"""``--speculative-algorithm`` value and first release that has it (the parsers' ``choices``)."""


def adapter_path(spec: InferenceServerSpec, index: int) -> str:
    """Where SGLang reads adapter ``index``: its path, or the weights cache's copy of a Hub adapter."""
    assert spec.lora is not None
    adapter = spec.lora.adapters[index]
    return f"{ADAPTER_ROOT}/{adapter.name}" if adapter.from_hub else adapter.source


def draft_path(spec: InferenceServerSpec) -> str | None:
    """Where SGLang reads the draft."""
    assert spec.speculative is not None
    draft = spec.speculative.draft
    if draft is None:
        return None
    return DRAFT_ROOT if draft.name.count("/") == 1 and not draft.name.startswith(("/", ".")) else draft.name


def default_knobs(inputs: PlanInputs) -> dict[str, int]:
    """The LoRA and speculative knobs of the effective configuration."""
    out: dict[str, int] = {}
    lora = inputs.lora
    if lora is not None:
        out.update(max_loras=lora.slots, max_lora_rank=lora.rank, max_cpu_loras=lora.cpu_slots)
    if inputs.draft is not None:
        out["num_speculative_tokens"] = inputs.draft.tokens
    return out


def problems(inputs: PlanInputs) -> list[tuple[str, str]]:
    """(field, message) for LoRA / speculative settings this SGLang version cannot run."""
    out: list[tuple[str, str]] = []
    shown = ".".join(str(v) for v in inputs.engine_version)
    geometry = inputs.dims
    if inputs.lora is not None and geometry is not None and inputs.engine_version < LAYER_TYPES_LORA_SINCE and (
            geometry.attention == "mla" or geometry.hybrid is not None):
        kind = "MLA attention" if geometry.attention == "mla" else f"{geometry.hybrid} mixer layers"
        out.append(("spec.lora", f"SGLang {shown} has no LoRA for {kind} (lora/utils.get_hidden_dim sizes "
                    "qkv/o/gate_up/down only; from 0.5.12)"))
    speculative = inputs.spec.speculative
    if speculative is None:
        return out
    name, since = ALGORITHMS[speculative.method]
    if inputs.engine_version < since:
        first = ".".join(str(v) for v in since)
        out.append(("spec.speculative.method", f"SGLang {shown} has no --speculative-algorithm {name} (from {first})"))
    return out


def lora_modules(inputs: PlanInputs) -> tuple[str, ...]:
    """Modules SGLang gives buffers: the adapters' (or ``--lora-target-modules``) packed modules; the routed experts
    only from 0.5.10 (before it a MoE layer's expert weights get no buffer)."""
    lora = inputs.lora
    assert lora is not None
    modules = lora.deployment_modules or lora.modules
    if inputs.engine_version < MOE_LORA_SINCE:
        modules = tuple(m for m in modules if m != EXPERTS)
    return modules


def lora_args(spec: InferenceServerSpec, effective: EffectiveConfig, version: tuple[int, int, int]) -> list[str]:
    """The LoRA flags (module docstring)."""
    if spec.lora is None or effective.max_loras is None:
        return []
    args = ["--enable-lora"] if version >= ENABLE_LORA_SINCE else []
    args += ["--lora-paths", *(f"{a.name}={adapter_path(spec, i)}" for i, a in enumerate(spec.lora.adapters))]
    args += ["--max-loras-per-batch", str(effective.max_loras)]
    if version >= ENABLE_LORA_SINCE:
        args += ["--max-lora-rank", str(effective.max_lora_rank)]
        if spec.lora.target_modules is not None:
            args += ["--lora-target-modules", *spec.lora.target_modules]
    if version >= MAX_LOADED_LORAS_SINCE and spec.lora.max_cpu_loras is not None:
        args += ["--max-loaded-loras", str(effective.max_cpu_loras)]
    return args


def speculative_args(spec: InferenceServerSpec, effective: EffectiveConfig, version: tuple[int, int, int]
                     ) -> list[str]:
    """The speculative-decoding flags (module docstring)."""
    speculative = spec.speculative
    if speculative is None:
        return []
    k = effective.num_speculative_tokens or speculative.num_speculative_tokens
    args = ["--speculative-algorithm", ALGORITHMS[speculative.method][0]]
    model = draft_path(spec)
    if model is not None:
        args += ["--speculative-draft-model-path", model]
    if speculative.method is not SpeculativeMethod.NGRAM:
        args += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", str(speculative.eagle_top_k)]
    draft_tokens = k + 1 if speculative.eagle_top_k == 1 else k * speculative.eagle_top_k + 1
    return [*args, "--speculative-num-draft-tokens", str(draft_tokens)]


def draft_pool_in_budget(inputs: PlanInputs) -> bool:
    """From 0.5.14 the draft's layers are in the target's cell size (module docstring)."""
    return inputs.engine_version >= JOINT_DRAFT_POOL_SINCE


def reserve_mib(inputs: PlanInputs) -> int:
    """What SGLang's default fraction reserves for a draft (MiB; module docstring)."""
    speculative = inputs.spec.speculative
    version = inputs.engine_version
    if speculative is None or speculative.method is SpeculativeMethod.NGRAM:
        return 0
    if not DRAFT_RESERVE[0] <= version < DRAFT_RESERVE[1]:
        return 0
    if speculative.method is SpeculativeMethod.DRAFT_MODEL and version >= STANDALONE_RESERVE_SINCE:
        return STANDALONE_RESERVE_MIB
    return DRAFT_RESERVE_MIB


def extra_terms(inputs: PlanInputs, effective: EffectiveConfig) -> tuple[ExtraTerm, ...]:
    """The LoRA and draft terms on one GPU (module docstring)."""
    out: list[ExtraTerm] = []
    lora, dims = inputs.lora, inputs.dims
    if lora is not None and dims is not None and effective.max_loras:
        modules = lora_modules(inputs)
        rank = effective.max_lora_rank or lora.rank
        buffers = lora_buffer_bytes(dims, modules, slots=effective.max_loras, rank=rank, tp=inputs.tp, pp=inputs.pp,
                                    experts=EXPERTS in modules, ep=inputs.tp if inputs.spec.parallelism.expert else 1)
        out.append(ExtraTerm("LoRA buffers", buffers, True,
                             f"{effective.max_loras} adapters x rank {rank} in {', '.join(modules)} of every layer "
                             "(lora/mem_pool.py LoRAMemoryPool, before the KV pool)"))
        loaded = max(len(inputs.spec.lora.adapters) if inputs.spec.lora else 0, effective.max_cpu_loras or 0)
        out.append(ExtraTerm("LoRA host", loaded * lora.adapter_bytes, False,
                             f"{loaded} adapters loaded in host memory (LoRAManager)", host=True))
    draft = inputs.draft
    if draft is not None and draft.weights_per_gpu_bytes:
        joint = draft_pool_in_budget(inputs)
        label = "MTP layers" if inputs.spec.speculative and inputs.spec.speculative.draft is None else "draft weights"
        where = "loaded before the pool is sized" if joint else "draft worker, loaded after the pool is sized"
        out.append(ExtraTerm(label, draft.weights_per_gpu_bytes, joint, f"{draft.source} ({where})"))
    return tuple(out)


def host_bytes(inputs: PlanInputs) -> int:
    """Host memory of the adapters SGLang loads (each TP rank's LoRAManager loads every adapter)."""
    lora = inputs.lora
    if lora is None or inputs.spec.lora is None:
        return 0
    return max(len(inputs.spec.lora.adapters), lora.cpu_slots) * lora.adapter_bytes * inputs.spec.gpu.count
