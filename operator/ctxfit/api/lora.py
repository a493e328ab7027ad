"""``spec.lora``: LoRA adapters served next to the base model, and the GPU buffers the engine preallocates for them.

Adapters come from the Hugging Face Hub (``source`` a repo id, downloaded into the weights cache with the model at
``revision``) or a path the engine can read. ``rank`` and ``targetModules`` are read from the adapter's
``adapter_config.json`` (PEFT ``LoraConfig``: ``r``, ``target_modules``, ``base_model_name_or_path``) when the
planner is given it (``ctxfit plan --fetch-config`` fetches it; ``vocab.extras``), else taken from the spec.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from .base import WireModel
from .validation import DNS1035_LABEL

ADAPTER_ROOT = "/models/ctxfit-adapters"
"""Where the weights cache keeps Hub adapters, one directory per adapter name (``render/cache.py`` links each
``snapshot_download`` there; the engines read ``ADAPTER_ROOT/<name>``)."""
MAX_ADAPTERS = 64
MAX_TARGET_MODULES = 64
MODULE_NAME = r"^[A-Za-z0-9_.*]{1,128}$"


class LoRAAdapter(WireModel):
    """One adapter: the name clients request, where its weights are, and (optionally) its rank and modules."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1035_LABEL)]
    """The model name clients send (`"model": "<name>"` in an OpenAI request); a DNS-1035 label."""
    source: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s=]+$")]
    """A Hugging Face repo id (`org/adapter`, downloaded into the weights cache with the model) or a path inside the
    engine container (`/adapters/sql`, read as is)."""
    revision: Annotated[str, Field(min_length=1, max_length=255)] = "main"
    """Branch, tag or commit of a Hub adapter (default `main`)."""
    rank: Annotated[int, Field(ge=1, le=1024)] | None = None
    """The adapter's LoRA rank (adapter_config.json `r`). Unset: read from adapter_config.json; required when the
    planner cannot read it."""
    target_modules: Annotated[list[Annotated[str, Field(max_length=128, pattern=MODULE_NAME)]],
                              Field(max_length=MAX_TARGET_MODULES)] | None = None
    """Modules the adapter changes (adapter_config.json `target_modules`, e.g. `q_proj`, `v_proj`). Unset: read
    from adapter_config.json, else every linear module."""

    @property
    def from_hub(self) -> bool:
        """A Hub repo id (``org/name``), not a path."""
        return not self.source.startswith(("/", ".", "~")) and self.source.count("/") == 1


class LoRASpec(WireModel):
    """LoRA adapters and the engine's LoRA capacity (vLLM `--enable-lora --max-loras --max-lora-rank
    --max-cpu-loras --lora-modules`; SGLang `--lora-paths --max-loras-per-batch --max-lora-rank`)."""

    adapters: Annotated[list[LoRAAdapter], Field(min_length=1, max_length=MAX_ADAPTERS)]
    """Adapters loaded at start-up; names must be unique."""
    max_loras: Annotated[int, Field(ge=1, le=256)] | None = None
    """Adapters one batch may use at once: the GPU buffers hold this many (vLLM `--max-loras`, SGLang
    `--max-loras-per-batch`). Unset: the number of adapters, at most 8."""
    max_lora_rank: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Largest rank the buffers are sized for (`--max-lora-rank`; vLLM rounds up to 8, 16, 32, 64, 128, 256, 320 or
    512). Unset: the largest adapter's rank."""
    max_cpu_loras: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Adapters kept in host memory (vLLM `--max-cpu-loras`, SGLang `--max-loaded-loras`); at least maxLoras.
    Unset: maxLoras."""
    target_modules: Annotated[list[Annotated[str, Field(max_length=128, pattern=MODULE_NAME)]],
                              Field(max_length=MAX_TARGET_MODULES)] | None = None
    """Modules that get LoRA buffers (vLLM `--lora-target-modules`, 0.19+; SGLang `--lora-target-modules`). Unset:
    vLLM gives every linear module buffers, SGLang the union of the adapters' modules."""

    @model_validator(mode="after")
    def _consistent(self) -> LoRASpec:
        names = [a.name for a in self.adapters]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"lora.adapters: name {dup!r} is used twice")
        if self.max_cpu_loras is not None and self.max_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"lora.maxCpuLoras: {self.max_cpu_loras} is below lora.maxLoras {self.max_loras}")
        if self.max_lora_rank is not None:
            over = next((a for a in self.adapters if a.rank is not None and a.rank > self.max_lora_rank), None)
            if over is not None:
                raise ValueError(f"lora.adapters: {over.name} has rank {over.rank}, above lora.maxLoraRank "
                                 f"{self.max_lora_rank}")
        return self

    @property
    def slots(self) -> int:
        """Adapters the GPU buffers hold (``max_loras``, default the adapter count capped at 8)."""
        return self.max_loras or min(len(self.adapters), 8)
