"""Checks for kinds no knob of ctxfit can fix: InvalidParallelism, CUDADriverTooOld, UnsupportedGPU,
ModelAccessDenied.

Each is permanent at once and says what would fix it:
- InvalidParallelism: the engines split attention heads, KV heads, experts and the vocabulary over the
  tensor-parallel ranks and layers over the pipeline stages (vLLM ``verify_with_parallel_config``:
  "Total number of attention heads (H) must be divisible by tensor parallel size (T)"). The explanation
  names the sizes that divide the numbers the engine printed, up to ``MAX_SUGGESTED_SIZE``.
- CUDADriverTooOld: the node's NVIDIA driver cannot run the image's CUDA (torch "found version 12040" is
  CUDA 12.4, ``cudaDriverGetVersion`` encoding 1000 x major + 10 x minor). Permanent for that node: the
  node is named (``Failure.node``).
- UnsupportedGPU: the GPU's compute capability has no kernel for the model's attention, weight format or
  dtype in this engine release (vLLM "No valid attention backend found", "The quantization method X is not
  supported for the current GPU. Minimum capability: 80", "Bfloat16 is only supported on GPUs with compute
  capability of at least 8.0"; SGLang "only supports sm75 and above"). Permanent for that GPU product: the
  explanation names its compute capability (the message's, else the catalog's) and the catalog products at or
  above the minimum the message states; the engine's own advice (``--dtype=half``, another KV dtype) is quoted.
- ModelAccessDenied: the Hub refused the model (gated or private repository, bad token).
"""

from __future__ import annotations

from ctxfit.budget.parallel import dividing_tp_sizes, rules
from ctxfit.catalog import gpu_products, lookup_gpu
from ctxfit.recovery.evidence import trim_words
from ctxfit.recovery.policy import Decision, PolicyContext, permanent
from ctxfit.vocab.inputs import resolve_inputs
from ctxfit.vocab.kinds import FailureKind

from .common import number_of

GPUS_PER_NODE = 8
"""Parallel sizes are suggested up to max(8 GPUs of one node, gpu.count)."""
EVIDENCE_CHARS = 200


def divisors(numbers: list[int], limit: int = GPUS_PER_NODE) -> list[int]:
    """Sizes 1..``limit`` that divide every number in ``numbers``."""
    return [d for d in range(1, limit + 1) if all(n % d == 0 for n in numbers)]


def _sizes(ctx: PolicyContext, names: tuple[str, ...]) -> tuple[list[int], str]:
    found = {name: int(v) for name in names if (v := number_of(ctx, name))}
    if not found:
        return [], ""
    shown = ", ".join(f"{name} {value}" for name, value in found.items())
    return divisors(list(found.values()), max(GPUS_PER_NODE, ctx.spec.gpu.count)), shown


def check_invalid_parallelism(ctx: PolicyContext) -> Decision | None:
    """InvalidParallelism: permanent; names the TP / PP sizes that would divide the model's numbers."""
    if ctx.failure.kind is not FailureKind.INVALID_PARALLELISM:
        return None
    p = ctx.spec.parallelism
    tp = int(number_of(ctx, "tensorParallelSize") or p.tensor)
    pp = int(number_of(ctx, "pipelineParallelSize") or p.pipeline)
    head = (f"{ctx.engine_name} cannot split this model over tensor parallel {tp} x pipeline parallel {pp}: "
            f"{trim_words(ctx.failure.evidence, EVIDENCE_CHARS)}")
    advice: list[str] = []
    tp_ok, tp_of = _sizes(ctx, ("attentionHeads", "kvHeads", "experts", "vocabSize", "dividedCount"))
    if tp_ok and tp not in tp_ok:
        advice.append(f"tensor parallel sizes that divide {tp_of}: {', '.join(map(str, tp_ok))}")
    pp_ok, pp_of = _sizes(ctx, ("layers",))
    if pp_ok and pp not in pp_ok:
        advice.append(f"pipeline parallel sizes that divide {pp_of}: {', '.join(map(str, pp_ok))}")
    if not advice:
        advice = _model_sizes(ctx)
    fix = "; ".join(advice) or "choose tensor/pipeline parallel sizes that divide the model's heads and layers"
    return permanent("InvalidParallelism", f"{head}; a configuration error no memory or context knob fixes: {fix} "
                     "(gpu.count = tensor x pipeline x data)")


