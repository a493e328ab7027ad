"""``status.model.resolved``: what resolution of ``spec.model`` found, and where it came from.

Filled by the operator's resolution step (``ctxfit.controller.converge.resolution``, docs/design/model-resolution.md)
before the first plan of a spec: the commit a moving branch pointed at, the architecture in
``spec.model.architecture``'s shape, and the weights per GPU the plan uses. A re-plan of the same spec (a step-down)
reads its inputs back from here, so it needs no Hub request.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import WireModel
from .model import Architecture

ResolvedSource = Literal["hub", "volume", "spec", "catalog"]


class ResolvedModel(WireModel):
    """The resolved model (``status.model.resolved``)."""

    source: ResolvedSource
    """Where the architecture and weights came from: `hub` (config.json and safetensors headers from the Hub or a
    mirror), `volume` (a preloaded claim), `spec` (`model.architecture` and `weightsPerGPU`), `catalog` (the built-in
    catalog)."""
    repo: Annotated[str, Field(max_length=253)] | None = None
    """Repository id (or the path inside the volume) that was read."""
    revision: Annotated[str, Field(max_length=255)] | None = None
    """The revision asked for (`spec.model.revision`)."""
    sha: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-f]{7,64}$")] | None = None
    """The commit the revision resolved to (the Hub's `X-Repo-Commit`)."""
    architectures: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=8)
    """config.json `architectures` (the engine's model class)."""
    architecture: Architecture | None = None
    """The attention geometry read from config.json, in `spec.model.architecture`'s shape."""
    quantization: Annotated[str, Field(max_length=64)] | None = None
    """Weight format: `bf16`, `fp16`, `fp8`, `awq`, `gptq`, `mxfp4`, `nvfp4`, `compressed-tensors`..."""
    checkpoint_bytes: Annotated[int, Field(ge=0)] | None = None
    """Bytes of the checkpoint's weight files."""
    weights_per_gpu_bytes: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="weightsPerGPUBytes")
    """Weight bytes each GPU loads under the plan's layout (the engine's sharding rules)."""
    max_position_embeddings: Annotated[int, Field(ge=1)] | None = None
    """The model's maximum context (config.json `max_position_embeddings`, or the derived maximum)."""
    resolved_at: str | None = None
    """When it was resolved (RFC 3339)."""


class ResolvedAdapter(WireModel):
    """A Hub LoRA adapter whose adapter_config.json was read (``status.model.adapters``)."""

    name: Annotated[str, Field(max_length=63)]
    """`spec.lora.adapters[].name`."""
    repo: Annotated[str, Field(max_length=253)]
    """Repository id that was read."""
    sha: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-f]{7,64}$")] | None = None
    """The commit the adapter's revision resolved to."""
    rank: Annotated[int, Field(ge=1, le=1024)] | None = None
    """adapter_config.json `r`."""
    target_modules: list[Annotated[str, Field(max_length=128)]] | None = Field(default=None, max_length=64)
    """adapter_config.json `target_modules` (`["all-linear"]` for PEFT's shorthand)."""
    base_model: Annotated[str, Field(max_length=253)] | None = None
    """adapter_config.json `base_model_name_or_path`."""
