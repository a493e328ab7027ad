"""vLLM: LoRA and speculative decoding, rendered per version and budgeted (docs/engine-flags.md, engines/extras.py).

Rendering (flags read in the wheels, tests/fixtures/engine-flags/vllm.json):
- LoRA: ``--enable-lora --max-loras N --max-lora-rank R --max-cpu-loras C --lora-modules name=path ...`` (0.8+);
  ``--lora-target-modules`` from 0.19. ``R`` is the next rank vLLM accepts (``extras.vllm_rank``).
- Speculative decoding: ``--speculative-config '{"method": ..., "model": ..., "num_speculative_tokens": k}'`` from
  0.8.2 (``--speculative-model`` / ``--num-speculative-tokens`` before). Methods on the V1 engine
  (``v1/spec_decode``): ngram from 0.8.0, eagle from 0.8.3 (``eagle.py``), eagle3 from 0.8.5, MTP as
  ``deepseek_mtp`` up to 0.10 and ``mtp`` from 0.11, a draft model from 0.15 (``draft_model.py``); older releases
  run them on V0 or not at all, which ctxfit refuses.

Budget: LoRA buffers and the draft's weights are loaded inside ``gpu_model_runner.load_model`` (the drafter with
"Loading drafter model..."), so they are in "Model loading took" and come out of the KV budget; the draft's
attention layers get KV blocks in the same pool (``kv_cache_interface`` specs of the drafter's layers), so a token
costs the target's bytes plus the draft's (``planner``); decode steps verify ``1 + k`` tokens, so FULL CUDA graphs
cover ``max_num_seqs x (1 + k)`` tokens (``cudagraph_dispatcher``: ``uniform_decode_query_len``); with LoRA, 0.12+
captures every graph with and without LoRA (``cudagraph_specialize_lora`` defaults to True: ``_get_lora_cases`` ->
``[0, max_loras + 1]``). ``--max-cpu-loras`` adapters stay in host memory in every worker.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ctxfit.api import ADAPTER_ROOT, DRAFT_ROOT, EffectiveConfig, InferenceServerSpec, SpeculativeMethod
from ctxfit.engines.extras import PUNICA_BYTES_PER_TOKEN, ExtraTerm, lora_buffer_bytes, lora_host_bytes, vllm_rank
from ctxfit.vocab.extras import LINEAR, PACKED, pack_modules
from ctxfit.vocab.lorageometry import EMBEDDING_MODULES, EXPERTS

from . import lora_archs

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

SPECULATIVE_CONFIG_SINCE = (0, 8, 2)
LORA_TARGET_MODULES_SINCE = (0, 19, 0)
LORA_GRAPH_CASES_SINCE = (0, 12, 0)
MTP_NAME_SINCE = (0, 11, 0)
FUSED_MOE_LORA_SINCE = (0, 12, 0)
"""First release that wraps the routed experts (``lora/layers/fused_moe.py``; ``get_supported_lora_modules`` adds
``FusedMoE`` modules); before it a MoE model's LoRA covers attention, shared experts and the router only."""
V1_METHOD_SINCE = {
    SpeculativeMethod.NGRAM: (0, 8, 0),
    SpeculativeMethod.EAGLE: (0, 8, 3),
    SpeculativeMethod.EAGLE3: (0, 8, 5),
    SpeculativeMethod.MTP: (0, 8, 5),
    SpeculativeMethod.DRAFT_MODEL: (0, 15, 0),
}
"""First release whose V1 engine runs each method (``v1/spec_decode`` in the wheels; MTP as ``deepseek_mtp``)."""
NGRAM_LOOKUP_MAX = 4


def adapter_path(spec: InferenceServerSpec, index: int) -> str:
    """Where the engine reads adapter ``index``: its path, or the weights cache's copy of a Hub adapter."""
    assert spec.lora is not None
    adapter = spec.lora.adapters[index]
    return f"{ADAPTER_ROOT}/{adapter.name}" if adapter.from_hub else adapter.source


def draft_path(spec: InferenceServerSpec) -> str | None:
    """Where the engine reads the draft: its path, or the weights cache's copy of a Hub draft."""
    assert spec.speculative is not None
    draft = spec.speculative.draft
    if draft is None:
        return None
    return DRAFT_ROOT if draft.name.count("/") == 1 and not draft.name.startswith(("/", ".")) else draft.name


