"""Wording drift: each changed or new kind is recognized in the wording of at least two engine (or
library) versions, with its numbers; the per-engine coverage tables are complete; evidence is whole words.
"""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import EngineKind, GiB, MiB
from ctxfit.engines.sglang.failures import FAILURE_PATTERNS as SGLANG_PATTERNS
from ctxfit.engines.sglang.failures import WORDING_COVERAGE as SGLANG_COVERAGE
from ctxfit.engines.vllm.failures import FAILURE_PATTERNS as VLLM_PATTERNS
from ctxfit.engines.vllm.failures import WORDING_COVERAGE as VLLM_COVERAGE
from ctxfit.recovery import FailureKind, Observation, classify
from ctxfit.recovery.evidence import ELLIPSIS, error_line, exception_at, trim_words
from ctxfit.recovery.generic import EVENT_PATTERNS, GENERIC_PATTERNS

from tests.unit.recovery.wordings import REPORT_WORDINGS, Wording
from tests.unit.recovery.wordings_config_gpu import ISSUE25_WORDINGS

K = FailureKind
VLLM, SGLANG = EngineKind.VLLM, EngineKind.SGLANG


WORDINGS = [
    # InvalidParallelism: vLLM 0.1-0.9 ValueError, 0.10+ pydantic "Value error", 0.1-0.5 PP layers, MoE experts,
    # SGLang / model-file asserts
    Wording("tp-heads-vllm-0.6", K.INVALID_PARALLELISM,
            "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3).",
            numbers={"attentionHeads": 32, "tensorParallelSize": 3}),
    Wording("tp-heads-vllm-0.10-pydantic", K.INVALID_PARALLELISM,
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n  Value error, Total "
            "number of attention heads (64) must be divisible by tensor parallel size (3). [type=value_error, "
            "input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]",
            numbers={"attentionHeads": 64, "tensorParallelSize": 3}),
    Wording("pp-layers-vllm-0.5", K.INVALID_PARALLELISM,
            "ValueError: Total number of hidden layers (61) must be divisible by pipeline parallel size (2).",
            numbers={"layers": 61, "pipelineParallelSize": 2}),
    Wording("experts-vllm-moe", K.INVALID_PARALLELISM,
            "ValueError: Tensor parallel size 16 is greater than the number of experts 8.",
            numbers={"tensorParallelSize": 16}),
    Wording("kv-heads-model-assert", K.INVALID_PARALLELISM,
            "ValueError: num_key_value_heads=4 is not divisible by TP=8", SGLANG,
            numbers={"kvHeads": 4, "tensorParallelSize": 8}),
    Wording("heads-sglang-assert", K.INVALID_PARALLELISM,
            "AssertionError: num_heads=28 is not divisible by tp_size=8", SGLANG,
            numbers={"attentionHeads": 28, "tensorParallelSize": 8}),
    Wording("heads-plain-numbers-robustness", K.INVALID_PARALLELISM,
            "ValueError: Number of attention heads 40 must be divisible by tp (16)", SGLANG,
            numbers={"attentionHeads": 40, "tensorParallelSize": 16}),
    Wording("sglang-moe-ep-0.5.4", K.INVALID_PARALLELISM,
            "AssertionError: tp_size 8 must be divisible by moe_ep_size 3", SGLANG,
            numbers={"tensorParallelSize": 8, "expertParallelSize": 3}),
    Wording("sglang-nodes-0.3.6", K.INVALID_PARALLELISM,
            "AssertionError: tp_size must be divisible by number of nodes", SGLANG),
    Wording("fp8-block-per-partition", K.INVALID_PARALLELISM,
            "ValueError: Weight input_size_per_partition = 7168 is not divisible by weight quantization block_k = 128.",
            SGLANG),
    Wording("ensure-divisibility-sglang-0.4.3", K.INVALID_PARALLELISM,
            'Traceback (most recent call last):\n  File "sglang/srt/distributed/utils.py", line 23, in '
            "ensure_divisibility\nAssertionError: 40 is not divisible by 16", SGLANG,
            numbers={"dividedCount": 40, "parallelSize": 16}),
    Wording("ensure-divisibility-vllm-bare", K.INVALID_PARALLELISM, "AssertionError: 28 is not divisible by 8",
            numbers={"dividedCount": 28, "parallelSize": 8}),
    Wording("kv-heads-parenthesized", K.INVALID_PARALLELISM,
            "ValueError: num_key_value_heads (8) must be divisible by tensor parallel size (3)",
            numbers={"kvHeads": 8, "tensorParallelSize": 3}),
    Wording("experts-expert-parallel", K.INVALID_PARALLELISM,
            "ValueError: Number of experts (60) must be divisible by expert parallel size (8)",
            numbers={"experts": 60, "expertParallelSize": 8}),
    Wording("not-parallel-divisible", K.UNKNOWN, "ValueError: block_size (17) must be divisible by 16"),
    # CUDADriverTooOld: torch RuntimeError and UserWarning, CUDA error 35, 804 through torch and the driver API,
    # nvidia-container-cli as a pod Event
    Wording("driver-torch-runtime", K.CUDA_DRIVER_TOO_OLD,
            "RuntimeError: The NVIDIA driver on your system is too old (found version 12040). Please update your GPU "
            "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
            numbers={"driverCudaVersion": 12040}, node="node-a"),
    Wording("driver-torch-warning", K.CUDA_DRIVER_TOO_OLD,
            "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: The NVIDIA "
            "driver on your system is too old (found version 11040).\nRuntimeError: No CUDA GPUs are available",
            numbers={"driverCudaVersion": 11040}),
    Wording("driver-error-35", K.CUDA_DRIVER_TOO_OLD,
            "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version", SGLANG),
    Wording("driver-error-804-torch", K.CUDA_DRIVER_TOO_OLD,
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
            "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on "
            "non supported HW"),
    Wording("driver-error-804-driver-api", K.CUDA_DRIVER_TOO_OLD,
            "failed call to cuInit: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward compatibility was attempted "
            "on non supported HW", None),
    Wording("driver-nvml-mismatch", K.CUDA_DRIVER_TOO_OLD,
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has unsupported display "
            "driver / cuda driver combination"),
    Wording("driver-container-cli-event", K.CUDA_DRIVER_TOO_OLD, "",
            events=("Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: "
                    "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your "
                    "driver to a newer version, or use an earlier cuda container: unknown",),
            numbers={"requiredCudaVersion": 12.8}),
    # MambaCacheTooSmall: vLLM 0.25 (short) and main (with the advice)
    Wording("mamba-vllm-0.25", K.MAMBA_CACHE_TOO_SMALL,
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (614).",
            numbers={"maxNumSeqs": 1024, "availableMambaBlocks": 614}),
    Wording("mamba-vllm-main", K.MAMBA_CACHE_TOO_SMALL,
            "(EngineCore_DP0 pid=1) ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (108). Each "
            "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
            "max_num_seqs to at most 108 or increase gpu_memory_utilization.",
            numbers={"maxNumSeqs": 256, "availableMambaBlocks": 108}),
    # SharedMemoryTooSmall: vLLM 0.28 (one line, one number), main (numbers on the next line), KV-offload EFAULT
    Wording("shm-vllm-0.28", K.SHARED_MEMORY_TOO_SMALL,
            "RuntimeError: Insufficient space in /dev/shm: 16379 MiB required, 7746 MiB free",
            numbers={"requestedBytes": 16379 * MiB, "freeBytes": 7746 * MiB}),
    Wording("shm-vllm-main", K.SHARED_MEMORY_TOO_SMALL,
            "RuntimeError: Insufficient space in /dev/shm:\n4095/4096 MiB required, 1405 MiB free",
            numbers={"requestedBytes": 4096 * MiB, "freeBytes": 1405 * MiB}),
    Wording("shm-offload-efault", K.SHARED_MEMORY_TOO_SMALL,
            "Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/kv_offload/"
            "cpu/shared_offload_region.py\", line 88, in __init__\n    madvise(self._mmap, MADV_POPULATE_WRITE)\n"
            "OSError: [Errno 14] Bad address"),
    Wording("shm-offload-efault-bare", K.SHARED_MEMORY_TOO_SMALL, "OSError: [Errno 14] Bad address"),
    Wording("shm-nccl-2.19-extend", K.SHARED_MEMORY_TOO_SMALL,
            "misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12Cd to 9637892 bytes",
            numbers={"requestedBytes": 9637892}),
    # KVCacheDtypeUnsupported: per-backend wording (0.18+), Triton MLA SM89 gate (0.33), V1 FlashAttention (0.8)
    Wording("fp8-triton-mla-0.33", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "ValueError: FP8 KV cache is not supported by the Triton MLA backend on NVIDIA RTX A6000 (compute "
            "capability 8.6); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype bfloat16."),
    Wording("fp8-backend-generic", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "ValueError: FP8 KV cache is not supported by the FLASH_ATTN attention backend on this GPU: "
            "requires SM89+"),
    Wording("fp8-flash-attn-v1-0.8", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "NotImplementedError: FlashAttention does not support fp8 kv-cache on this device."),
    Wording("fp8-selector-0.17", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(...). Reasons: "
            "{FLASHMLA: [compute capability not supported], TRITON_MLA: [kv_cache_dtype not supported]}."),
    # KVCacheTooSmall, SGLang's request-length form (0.4.3 with "tokens", older without)
    # ContextExceedsModelLimit (SGLang model_config.py _derive_context_length): the raised error in the 0.3.5-0.4
    # wording and the 0.5 wording built from the warning text; the logged warning alone is no refusal
    Wording("sglang-context-error-0.4", K.CONTEXT_EXCEEDS_MODEL_LIMIT,
            "ValueError: User-specified context_length (65536) is greater than the derived context_length (32768). "
            "This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ "
            "from max_position_embeddings in the model's config. To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", SGLANG,
            numbers={"requestedContextLength": 65536, "derivedMaxContextLength": 32768}),
    Wording("sglang-draft-context-error-0.5", K.CONTEXT_EXCEEDS_MODEL_LIMIT,
            "ValueError: Warning: Target model's context_length (262144) is greater than the derived context_length "
            "(40960). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length "
            "may differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the "
            "env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", SGLANG,
            numbers={"requestedContextLength": 262144, "derivedMaxContextLength": 40960}),
    Wording("sglang-context-warning-is-no-refusal", K.UNKNOWN,
            "[2026-02-08 03:36:45] Warning: Target model's context_length (131072) is greater than the derived "
            "context_length (2048). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            "context_length may differ from max_position_embeddings in the model's config.", SGLANG),
    Wording("sglang-input-length-0.4", K.KV_CACHE_TOO_SMALL,
            "Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens). Use a shorter input or "
            "enable --allow-auto-truncate.", SGLANG, numbers={"estimatedMaxContextLength": 59862}),
    Wording("sglang-input-length-no-unit", K.KV_CACHE_TOO_SMALL,
            "Input length (9000) exceeds the maximum allowed length (4095).", SGLANG,
            numbers={"estimatedMaxContextLength": 4095}),
    # GPUOutOfMemory: torch 2.1+ and torch 1.x/2.0 forms without a phase line
    Wording("bare-oom-torch-2", K.GPU_OUT_OF_MEMORY,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 3 has a total capacity of "
            "79.19 GiB of which 17.06 MiB is free. Including non-PyTorch memory, this process has 79.16 GiB memory "
            "in use. Of the allocated memory 77.58 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch "
            "but unallocated.",
            numbers={"requestedBytes": int(1.02 * GiB), "totalBytes": int(79.19 * GiB),
                     "inUseBytes": int(79.16 * GiB)}),
    Wording("bare-oom-torch-1", K.GPU_OUT_OF_MEMORY,
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; "
            "22.51 GiB already allocated; 7.06 MiB free; 22.77 GiB reserved in total by PyTorch)", SGLANG,
            numbers={"requestedBytes": 20 * MiB, "totalBytes": int(23.69 * GiB), "inUseBytes": int(22.51 * GiB)}),
    # ModelAccessDenied: huggingface_hub 0.2x gated 401/403, private repo 404
    Wording("hf-gated-401", K.MODEL_ACCESS_DENIED,
            "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-x)\n\nCannot access gated "
            "repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.\nAccess to model "
            "meta-llama/Llama-3.1-8B is restricted. You must have access to it and be authenticated to access it."),
    Wording("hf-gated-403", K.MODEL_ACCESS_DENIED,
            "OSError: You are trying to access a gated repo.\n403 Client Error. Access to model x/y is restricted "
            "and you are not in the authorized list.", SGLANG),
    Wording("hf-older-401", K.MODEL_ACCESS_DENIED,
            "Access to model meta-llama/Llama-2-7b-hf is restricted. You must be authenticated to access it."),
    Wording("transformers-not-a-model-id", K.MODEL_ACCESS_DENIED,
            "OSError: acme/privat-model is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token having "
            "permission to this repo", SGLANG),
    Wording("hf-private-404", K.MODEL_NOT_FOUND,  # a 404 (repo or revision) is ModelNotFound
            "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: "
            "https://huggingface.co/acme/private/resolve/main/config.json."),
]


ALL_WORDINGS = WORDINGS + REPORT_WORDINGS + ISSUE25_WORDINGS


@pytest.mark.parametrize("w", ALL_WORDINGS, ids=[w.id for w in ALL_WORDINGS])
def test_wording(w: Wording) -> None:
    failure = classify(Observation(reason="Error", exit_code=1, message=w.text, events=w.events, node=w.node),
                       w.engine)
    assert failure.kind is w.kind, failure
    for name, want in w.numbers.items():
        got = failure.numbers.get(name)
        assert got is not None, (name, failure.numbers)
        assert abs(got - want) <= 0.005 * GiB if name.endswith("Bytes") else got == want, (name, got, want)
    assert failure.evidence
    if w.node:
        assert failure.node == w.node and failure.to_wire()["node"] == w.node


def test_node_only_on_node_kinds() -> None:
    failure = classify(Observation(message="ValueError: max_num_seqs (8) exceeds available Mamba cache blocks (4).",
                                   node="n1"), VLLM)
    assert failure.node is None and "node" not in failure.to_wire()


def versions_of(covers: tuple[tuple[str, str], ...]) -> set[str]:
    return {v for pair in covers for v in pair}


@pytest.mark.parametrize("patterns", [VLLM_PATTERNS, SGLANG_PATTERNS, GENERIC_PATTERNS, EVENT_PATTERNS],
                         ids=["vllm", "sglang", "generic", "events"])
def test_every_pattern_records_the_versions_it_covers(patterns: Any) -> None:
    for pattern in patterns:
        assert pattern.covers, f"{pattern.kind} {pattern.markers[0]!r} has no covers"
        for first, last in pattern.covers:
            assert first and last


def test_coverage_tables_are_the_patterns() -> None:
    assert [row.marker for row in VLLM_COVERAGE] == [p.markers[0] for p in VLLM_PATTERNS]
    assert [row.marker for row in SGLANG_COVERAGE] == [p.markers[0] for p in SGLANG_PATTERNS]
    changed = {K.SHARED_MEMORY_TOO_SMALL, K.KV_CACHE_DTYPE_UNSUPPORTED, K.MAMBA_CACHE_TOO_SMALL, K.INVALID_PARALLELISM}
    for kind in changed:
        rows = [row for row in VLLM_COVERAGE if row.kind is kind]
        assert len(set().union(*(versions_of(r.covers) for r in rows))) >= 2, kind


@pytest.mark.parametrize("limit", [16, 40, 80, 200])
def test_trim_words_never_cuts_a_word(limit: int) -> None:
    words = [f"w{i:03d}x" for i in range(300)]
    line = " ".join(words)
    for focus in (0, len(line) // 2, len(line) - 1):
        out = trim_words(line, limit, focus)
        assert len(out) <= limit
        body = out.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS)
        assert body and all(part in words for part in body.split(" ")), out
    assert trim_words("short line  ", limit) == "short line"


def test_error_line_prefers_the_root_exception_over_wrappers_and_the_last_line() -> None:
    text = ("INFO loading\nERROR [core.py] EngineCore failed to start.\nTraceback (most recent call last):\n"
            '  File "a.py", line 3, in f\nKeyError: \'rope_scaling\'\n\n'
            "The above exception was the direct cause of the following exception:\n"
            "RuntimeError: Engine core initialization failed. See root cause above.\n"
            "[rank0]: destroy_process_group() was not called before program exit")
    assert error_line(text, ("Engine core initialization failed", "EngineCore failed to start")) == \
        "KeyError: 'rope_scaling'"
    assert classify(Observation(message=text), VLLM).evidence == "KeyError: 'rope_scaling'"


@pytest.mark.parametrize(("line", "at"), [
    ("ValueError: x", 0), ("  torch.OutOfMemoryError: CUDA", 2), ('RuntimeError("x")', 0), ("foo MyError: x", 4),
    ("NoError here", -1), ("KeyboardInterrupt: terminated", 0), ("x=ValueError: y", -1), ("(" * 5000, -1),
])
def test_exception_at(line: str, at: int) -> None:
    assert exception_at(line) == at


def test_unknown_evidence_of_a_huge_single_line_is_whole_words() -> None:
    line = "ERROR worker died: " + " ".join(f"part{i}" for i in range(20000))
    failure = classify(Observation(message=line), VLLM)
    assert failure.kind is K.UNKNOWN
    assert failure.evidence.startswith("ERROR worker died: part0") and failure.evidence.endswith(ELLIPSIS)
    assert failure.evidence[: -len(ELLIPSIS)].split(" ")[-1].startswith("part")
