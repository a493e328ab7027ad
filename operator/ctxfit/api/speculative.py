"""``spec.speculative``: speculative decoding (a draft model, an EAGLE / EAGLE-3 head, the model's own MTP layers, or
n-gram prompt lookup) and what it adds to the budget.

The draft is resolved like the target (``model``: a Hub id or path; ``architecture`` / ``weightsPerGPU`` or the
catalog, else the draft's config.json; ``vocab.extras``). MTP uses the target's own next-token layers
(config.json ``num_nextn_predict_layers``), which the engines load only when MTP is on.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, field_validator, model_validator

from .base import WireModel
from .quantity import Quantity, TiB, check_quantity_bounds

if TYPE_CHECKING:
    from .model import Architecture


DRAFT_ROOT = "/models/ctxfit-draft"
"""Where the weights cache keeps a Hub draft (``render/cache.py`` links its ``snapshot_download`` there)."""


class SpeculativeMethod(StrEnum):
    """How draft tokens are proposed."""

    DRAFT_MODEL = "draft"
    """A smaller model of the same family (vLLM ``draft_model``, SGLang ``STANDALONE``)."""
    EAGLE = "eagle"
    """An EAGLE head trained on the target's hidden states (vLLM ``eagle``, SGLang ``EAGLE``)."""
    EAGLE3 = "eagle3"
    """An EAGLE-3 head (vLLM ``eagle3``, SGLang ``EAGLE3``)."""
    MTP = "mtp"
    """The target's multi-token-prediction layers (vLLM ``mtp`` / ``deepseek_mtp``, SGLang ``NEXTN``)."""
    NGRAM = "ngram"
    """Prompt lookup: no draft model (vLLM ``ngram``, SGLang ``NGRAM``)."""


DRAFTED = (SpeculativeMethod.DRAFT_MODEL, SpeculativeMethod.EAGLE, SpeculativeMethod.EAGLE3)
"""Methods that load a separate draft model."""


class DraftModel(WireModel):
    """The draft: where its weights are and, optionally, its attention geometry and per-GPU weight bytes."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s]+$")]
    """A Hugging Face repo id (downloaded into the weights cache with the model) or a path the engine can load."""
    revision: Annotated[str, Field(min_length=1, max_length=255)] = "main"
    """Branch, tag or commit of a Hub draft (default `main`)."""
    architecture: Architecture | None = None
    """The draft's attention geometry (its KV cache). Unset: the catalog, else the draft's config.json, else (EAGLE,
    MTP) the target's per-layer geometry for one layer."""
    weights_per_gpu: Quantity | None = Field(default=None, alias="weightsPerGPU")
    """Draft weight bytes on each GPU (`1Gi`). Unset: the catalog, else the draft's config.json."""

    @field_validator("weights_per_gpu")
    @classmethod
    def _weights_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=2 * TiB, lower_bytes=1 << 20)


class SpeculativeSpec(WireModel):
    """Speculative decoding (vLLM `--speculative-config`, older `--speculative-model`; SGLang
    `--speculative-algorithm`, `--speculative-draft-model-path`, `--speculative-num-steps`,
    `--speculative-eagle-topk`, `--speculative-num-draft-tokens`)."""

    method: SpeculativeMethod
    """`draft` (a draft model), `eagle`, `eagle3`, `mtp` (the model's own next-token layers) or `ngram`."""
    draft: DraftModel | None = None
    """The draft model or EAGLE head; required for draft, eagle and eagle3, forbidden for ngram; optional for mtp
    (a separate MTP checkpoint)."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)] = 3
    """Tokens proposed per step (vLLM `num_speculative_tokens`, SGLang `--speculative-num-steps`); each decode step
    verifies 1 + this many tokens. Lowered first when the draft's memory does not fit."""
    eagle_top_k: Annotated[int, Field(ge=1, le=16)] = 1
    """SGLang only: branches per draft step (`--speculative-eagle-topk`); 1 is a chain."""
    mtp_layers: Annotated[int, Field(ge=1, le=8)] | None = None
    """MTP only: next-token layers the model has (config.json `num_nextn_predict_layers`). Unset: config.json, else
    the catalog, else 1."""
    prompt_lookup_max: Annotated[int, Field(ge=1, le=64)] | None = None
    """ngram only: longest n-gram matched in the prompt (vLLM `prompt_lookup_max`). Unset: the engine's default."""

    @model_validator(mode="after")
    def _draft_matches_method(self) -> SpeculativeSpec:
        if self.method in DRAFTED and self.draft is None:
            raise ValueError(f"speculative.draft: required for method {self.method.value}")
        if self.method is SpeculativeMethod.NGRAM and self.draft is not None:
            raise ValueError("speculative.draft: ngram proposes from the prompt; it takes no draft model")
        if self.method is not SpeculativeMethod.MTP and self.mtp_layers is not None:
            raise ValueError("speculative.mtpLayers: only for method mtp")
        if self.method is not SpeculativeMethod.NGRAM and self.prompt_lookup_max is not None:
            raise ValueError("speculative.promptLookupMax: only for method ngram")
        return self


SPECULATIVE_CEL_RULES: dict[str, list[dict[str, str]]] = {
    "SpeculativeSpec": [
        {
            "rule": f"!(self.method in {[m.value for m in DRAFTED]}) || has(self.draft)",
            "message": "speculative.draft: required for methods " + ", ".join(m.value for m in DRAFTED),
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"self.method != '{SpeculativeMethod.NGRAM.value}' || !has(self.draft)",
            "message": "speculative.draft: ngram proposes from the prompt; it takes no draft model",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"self.method == '{SpeculativeMethod.MTP.value}' || !has(self.mtpLayers)",
            "message": "speculative.mtpLayers: only for method mtp",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"self.method == '{SpeculativeMethod.NGRAM.value}' || !has(self.promptLookupMax)",
            "message": "speculative.promptLookupMax: only for method ngram",
            "reason": "FieldValueForbidden",
        },
    ],
}
"""CEL for ``ctxfit.api.crd``: ``SpeculativeSpec._draft_matches_method`` at admission, so an edit that breaks it is
refused by the API server (a running server is never taken down by it)."""