def lora_modules(inputs: PlanInputs) -> tuple[str, ...]:
    """Modules vLLM gives buffers (``lora/utils.get_supported_lora_modules``: every linear module of the model, its
    ``FusedMoE`` experts from 0.12, ``embed_tokens`` / ``lm_head`` when the model class declares
    ``embedding_modules`` (``lora_archs.wraps_embeddings``; when the table cannot say, the embedding modules an
    adapter targets)); ``--lora-target-modules`` (0.19+) narrows them (``is_in_target_modules``)."""
    lora, geometry = inputs.lora, inputs.dims
    assert lora is not None
    version = inputs.engine_version
    wrapped = set(geometry.linear if geometry is not None else LINEAR)
    if geometry is not None and geometry.experts is not None and version >= FUSED_MOE_LORA_SINCE:
        wrapped.add(EXPERTS)
    embeddings = next((e for e in (lora_archs.wraps_embeddings(a, version) for a in inputs.architectures)
                       if e is not None), None)
    if embeddings or (embeddings is None and geometry is not None and geometry.vocab):
        wrapped |= set(EMBEDDING_MODULES) if embeddings else {m for m in lora.modules if m in EMBEDDING_MODULES}
    if lora.deployment_modules is not None and version >= LORA_TARGET_MODULES_SINCE:
        return tuple(sorted(wrapped & set(lora.deployment_modules)))
    return tuple(sorted(wrapped))


def lora_refusal(inputs: PlanInputs) -> str | None:
    """Why this vLLM version cannot serve LoRA for the model's class (``lora_archs``: the class lacks
    ``SupportsLoRA``, so ``load_lora_model`` raises "<class> does not support LoRA yet"), None when it can or the
    table cannot say (a class or release it was not read from)."""
    version = inputs.engine_version
    shown = ".".join(str(v) for v in version)
    for architecture in inputs.architectures:
        if lora_archs.supports_lora(architecture, version) is False:
            since = lora_archs.lora_since(architecture)
            later = f"; LoRA for it from vLLM {since}" if since and lora_archs.version_tuple(since) > version else ""
            return f"vLLM {shown} serves no LoRA for {architecture} (its model class is not SupportsLoRA{later})"
    return None


def problems(inputs: PlanInputs) -> list[tuple[str, str]]:
    """(field, message) for LoRA / speculative settings this vLLM version cannot run."""
    out: list[tuple[str, str]] = []
    version = inputs.engine_version
    shown = ".".join(str(v) for v in version)
    if inputs.lora is not None and vllm_rank(inputs.lora.rank, version) is None:
        out.append(("spec.lora.maxLoraRank", f"vLLM's largest LoRA rank is 512, not {inputs.lora.rank}"))
    refusal = lora_refusal(inputs) if inputs.lora is not None else None
    if refusal is not None:
        out.append(("spec.lora", refusal))
    speculative = inputs.spec.speculative
    if speculative is not None:
        since = V1_METHOD_SINCE[speculative.method]
        if version < since:
            first = ".".join(str(v) for v in since)
            out.append(("spec.speculative.method", f"vLLM {shown} has no V1 {speculative.method.value} speculative "
                        f"decoding (from {first})"))
    return out


def default_knobs(inputs: PlanInputs) -> dict[str, int]:
    """The LoRA and speculative knobs of the effective configuration (``EffectiveConfig`` fields)."""
    out: dict[str, int] = {}
    lora = inputs.lora
    if lora is not None:
        out.update(max_loras=lora.slots, max_lora_rank=vllm_rank(lora.rank, inputs.engine_version) or lora.rank,
                   max_cpu_loras=lora.cpu_slots)
    if inputs.draft is not None:
        out["num_speculative_tokens"] = inputs.draft.tokens
    return out


def lora_args(spec: InferenceServerSpec, effective: EffectiveConfig, version: tuple[int, int, int]) -> list[str]:
    """The LoRA flags (module docstring), sized by the effective knobs."""
    if spec.lora is None or effective.max_loras is None:
        return []
    args = ["--enable-lora", "--max-loras", str(effective.max_loras), "--max-lora-rank",
            str(effective.max_lora_rank), "--max-cpu-loras", str(effective.max_cpu_loras or effective.max_loras),
            "--lora-modules"]
    args += [f"{a.name}={adapter_path(spec, i)}" for i, a in enumerate(spec.lora.adapters)]
    if spec.lora.target_modules is not None and version >= LORA_TARGET_MODULES_SINCE:
        args += ["--lora-target-modules", *(pack_modules(spec.lora.target_modules, PACKED) or ())]
    return args