def _model_sizes(ctx: PolicyContext) -> list[str]:
    """The TP sizes the model's own numbers allow (``ctxfit.budget.parallel``), when the message printed none (a bare
    ``assert ... % tp_size == 0``) and the spec or the catalog gives the architecture."""
    try:
        inputs = resolve_inputs(ctx.spec)
    except ValueError:
        return []
    limit = max(GPUS_PER_NODE, ctx.spec.gpu.count)
    sizes = dividing_tp_sizes(inputs, limit)
    what = ", ".join(r.what for r in rules(inputs) if r.axis == "tp")
    if not sizes or not what:
        return []
    return [f"tensor parallel sizes up to {limit} that split every part of this model ({what}): "
            f"{', '.join(map(str, sizes))}"]


def _cuda_version(encoded: float | None) -> str:
    if not encoded:
        return ""
    value = int(encoded)
    return f"{value // 1000}.{value % 1000 // 10}" if value >= 1000 else str(value)


def check_cuda_driver_too_old(ctx: PolicyContext) -> Decision | None:
    """CUDADriverTooOld: permanent for that node (named); upgrade its driver, use another node or an image
    built for an older CUDA."""
    if ctx.failure.kind is not FailureKind.CUDA_DRIVER_TOO_OLD:
        return None
    node = f"node {ctx.failure.node}" if ctx.failure.node else "the node the pod ran on (name unknown)"
    supports = _cuda_version(number_of(ctx, "driverCudaVersion"))
    needs = number_of(ctx, "requiredCudaVersion")
    facts = []
    if supports:
        facts.append(f"its driver supports CUDA {supports}")
    if needs:
        facts.append(f"the image needs CUDA {needs:g}")
    detail = f" ({', '.join(facts)})" if facts else ""
    return permanent("CUDADriverTooOld", f"the NVIDIA driver on {node} is too old for the engine image{detail}: "
                     f"{trim_words(ctx.failure.evidence, EVIDENCE_CHARS)}; permanent on that node: upgrade its "
                     "driver, avoid the node, or use an image built for an older CUDA")


UNSUPPORTED_EVIDENCE_CHARS = 360
"""The attention selector lists every backend's reasons: keep more of it than other evidence."""
SUGGESTED_PRODUCTS = 4
"""Catalog products named as able to run it (the smallest compute capabilities at or above the minimum)."""


def _capability_text(cc: float | tuple[int, int] | None) -> str:
    if cc is None:
        return ""
    if isinstance(cc, tuple):
        return f"{cc[0]}.{cc[1]}"
    return f"{cc:.1f}"


def products_at_least(minimum: float) -> list[str]:
    """Catalog GPU products whose compute capability is at least ``minimum`` (major.minor), lowest first."""
    found = sorted((p.compute_capability, p.product) for p in gpu_products()
                   if p.compute_capability[0] + p.compute_capability[1] / 10 >= minimum - 1e-9)
    return [name for _cc, name in found]


def check_unsupported_gpu(ctx: PolicyContext) -> Decision | None:
    """UnsupportedGPU: permanent for this GPU product; names its compute capability and what would run."""
    if ctx.failure.kind is not FailureKind.UNSUPPORTED_GPU:
        return None
    product = ctx.spec.gpu.product
    entry = lookup_gpu(product)
    cc = number_of(ctx, "computeCapability")
    shown = _capability_text(cc) or _capability_text(entry.compute_capability if entry else None)
    gpu = (product or "this GPU") + (f" (compute capability {shown})" if shown else "")
    on = f" on node {ctx.failure.node}" if ctx.failure.node else ""
    minimum = number_of(ctx, "minimumComputeCapability")
    if minimum:
        names = products_at_least(minimum)[:SUGGESTED_PRODUCTS]
        fix = (f"it needs compute capability {minimum:.1f} or newer (e.g. {', '.join(names)})" if names else
               f"it needs compute capability {minimum:.1f} or newer")
    else:
        fix = "run it on a GPU product of another compute capability, or another engine release"
    evidence = trim_words(ctx.failure.evidence, UNSUPPORTED_EVIDENCE_CHARS)
    return permanent("UnsupportedGPU", f"{ctx.engine_name} cannot run this model on {gpu}{on}: {evidence}; "
                     f"permanent for this GPU product, no memory or context knob helps: {fix}, or follow the "
                     "engine's own advice above (another dtype, KV cache dtype or quantization where it names one)")


def check_model_access_denied(ctx: PolicyContext) -> Decision | None:
    """ModelAccessDenied: permanent (credentials or licence, not configuration)."""
    if ctx.failure.kind is not FailureKind.MODEL_ACCESS_DENIED:
        return None
    return permanent("ModelAccessDenied", f"the model hub refused {ctx.spec.model.name} (gated or private "
                     f"repository, or a missing/invalid token): {trim_words(ctx.failure.evidence, EVIDENCE_CHARS)}; "
                     "accept the model's licence with the token's account or set a valid HF token")
