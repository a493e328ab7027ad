"""Failure texts that do not belong to one engine: PyTorch CUDA OOM, NCCL, /dev/shm, Triton, SIGTERM.

Sources:
- PyTorch ``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.14 ``libc10_cuda.so`` strings, docs/engine-memory.md
  C): "CUDA out of memory. Tried to allocate ..."; the exception prints as ``torch.OutOfMemoryError``
  (``torch.cuda.OutOfMemoryError`` before torch 2.4). CUDA runtime: "CUDA error: out of memory"
  (e.g. in ``torch.cuda.graphs.CUDAGraph.capture_end``); cuBLAS "CUBLAS_STATUS_ALLOC_FAILED"; NCCL
  "Cuda failure 'out of memory'".
- NCCL ``src/misc/shmutils.cc``: "Error while creating shared memory segment /dev/shm/nccl-XXXX
  (size N)" (tests/fixtures/failures.yaml opt125m-tp2-shm, NCCL 2.21.5); also "exceeds memory available in
  /dev/shm. The request is for N bytes".
- PyTorch DataLoader: "insufficient shared memory (shm)"; "No space left on device" on /dev/shm; a
  SIGBUS "Bus error" (/dev/shm full while a segment is touched).
- Triton (vLLM/SGLang kernels on SM < 8.9, tests/fixtures/failures.yaml gemma4-31b-ampere-fp8): "type fp8e4nv not
  supported in this architecture", "fp8e4nv data type is not supported on CUDA arch < 89".
- FlashInfer MLA ``plan()`` (vLLM's FlashInfer MLA backends, vLLM issue 57713): "MLA kv_data_type torch.uint8 is
  not supported. Supported dtypes: [...]" (the KV cache dtype has no MLA kernel).
- vLLM's SIGTERM handler raises ``KeyboardInterrupt("terminated")`` (tests/fixtures/failures.yaml
  gemma3-1b-startup-probe): the kubelet stopped the container, i.e. a failed startup probe.
- NCCL "NCCL error" / ``ncclSystemError`` without a /dev/shm line: a wrapper (Unknown).
- CUDA driver too old (CUDADriverTooOld, permanent for the node): PyTorch ``c10/cuda/CUDAFunctions.cpp``
  "The NVIDIA driver on your system is too old (found version 12040)" (torch 1.x - 2.x; also as the
  UserWarning "CUDA initialization: ..."); CUDA runtime ``cudaErrorInsufficientDriver`` (35) "CUDA driver
  version is insufficient for CUDA runtime version"; ``cudaErrorCompatNotSupportedOnDevice`` (804)
  "forward compatibility was attempted on non supported HW" (through torch "Error 804: ..."; the driver
  API name ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE``); ``cudaErrorSystemDriverMismatch`` (803)
  "system has unsupported display driver / cuda driver combination"; nvidia-container-cli (an Event
  when the container cannot be created) "requirement error: unsatisfied condition: cuda>=12.8, please
  update your driver to a newer version"; ``cudaErrorUnsupportedPtxVersion`` (222) "the provided PTX was compiled
  with an unsupported toolchain" (a kernel built by a newer CUDA than the driver can JIT: vLLM's troubleshooting
  guide, https://github.com/vllm-project/vllm/pull/28305; vLLM issues 31700, 37140).
- Host memory from the log (HostOOMKilled without a kill): Ray's memory monitor ("Task was killed due to the node
  running low on memory", "... which exceeds the memory usage threshold of 0.95", raylet "Workers (tasks / actors)
  killed due to memory pressure (OOM)"; vLLM's Ray executor, issues 1160, 2669, 15102); ENOMEM on the host:
  PyTorch MapAllocator "unable to mmap N bytes from file <F>: Cannot allocate memory (12)" (a safetensors shard,
  vLLM issues 759, 2391, 9753), c10 "DefaultCPUAllocator: can't allocate memory", Python "[Errno 12] Cannot allocate
  memory".
- Invalid parallel layout (InvalidParallelism, permanent): the stable part of every engine's wording is
  "divisible by" next to a parallel size ("tensor parallel size (3)", "tp_size=3", "TP=3", "pipeline
  parallel size", "ep_size"); vLLM's "Tensor parallel size 16 is greater than the number of experts 8".
- Hugging Face Hub access (ModelAccessDenied, permanent): huggingface_hub ``utils/_http.py``
  ``hf_raise_for_status`` "Cannot access gated repo for url ...", "Access to model X is restricted and
  you are not in the authorized list" / "is restricted. You must have access to it and be authenticated" (older:
  "You must be authenticated to access it"),
  ``GatedRepoError``, "401 Client Error", "Repository Not Found for url" (a private repo without a
  token); transformers "You are trying to access a gated repo." and "X is not a local folder and is not a valid
  model identifier listed on 'https://huggingface.co/models'" (a private repository without a token, or a
  misspelt name: no knob fixes either).
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import (
    NUM,
    PARALLELISM_EXTRACTORS,
    RANK_HINT,
    RANK_OOM,
    RANK_PROBE,
    RANK_ROOT,
    RANK_SPECIFIC,
    RANK_WRAPPER,
    TORCH_OOM_EXTRACTORS,
    FailurePattern,
    PhaseMarker,
    StartupPhase,
    extractor,
)

PARALLEL_WORDS = (
    "tensor parallel", "Tensor parallel", "tensor_parallel", "tp_size", "tp size", "TP size", "TP=", "tp=",
    "tp (", "TP (", "pipeline parallel",
    "pipeline_parallel", "pp_size", "PP=", "pp=", "ep_size", "expert parallel", "world_size", "attention_tp_size",
    "number of nodes", "_per_partition",
)
"""Words that put a "divisible by" next to a parallel layout (and not, e.g., a block size)."""

PARALLEL_SIZE_NAMES = (
    "tp_size", "tp_world_size", "attn_tp_size", "tensor_model_parallel_world_size", "tensor_parallel_world_size",
    "tensor_parallel_size", "world_size", "ep_size", "moe_tp_size", "pp_size", "dp_size", "% tp ", "% tp)",
    "% self.tp ", "% self.tp)", "% tp_", "% tensor_parallel", "% self.tensor_parallel",
)
"""The right-hand side of a bare divisibility ``assert`` in the engines' layers (``assert self.total_num_kv_heads %
tp_size == 0``, ``assert self.total_num_heads % attn_tp_size == 0``, ``assert num_experts % self.moe_ep_size == 0``;
counted in the vLLM 0.10.2 / 0.19.0 and SGLang 0.4.3 / 0.5.4 / 0.5.10 wheels: 250+ such lines in model files)."""

GENERIC_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.GPU_OUT_OF_MEMORY,
        markers=(
            "CUDA out of memory",
            "CUDA error: out of memory",
            "OutOfMemoryError",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "Cuda failure 'out of memory'",
            "cudaErrorMemoryAllocation",
        ),
        rank=RANK_OOM,
        source="PyTorch c10/cuda/CUDACachingAllocator.cpp (torch 1.x-2.14); CUDA runtime; cuBLAS; NCCL",
        extractors=TORCH_OOM_EXTRACTORS,
        by_phase=True,
        covers=(("torch 1.8", "torch 2.14"),),
    ),
    FailurePattern(
        kind=FailureKind.CUDA_DRIVER_TOO_OLD,
        markers=(
            "driver on your system is too old",
            "driver version is insufficient",
            "forward compatibility was attempted",
            "unsupported display driver",
            "library version mismatch",
            "update your driver to a newer version",
            "PTX was compiled with an unsupported toolchain",
            "cudaErrorUnsupportedPtxVersion",
        ),
        rank=RANK_SPECIFIC,
        source="PyTorch c10/cuda/CUDAFunctions.cpp; CUDA runtime errors 35/803/804 and 222 "
        "(cudaErrorUnsupportedPtxVersion: a kernel's PTX is newer than the driver can JIT; vLLM's "
        "troubleshooting guide, https://github.com/vllm-project/vllm/pull/28305); nvidia-container-cli",
        extractors=(
            extractor("driverCudaVersion", r"found version " + NUM),
            extractor("requiredCudaVersion", r"cuda>=" + NUM, "float"),
        ),
        covers=(("torch 1.10", "torch 2.14"), ("CUDA runtime errors 35/803/804", "3rd-party reports"),
                ("CUDA runtime error 222", "vLLM 0.11.0-0.11.2 (vLLM issues 31700, 37140)"),
                ("nvidia-container-cli", "3rd-party reports")),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("divisible by", "is greater than the number of experts"),
        rank=RANK_ROOT,
        source="vLLM config verify_with_parallel_config / model files; SGLang model_config and model files; "
        "Megatron-style asserts",
        extractors=PARALLELISM_EXTRACTORS,
        requires_any=PARALLEL_WORDS,
        covers=(("vLLM 0.2.0", "vLLM 0.6.x"), ("SGLang 0.3.6", "SGLang 0.5.4")),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("is not divisible by",),
        rank=RANK_SPECIFIC,
        source="vLLM / SGLang distributed/utils.py ensure_divisibility ('{} is not divisible by {}', an "
        "AssertionError from divide() while splitting heads or sizes over the TP ranks); fp8 block quantization "
        "'input_size_per_partition = N is not divisible by weight quantization block_k' and 'output_partition_size "
        "= N is not divisible by weight quantization block_n' (vLLM 0.10.2 / 0.19.0 and SGLang 0.5.4 "
        "layers/quantization/fp8*.py validate_fp8_block_shape; older 'The output_size of gate's and up's weight = "
        "192 is not divisible by weight quantization block_n = 128.'); Marlin 'Weight output_size_per_partition = N "
        "is not divisible by min_thread_n = 64. Consider reducing tensor_parallel_size' (marlin_utils.py)",
        extractors=(
            extractor("dividedCount", r"AssertionError: " + NUM + r" is not divisible by"),
            extractor("parallelSize", r"AssertionError: \d[\d,]{0,24} is not divisible by " + NUM),
        ),
        requires_any=("ensure_divisibility", "AssertionError: ", "_per_partition", "divide(", "_partition_size",
                      "weight quantization block", "tensor_parallel_size", "gate's and up's weight"),
        context_lines=6,
        covers=(("vLLM 0.4.x", "vLLM 0.19.0"), ("SGLang 0.4.3", "SGLang 0.5.10")),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("assert ",),
        rank=RANK_ROOT,
        source="a bare divisibility assert in a model or layer file, shown by the traceback above a message-less "
        "'AssertionError' (vLLM chatglm.py 'assert self.total_num_kv_heads % tp_size == 0', vLLM issue 1581; the "
        "same line in 113 vLLM 0.10.2/0.19.0 and 87 SGLang 0.4.3-0.5.10 model files, 'assert self.total_num_heads "
        "% attn_tp_size == 0' in SGLang's DeepSeek/Qwen files)",
        line_requires=((" % ", "%self", "% ("), PARALLEL_SIZE_NAMES),
        requires_any=("AssertionError",),
        context_lines=3,
        covers=(("vLLM 0.2.1", "vLLM 0.19.0"), ("SGLang 0.4.3", "SGLang 0.5.10")),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("world size must divide", "must be a multiple of tensor parallel size",
                 "is not aligned with the quantized", "Pipeline parallelism is not supported for this model",
                 "Tensor parallel currently not supported for quantized models"),
        rank=RANK_ROOT,
        source="vLLM 0.10.2-0.19.0 (read in the wheels): mamba_mixer2.py 'Tensor parallel world size must divide num "
        "heads.' / '... must divide hidden size.'; gptq.py / awq.py 'The input size is not aligned with the "
        "quantized weight shape. This can be caused by too large tensor parallel size.' (input_size_per_partition % "
        "group_size: vLLM issues 1816 and 5675, Qwen2-72B AWQ at TP 8 on 0.5.1) and 'The output size is not aligned "
        "...' (vLLM issue 11671); model_executor/models/interfaces.py supports_pp check "
        "'Pipeline parallelism is not supported for this model. Supported models implement the `SupportsPP` "
        "interface.'; SGLang 0.5.x model files",
        covers=(("vLLM 0.6.0", "vLLM 0.19.0"), ("SGLang 0.5.4", "SGLang 0.5.10")),
    ),
    FailurePattern(
        kind=FailureKind.MODEL_ACCESS_DENIED,
        markers=(
            "gated repo",
            "not in the authorized list",
            "be authenticated to access it",
            "not a valid model identifier",
            "401 Client Error",
            "Repository Not Found for url",
            "Invalid credentials in Authorization header",
        ),
        rank=RANK_SPECIFIC,
        source="huggingface_hub utils/_http.py hf_raise_for_status / errors.py; transformers hub.py",
        covers=(("huggingface_hub 0.2x", "3rd-party reports + case eks-triton-vllm-llama3-gated-403"),
                ("transformers 4.x", "3rd-party reports")),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("Error while creating shared memory segment", "exceeds memory available in /dev/shm"),
        rank=RANK_SPECIFIC,
        source="NCCL src/misc/shmutils.cc (2.x: 'Error while creating shared memory segment X (size N)'; "
        "2.19+: 'failed to extend /dev/shm/nccl-X to N bytes'); the reported /dev/shm wording",
        extractors=(
            extractor("requestedBytes", r"\(size " + NUM + r"\)"),
            extractor("requestedBytes", r"The request is for " + NUM + r" bytes"),
        ),
        covers=(("NCCL 2.7", "NCCL 2.27"),),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("failed to extend ",),
        rank=RANK_SPECIFIC,
        source="NCCL 2.19+ src/misc/shmutils.cc 'failed to extend /dev/shm/nccl-X to N bytes' (markers avoid '/': "
        "str.find on a text of slashes is slow for patterns that contain one)",
        requires_any=("/dev/shm",),
        extractors=(extractor("requestedBytes", r"/dev/shm/[\w.-]{1,80} to " + NUM + r" bytes"),),
        covers=(("NCCL 2.19", "3rd-party reports"),),
    ),
    FailurePattern(
        kind=FailureKind.HOST_OOM_KILLED,
        markers=("killed due to the node running low on memory", "which exceeds the memory usage threshold",
                 "killed due to memory pressure (OOM)"),
        rank=RANK_SPECIFIC,
        source="Ray memory monitor (raylet node_manager.cc / python ray.exceptions.OutOfMemoryError 'Task was killed "
        "due to the node running low on memory. Memory on the node ... was U / T (F), which exceeds the memory usage "
        "threshold of 0.95'): host RAM, as seen by vLLM's Ray executor (vLLM issues 1160, 2669, 15102)",
        covers=(("Ray 2.2", "Ray 2.4x (reports with vLLM 0.1.7-0.8.0)"),),
    ),
    FailurePattern(
        kind=FailureKind.HOST_OOM_KILLED,
        markers=("unable to mmap", "DefaultCPUAllocator: can't allocate memory", "[Errno 12] Cannot allocate memory"),
        rank=RANK_SPECIFIC,
        requires_any=("Cannot allocate memory", "can't allocate memory"),
        source="ENOMEM (errno 12) on the host: PyTorch MapAllocator 'unable to mmap N bytes from file <F>: Cannot "
        "allocate memory (12)' (safetensors checkpoints, vLLM issues 759, 2391, 9753), c10 CPU allocator "
        "'DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes', Python OSError at fork",
        extractors=(
            extractor("requestedBytes", r"unable to mmap " + NUM + r" bytes"),
            extractor("requestedBytes", r"you tried to allocate " + NUM + r" bytes"),
        ),
        covers=(("torch 2.1", "torch 2.14"), ("vLLM 0.2.7", "vLLM 0.9.0 (reports)")),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("fp8e4nv not supported", "fp8e4nv data type is not supported"),
        rank=RANK_SPECIFIC,
        source="Triton 3.x (fp8e4nv needs SM 8.9+), raised through vLLM/SGLang attention kernels: 'type fp8e4nv not "
        "supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')' names the FP8 types this "
        "GPU has: fp8e5 is the fp8_e5m2 KV cache (vLLM issue 13147 prints ('fp8e5',))",
        extractors=(extractor("fp8E5m2Supported", r"supported fp8 dtypes are \([^)]{0,60}(fp8e5)\b", "flag"),),
        context_lines=1,
        covers=(("Triton 3.x", "3rd-party reports (vLLM issues 39133, 13147)"),),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("is not supported for the current GPU. Minimum capability",),
        rank=RANK_ROOT,
        source="vLLM 0.4-0.19 config (0.19 config/vllm.py _verify_quantization) and SGLang 0.4.3-0.5.10 "
        "model_loader/loader.py _get_quantization_config: 'The quantization method X is not supported for the current "
        "GPU. Minimum capability: 80. Current capability: 75.' (read in the vLLM 0.10.2/0.19.0 and SGLang "
        "0.4.3/0.5.4/0.5.10 wheels; moe_wna16.py has the same sentence)",
        extractors=(
            extractor("minimumComputeCapability", r"Minimum capability: " + NUM, "cc"),
            extractor("computeCapability", r"Current capability: " + NUM, "cc"),
        ),
        covers=(("vLLM 0.4.0", "vLLM 0.19.x"), ("SGLang 0.4.3", "SGLang 0.5.10")),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("Quantization scheme is not supported for", "GPUs with compute capability below"),
        rank=RANK_ROOT,
        source="vLLM 0.5-0.19 compressed_tensors.py / quark.py _check_scheme_supported (read in the 0.10.2 wheel; the "
        "message is a tuple, so it prints \"('Quantization scheme is not supported for ', 'the current GPU. Min "
        "capability: 75. ', 'Current capability: 70.')\" or '... Required capability: 89 ...'); vLLM 0.2 worker "
        "'GPUs with compute capability below 7.0 are not supported.' (vLLM issue 1284)",
        extractors=(
            extractor("minimumComputeCapability", r"(?:Min|Required) capability: " + NUM, "cc"),
            extractor("minimumComputeCapability", r"compute capability below " + NUM, "cc"),
            extractor("computeCapability", r"Current capability: " + NUM, "cc"),
        ),
        covers=(("vLLM 0.2.0", "vLLM 0.2.x"), ("vLLM 0.5.0", "vLLM 0.19.x")),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("no kernel image is available for execution on the device",
                 "is not compatible with the current PyTorch installation",
                 "FlashAttention only supports Ampere GPUs or newer"),
        rank=RANK_SPECIFIC,
        source="CUDA runtime cudaErrorNoKernelImageForDevice (209) 'no kernel image is available for execution on the "
        "device' (the image's kernels were not built for this GPU's architecture); torch/cuda/__init__.py _check_"
        "capability 'NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
        "installation.'; flash-attn csrc 'FlashAttention only supports Ampere GPUs or newer.' (SM < 8.0)",
        extractors=(extractor("computeCapability", r"with CUDA capability sm_" + NUM, "cc"),),
        covers=(("CUDA runtime error 209", "3rd-party reports"), ("torch 1.10", "torch 2.14"),
                ("flash-attn 2.x", "3rd-party reports")),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("MLA kv_data_type",),
        rank=RANK_SPECIFIC,
        requires_any=("is not supported",),
        source="FlashInfer MLA wrapper plan() dtype check ('MLA kv_data_type {dtype} is not supported[ by the "
        "{backend} backend]. Supported dtypes: [...]'), raised through vLLM's FlashInfer MLA backends when the KV "
        "cache dtype (an FP8 cache stored as torch.uint8) has no kernel (vLLM issue 57713, vLLM 0.31)",
        covers=(("FlashInfer 0.6", "3rd-party reports (vLLM 0.31)"),),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("insufficient shared memory (shm)", "No space left on device", "Bus error"),
        rank=RANK_HINT,
        source="PyTorch DataLoader worker; ENOSPC / SIGBUS on a full /dev/shm",
        requires_any=("shm", "shared memory", "Bus error"),
        covers=(("torch 1.8", "torch 2.14"),),
    ),
    FailurePattern(
        kind=FailureKind.STARTUP_PROBE_TIMEOUT,
        markers=("KeyboardInterrupt: terminated",),
        rank=RANK_PROBE,
        source="vLLM entrypoints signal handler (SIGTERM -> KeyboardInterrupt('terminated'))",
        covers=(("vLLM 0.4.0", "vLLM 0.33.x"),),
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("NCCL error", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError"),
        rank=RANK_WRAPPER,
        source="torch.distributed DistBackendError / NCCL (cause not named)",
        covers=(("NCCL 2.7", "NCCL 2.27"),),
    ),
)
"""Engine-independent failure texts."""

EVENT_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.STARTUP_PROBE_TIMEOUT,
        markers=("failed startup probe", "Startup probe failed", "Startup probe errored"),
        rank=RANK_PROBE,
        source="kubelet prober events (pkg/kubelet/prober: 'Startup probe failed: ...'; "
        "kuberuntime: 'Container X failed startup probe, will be restarted')",
        covers=(("Kubernetes 1.20", "Kubernetes 1.34"),),
    ),
    FailurePattern(
        kind=FailureKind.CUDA_DRIVER_TOO_OLD,
        markers=("please update your driver to a newer version", "unsatisfied condition: cuda>="),
        rank=RANK_SPECIFIC,
        source="nvidia-container-cli requirement check (containerd/CRI-O 'failed to create containerd task' Event)",
        extractors=(extractor("requiredCudaVersion", r"cuda>=" + NUM, "float"),),
        covers=(("nvidia-container-cli", "3rd-party reports"),),
    ),
)
"""Patterns run over the pod's Event messages."""

GENERIC_PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(StartupPhase.CAPTURE, "capture_end", "torch.cuda.graphs CUDAGraph.capture_end (traceback frame)"),
    PhaseMarker(StartupPhase.CAPTURE, "capture_begin", "torch.cuda.graphs CUDAGraph.capture_begin (traceback frame)"),
    PhaseMarker(StartupPhase.CAPTURE, "torch/cuda/graphs.py", "torch.cuda.graphs (traceback file)"),
    PhaseMarker(StartupPhase.LOADING, "safetensors", "safetensors load (traceback/log)"),
)
"""Phase markers every engine shares (PyTorch frames)."""
