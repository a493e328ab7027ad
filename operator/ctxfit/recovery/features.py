"""Which part of a start-up an out-of-memory failure happened in, when LoRA or speculative decoding is on.

A CUDA OOM (or SGLang's "Not enough memory") raised while the engine allocates its LoRA buffers or loads / sizes
the speculative draft is a class of its own: the knob that fixes it is the adapters' GPU slots (``maxLoras``), the
draft's tokens per step or the memory left for the draft's pool, not the context or the graph batch. The attribution
reads the frames of the traceback (or the last start-up line) just before the error, which name the engine code
that allocated (module paths and names, checked in the wheels):

- LoRA, vLLM 0.8-0.33: ``create_lora_weights`` (``lora/layers``), ``_create_lora_modules``
  (``lora/model_manager.py``), ``load_lora_model`` (``v1/worker/lora_model_runner_mixin.py``); SGLang 0.4.5-0.5.23:
  ``init_lora_manager`` (``model_executor/model_runner.py``), ``LoRAMemoryPool`` / ``lora/mem_pool.py``.
- Draft, vLLM 0.8.5-0.33: the "Loading drafter model..." line (``v1/worker/gpu_model_runner.py``) with no "Model
  loading took" after it, ``EagleProposer`` / ``DraftModelProposer`` frames (``v1/spec_decode``); SGLang 0.4.5-0.5.23:
  ``EAGLEWorker`` / ``StandaloneWorker`` frames (``speculative/eagle_worker.py``, ``standalone_worker.py``),
  ``is_draft_worker`` and the draft pool's "Draft worker" lines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ctxfit.vocab.kinds import Failure, FailureKind

REFINED = frozenset({
    FailureKind.WEIGHTS_DO_NOT_FIT, FailureKind.GPU_OUT_OF_MEMORY, FailureKind.GRAPH_CAPTURE_OOM,
    FailureKind.STATIC_MEMORY_TOO_SMALL, FailureKind.NO_KV_CACHE_MEMORY, FailureKind.UNKNOWN,
})
"""Memory failures a LoRA or draft frame re-attributes (the context, KV-too-small and host kinds keep theirs)."""
WINDOW_CHARS = 6000
"""How far before the error the frames are read (a Python traceback of an engine start is a few KB)."""


@dataclass(frozen=True)
class Marker:
    """A literal that names the allocating code, the kind it means, and where it comes from."""

    text: str
    kind: FailureKind
    source: str


MARKERS: tuple[Marker, ...] = (
    Marker("create_lora_weights", FailureKind.LORA_BUFFERS_OOM, "vLLM 0.8-0.33 lora/layers"),
    Marker("_create_lora_modules", FailureKind.LORA_BUFFERS_OOM, "vLLM 0.8-0.33 lora/model_manager.py"),
    Marker("load_lora_model", FailureKind.LORA_BUFFERS_OOM, "vLLM 0.8-0.33 lora_model_runner_mixin.py"),
    Marker("init_lora_manager", FailureKind.LORA_BUFFERS_OOM, "SGLang 0.4-0.5.23 model_runner.py"),
    Marker("LoRAMemoryPool", FailureKind.LORA_BUFFERS_OOM, "SGLang 0.4.5-0.5.23 lora/mem_pool.py"),
    Marker("lora/mem_pool.py", FailureKind.LORA_BUFFERS_OOM, "SGLang 0.4.5-0.5.23"),
    Marker("EagleProposer", FailureKind.DRAFT_MODEL_OOM, "vLLM 0.8.5-0.33 v1/spec_decode/eagle.py"),
    Marker("DraftModelProposer", FailureKind.DRAFT_MODEL_OOM, "vLLM 0.19-0.33 v1/spec_decode/draft_model.py"),
    Marker("spec_decode/eagle.py", FailureKind.DRAFT_MODEL_OOM, "vLLM 0.8.5-0.33"),
    Marker("EAGLEWorker", FailureKind.DRAFT_MODEL_OOM, "SGLang 0.4.5-0.5.23 speculative/eagle_worker.py"),
    Marker("StandaloneWorker", FailureKind.DRAFT_MODEL_OOM, "SGLang 0.5.4-0.5.23 speculative/standalone_worker.py"),
    Marker("eagle_worker.py", FailureKind.DRAFT_MODEL_OOM, "SGLang 0.4.5-0.5.23"),
    Marker("is_draft_worker", FailureKind.DRAFT_MODEL_OOM, "SGLang 0.4.5-0.5.23 model_runner.py"),
    Marker("Draft worker", FailureKind.DRAFT_MODEL_OOM, "SGLang 0.5.x memory pool lines of the draft"),
)
DRAFTER_LINE = "Loading drafter model"
DRAFTER_DONE = "Model loading took"


def _error_position(text: str, failure: Failure) -> int:
    probe = failure.evidence.strip()[:80]
    at = text.rfind(probe) if probe else -1
    return at if at >= 0 else len(text)


def attribute(failure: Failure, text: str) -> Failure:
    """``failure`` re-attributed to the LoRA buffers or the draft when the frames just before its error name them
    (module docstring); unchanged otherwise. Never raises."""
    if failure.kind not in REFINED or not text:
        return failure
    if failure.kind is FailureKind.UNKNOWN and "out of memory" not in text.lower() and "Not enough memory" not in text:
        return failure
    end = _error_position(text, failure)
    window = text[max(0, end - WINDOW_CHARS):end + 2000]
    traceback = window.rfind("Traceback (most recent call last)")
    frames = window[traceback:] if traceback >= 0 else window
    found = [m for m in MARKERS if m.text in frames]
    drafter = window.rfind(DRAFTER_LINE)
    if drafter >= 0 and DRAFTER_DONE not in window[drafter:]:
        found.append(Marker(DRAFTER_LINE, FailureKind.DRAFT_MODEL_OOM, "vLLM 0.8.5-0.33 gpu_model_runner.py"))
    if not found:
        return failure
    marker = found[0]
    return replace(failure, kind=marker.kind, evidence=f"{failure.evidence} (in {marker.text}: {marker.source})",
                   silent=False)
