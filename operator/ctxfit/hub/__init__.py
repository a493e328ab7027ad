"""Model resolution I/O: Hugging Face Hub (or a mirror through ``HF_ENDPOINT``), the local HF cache (offline) and
local directories, through huggingface_hub. Produces ``ctxfit.vocab.modelsource.ModelSource``; errors are typed
(``ctxfit.hub.errors.ResolveError``). Reads config.json and the safetensors headers only (HTTP byte ranges), never
tensor data."""

from .errors import ResolveError, ResolveKind
from .resolve import resolve_adapter, resolve_hub, resolve_local
from .supported import require_supported

__all__ = ["ResolveError", "ResolveKind", "require_supported", "resolve_adapter", "resolve_hub", "resolve_local"]