def speculative_args(spec: InferenceServerSpec, effective: EffectiveConfig, version: tuple[int, int, int]
                     ) -> list[str]:
    """The speculative-decoding flags (module docstring)."""
    speculative = spec.speculative
    if speculative is None:
        return []
    method = speculative.method
    k = effective.num_speculative_tokens or speculative.num_speculative_tokens
    model = draft_path(spec)
    if version < SPECULATIVE_CONFIG_SINCE:
        args = ["--speculative-model", "[ngram]" if method is SpeculativeMethod.NGRAM else (model or ""),
                "--num-speculative-tokens", str(k)]
        if method is SpeculativeMethod.NGRAM:
            args += ["--ngram-prompt-lookup-max", str(speculative.prompt_lookup_max or NGRAM_LOOKUP_MAX)]
        return args
    names = {SpeculativeMethod.NGRAM: "ngram", SpeculativeMethod.EAGLE: "eagle", SpeculativeMethod.EAGLE3: "eagle3",
             SpeculativeMethod.DRAFT_MODEL: "draft_model",
             SpeculativeMethod.MTP: "mtp" if version >= MTP_NAME_SINCE else "deepseek_mtp"}
    config: dict[str, object] = {"method": names[method], "num_speculative_tokens": k}
    if model is not None:
        config["model"] = model
    if method is SpeculativeMethod.NGRAM:
        config["prompt_lookup_max"] = speculative.prompt_lookup_max or NGRAM_LOOKUP_MAX
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def graph_shape(inputs: PlanInputs, effective: EffectiveConfig) -> tuple[int, int, int]:
    """(decode query length, graph cases, draft layers) the CUDA graphs follow (module docstring)."""
    draft = inputs.draft
    query = 1 + (effective.num_speculative_tokens or 0 if draft is not None else 0)
    cases = 2 if inputs.lora is not None and inputs.engine_version >= LORA_GRAPH_CASES_SINCE else 1
    return query, cases, (draft.layers if draft is not None else 0)


def extra_terms(inputs: PlanInputs, effective: EffectiveConfig, max_num_batched_tokens: int
                ) -> tuple[ExtraTerm, ...]:
    """The LoRA and draft terms on one GPU (module docstring)."""
    out: list[ExtraTerm] = []
    lora, dims = inputs.lora, inputs.dims
    if lora is not None and dims is not None and effective.max_loras:
        rank = effective.max_lora_rank or lora.rank
        slots = effective.max_loras
        modules = lora_modules(inputs)
        buffers = lora_buffer_bytes(dims, modules, slots=slots, rank=rank, tp=inputs.tp, pp=inputs.pp,
                                    experts=EXPERTS in modules, ep=expert_ranks(inputs))
        out.append(ExtraTerm("LoRA buffers", buffers + PUNICA_BYTES_PER_TOKEN * max_num_batched_tokens, True,
                             f"{slots} adapters x rank {rank} in {', '.join(modules)} of every layer "
                             "(lora/layers create_lora_weights; in Model loading)"))
        cpu = effective.max_cpu_loras or slots
        out.append(ExtraTerm("LoRA host", cpu * lora.adapter_bytes, False,
                             f"--max-cpu-loras {cpu} x the largest adapter, in host memory", host=True))
    draft = inputs.draft
    if draft is not None and draft.weights_per_gpu_bytes:
        label = "MTP layers" if draft.method is SpeculativeMethod.MTP and inputs.spec.speculative and \
            inputs.spec.speculative.draft is None else "draft weights"
        out.append(ExtraTerm(label, draft.weights_per_gpu_bytes, True,
                             f"{draft.source} (loaded with the model: Loading drafter model)"))
    return tuple(out)


def expert_ranks(inputs: PlanInputs) -> int:
    """Ranks the routed experts are spread over: TP x DP with ``--enable-expert-parallel`` (``FusedMoE``
    ``ep_size``), else 1 (each rank holds every expert, its intermediate split by TP)."""
    parallelism = inputs.spec.parallelism
    return parallelism.tensor * parallelism.data if parallelism.expert else 1


def host_bytes(inputs: PlanInputs) -> int:
    """Host memory LoRA adds to the container (every GPU's worker keeps ``--max-cpu-loras`` adapters)."""
    lora = inputs.lora
    return lora_host_bytes(lora, inputs.spec.gpu.count) if lora is not None else 0
