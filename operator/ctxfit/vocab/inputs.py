"""Resolve a spec into the facts the planner needs: GPU memory, architecture, weights per GPU.

Precedence: GPU memory = ``spec.gpu.memory`` > node GFD label ``nvidia.com/gpu.memory`` (MiB)
> catalog; architecture = ``spec.model.architecture`` > Hugging Face ``config.json`` > catalog;
weights per GPU = ``spec.model.weightsPerGPU`` > catalog checkpoint bytes / (TP x PP).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import Architecture, AttentionKind, InferenceServerSpec, MiB, quantity_to_bytes
from ctxfit.catalog import GPUProduct, HybridState, ModelEntry, MoE, lookup_gpu, lookup_model
from ctxfit.vocab.version import parse_version

from .extras import ExtrasError, ResolvedDraft, ResolvedLoRA, resolve_draft, resolve_lora
from .hfconfig import architecture_from_hf_config, int_field
from .hybridconfig import hybrid_from_hf_config
from .lorageometry import LoRAGeometry, lora_geometry

DEFAULT_DRIVER_RESERVE_MIB = 480
"""NVML minus CUDA-visible total for GPUs not in the catalog (median of measured SKUs, catalog/gpus.yaml)."""

REPLICATED_WEIGHT_FRACTION = 0.0
"""Weights are assumed evenly sharded by TP x PP; use ``weightsPerGPU`` when parts are replicated."""


class PlanInputError(ValueError):
    """Input the planner cannot work with. ``field`` is the spec path (e.g. ``spec.gpu.memory``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class PlanInputs:
    """Everything the engine memory models read, resolved and in bytes.

    Attributes:
        spec: the validated spec.
        gpu: catalog entry of the product, if known.
        gpu_total_bytes: NVML/GFD total of one GPU, bytes.
        cuda_total_bytes: CUDA-visible total of one GPU, bytes (NVML minus the driver reserve).
        compute_capability: (major, minor), None when the product is unknown.
        architecture: attention geometry.
        model: catalog entry, if the model is known.
        weights_per_gpu_bytes: weights on the busiest GPU, bytes.
        weights_source: how ``weights_per_gpu_bytes`` was obtained.
        engine_version: (major, minor, patch).
        vocab_size, hidden_size, intermediate_size: for the activation estimate (None when unknown).
        moe: mixture-of-experts sizes (catalog, or config.json n_routed_experts/num_experts,
            num_experts_per_tok, moe_intermediate_size), None for dense or unknown.
        hybrid: recurrent-state geometry of a hybrid model (catalog or config.json), else None.
        total_layers: num_hidden_layers including non-attention layers (pipeline stages split these).
        quantization: weight quantization that changes the forward's buffers, from config.json
            ``quantization_config`` (``quant_method``; ``"bitsandbytes-8bit"`` when ``load_in_8bit``) or
            ``engine.args`` ``--quantization X``; None when unquantized or unknown.
        architectures: config.json ``architectures`` (model class names such as ``LlamaForCausalLM``),
            empty when no config.json was given; vLLM picks its model runner by them (``engines/vllm/runner.py``).
    """

    spec: InferenceServerSpec
    gpu: GPUProduct | None
    gpu_total_bytes: int
    cuda_total_bytes: int
    compute_capability: tuple[int, int] | None
    architecture: Architecture
    model: ModelEntry | None
    weights_per_gpu_bytes: int
    weights_source: str
    engine_version: tuple[int, int, int]
    vocab_size: int | None
    hidden_size: int | None
    intermediate_size: int | None
    moe: MoE | None = None
    hybrid: HybridState | None = None
    total_layers: int | None = None
    quantization: str | None = None
    architectures: tuple[str, ...] = ()
    loaded_weights_per_gpu_bytes: int | None = None
    """Weights read per GPU when some stay in host memory (``--cpu-offload-gb``: ``weights_per_gpu_bytes`` is then
    what stays on the GPU); None when every weight read is on the GPU. Host memory and load time follow this."""

    lora: ResolvedLoRA | None = None
    """``spec.lora`` resolved (``vocab.extras.resolve_lora``), None without LoRA."""
    draft: ResolvedDraft | None = None
    """``spec.speculative`` resolved (``vocab.extras.resolve_draft``), None without speculative decoding."""
    dims: LoRAGeometry | None = None
    """The modules LoRA can wrap, with their shapes (``vocab.lorageometry``), with ``spec.lora``; None when unknown."""

    @property
    def read_weights_per_gpu_bytes(self) -> int:
        """Weights read from the checkpoint per GPU (host page cache, load time), bytes."""
        return self.loaded_weights_per_gpu_bytes or self.weights_per_gpu_bytes

    @property
    def tp(self) -> int:
        """Tensor-parallel size."""
        return self.spec.parallelism.tensor

    @property
    def pp(self) -> int:
        """Pipeline-parallel size."""
        return self.spec.parallelism.pipeline

    @property
    def model_max_context(self) -> int | None:
        """The model's derived maximum (max_position_embeddings), if known."""
        return self.architecture.max_position_embeddings


DEFAULT_ENGINE_VERSION = {"vllm": (0, 20, 0), "sglang": (0, 5, 23)}
"""Version assumed when ``spec.engine.version`` is unset (the behaviour of current releases)."""


def check_pipeline(spec: InferenceServerSpec, layers: int | None) -> None:
    """A pipeline of more stages than the model has layers cannot start: every stage needs at least one layer
    (vLLM ``model_executor.models.utils.get_pp_indices`` partitions ``num_hidden_layers`` over the PP ranks;
    SGLang's ``get_pp_indices`` too). Raises ``PlanInputError``; None ``layers`` (not known): nothing to check."""
    pp = spec.parallelism.pipeline
    if layers is not None and pp > layers:
        raise PlanInputError("spec.parallelism.pipeline",
                             f"{pp} pipeline stages for a model of {layers} layers: every stage needs at least one "
                             f"layer; use at most {layers}")


def known_layers(spec: InferenceServerSpec) -> int | None:
    """The model's layer count from the spec or the catalog (no Hub read), None when neither says."""
    model = lookup_model(spec.model.name)
    if spec.model.architecture is not None and spec.model.architecture.num_layers is not None:
        return spec.model.architecture.num_layers
    if model is not None:
        return model.hybrid.total_layers if model.hybrid else model.architecture.num_layers
    return None


def resolve_inputs(  # noqa: C901 - one source per input, in precedence order
    spec: InferenceServerSpec,
    *,
    node_product: str | None = None,
    node_gpu_memory_mib: int | None = None,
    node_compute_capability: tuple[int, int] | None = None,
    hf_config: dict[str, Any] | None = None,
    adapter_configs: Mapping[str, Mapping[str, Any]] | None = None,
    draft_config: Mapping[str, Any] | None = None,
    checkpoint_weights: tuple[int, str] | None = None,
    draft_weights: tuple[int, str] | None = None,
) -> PlanInputs:
    """Resolve ``spec`` (plus what a node, a config.json, the adapters' adapter_config.json and the draft's
    config.json say) into ``PlanInputs``.

    ``checkpoint_weights``: (bytes per GPU, source) the engine's sharding rules gave for the resolved checkpoint
    (``ctxfit.engines.weights``); used when the spec has no ``weightsPerGPU``, before the catalog.

    Raises:
        PlanInputError: unknown GPU without memory, unknown model without architecture, weights that
            cannot be estimated. Weights larger than the GPU are not an input error (the planner's verdict).
    """
    product = spec.gpu.product or node_product
    gpu = lookup_gpu(product)
    if spec.gpu.memory is not None:
        total = quantity_to_bytes(spec.gpu.memory)
    elif node_gpu_memory_mib is not None:
        total = node_gpu_memory_mib * MiB
    elif gpu is not None:
        total = gpu.total_bytes
    elif product:
        raise PlanInputError(
            "spec.gpu.memory", f"GPU product {product!r} is not in the catalog; set gpu.memory (e.g. 81559Mi)"
        )
    else:
        raise PlanInputError("spec.gpu.product", "set gpu.product (a GFD nvidia.com/gpu.product value) or gpu.memory")
    reserve_mib = gpu.driver_reserve_mib if gpu is not None else DEFAULT_DRIVER_RESERVE_MIB
    cuda_total = total - reserve_mib * MiB
    cc = gpu.compute_capability if gpu is not None else node_compute_capability

    model = lookup_model(spec.model.name)
    if spec.model.architecture is not None:
        arch = spec.model.architecture
        if arch.max_position_embeddings is None and model is not None:
            arch = arch.model_copy(update={"max_position_embeddings": model.architecture.max_position_embeddings})
    elif hf_config is not None:
        try:
            arch = architecture_from_hf_config(hf_config)
        except ValueError as exc:
            raise PlanInputError("spec.model.architecture", f"{spec.model.name}: config.json: {exc}") from exc
    elif model is not None:
        arch = model.architecture
    else:
        raise PlanInputError(
            "spec.model.architecture",
            f"model {spec.model.name!r} is not in the catalog and no config.json was resolved; resolve it "
            "(from the Hub, --model-dir DIR or --hf-config FILE) or give model.architecture",
        )

    shards = spec.parallelism.tensor * spec.parallelism.pipeline
    if spec.model.weights_per_gpu is not None:
        weights = quantity_to_bytes(spec.model.weights_per_gpu)
        weights_source = "spec.model.weightsPerGPU"
    elif checkpoint_weights is not None:
        weights, weights_source = checkpoint_weights
    elif model is not None and model.weights_total_bytes is not None:
        weights = -(-model.weights_total_bytes // shards)
        weights_source = f"catalog checkpoint {model.weights_total_bytes / 1e9:.0f} GB / (TP x PP = {shards})"
    else:
        raise PlanInputError(
            "spec.model.weightsPerGPU",
            f"cannot estimate weights of {spec.model.name!r}: no checkpoint was resolved (a config.json alone has no "
            "tensors) and it is not in the catalog; resolve its checkpoint (from the Hub or --model-dir DIR) or "
            "set model.weightsPerGPU"
        )
    # weights larger than the GPU are a verdict (budget/verdict.py), not an input error

    kind = spec.engine.kind.value
    version = parse_version(spec.engine.version, default=DEFAULT_ENGINE_VERSION[kind])
    hf = hf_config or {}
    text = hf.get("text_config", hf) if isinstance(hf.get("text_config"), dict) else hf
    try:
        hybrid = hybrid_from_hf_config(text) if hf_config is not None else (model.hybrid if model else None)
    except ValueError as exc:
        raise PlanInputError("spec.model.architecture", f"{spec.model.name}: config.json: {exc}") from exc
    total_layers = hybrid.total_layers if hybrid else arch.num_layers
    try:  # config.json is input: a field of the wrong type is a named error, never a TypeError further on
        hidden = model.hidden_size if model else int_field(text, "hidden_size")
        intermediate = model.intermediate_size if model else int_field(text, "intermediate_size")
        vocab = model.vocab_size if model else int_field(text, "vocab_size")
        moe = model.moe if model else moe_from_hf_config(text)
    except ValueError as exc:
        raise PlanInputError("spec.model.architecture", f"{spec.model.name}: config.json: {exc}") from exc
    try:
        dims = lora_geometry(text, hidden=hidden, heads=arch.num_attention_heads or text.get("num_attention_heads"),
                             kv_heads=arch.num_kv_heads, head_dim=arch.head_dim, intermediate=intermediate,
                             vocab=vocab, layers=total_layers, mla=arch.attention is AttentionKind.MLA, moe=moe,
                             hybrid=hybrid) if spec.lora is not None else None
    except (ValueError, TypeError) as exc:  # TypeError: a config.json field of the wrong type
        raise PlanInputError("spec.lora", str(exc)) from exc
    nextn = text.get("num_nextn_predict_layers")
    try:
        lora = resolve_lora(spec, dims, adapter_configs)
        draft = resolve_draft(spec, weights, arch.num_layers or total_layers or 1,
                              nextn if isinstance(nextn, int) else None, draft_config, draft_weights)
    except ExtrasError as exc:
        raise PlanInputError(exc.field, str(exc).split(": ", 1)[1]) from exc
    return PlanInputs(
        spec=spec,
        gpu=gpu,
        gpu_total_bytes=total,
        cuda_total_bytes=cuda_total,
        compute_capability=cc,
        architecture=arch,
        model=model,
        weights_per_gpu_bytes=weights,
        weights_source=weights_source,
        engine_version=version,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        moe=moe,
        hybrid=hybrid,
        total_layers=total_layers,
        quantization=quantization_method(text, spec.engine.args),
        architectures=tuple(a for a in _list(hf.get("architectures")) if isinstance(a, str)),
        lora=lora,
        draft=draft,
        dims=dims,
    )


def quantization_method(text: dict[str, Any], args: list[str]) -> str | None:
    """The weight quantization method: ``engine.args`` ``--quantization X`` (or ``--quantization=X``) wins
    over config.json ``quantization_config.quant_method``; bitsandbytes with ``load_in_8bit`` is
    ``"bitsandbytes-8bit"`` (the 4-bit and 8-bit paths keep different buffers). Lower case; None if absent."""
    for i, arg in enumerate(args):
        if arg == "--quantization" and i + 1 < len(args):
            return args[i + 1].lower()
        if arg.startswith("--quantization="):
            return arg.split("=", 1)[1].lower()
    config = text.get("quantization_config")
    if not isinstance(config, dict) or not isinstance(config.get("quant_method"), str):
        return None
    method = str(config["quant_method"]).lower()
    if method == "bitsandbytes" and config.get("load_in_8bit"):
        return "bitsandbytes-8bit"
    return method


def moe_from_hf_config(text: dict[str, Any]) -> MoE | None:
    """MoE sizes from config.json fields (n_routed_experts | num_local_experts | num_experts,
    num_experts_per_tok, moe_intermediate_size | intermediate_size), or None for a dense model.

    Raises:
        ValueError: a field of the wrong type (``hfconfig.int_field``), naming it.
    """
    experts = int_field(text, "n_routed_experts") or int_field(text, "num_local_experts") or \
        int_field(text, "num_experts")
    top_k = int_field(text, "num_experts_per_tok")
    if experts is None or top_k is None or experts <= 1:
        return None
    inter = int_field(text, "moe_intermediate_size") or int_field(text, "intermediate_size")
    if inter is None:
        return None
    shared = int_field(text, "shared_expert_intermediate_size") or 0
    return MoE(experts=experts, top_k=top_k, intermediate_size=inter, shared_intermediate_size=shared)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
