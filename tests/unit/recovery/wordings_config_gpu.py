"""Configuration and GPU classes in the wording of each version that raises them (read in the wheels under /work/wheels:
vLLM 0.10.2 / 0.17.1 / 0.19.0, SGLang 0.4.3 / 0.5.4 / 0.5.10, hf_xet 1.0.5 / 1.1.10 / 1.4.3 / 1.8.0, huggingface_hub
0.30.2 - 2.4.0), rendered as the engine prints them; run by ``test_classify_wordings.test_wording``.
"""

from __future__ import annotations

from ctxfit.api import EngineKind
from ctxfit.recovery import FailureKind

from tests.unit.recovery.wordings import Wording

K = FailureKind
VLLM, SGLANG = EngineKind.VLLM, EngineKind.SGLANG


def _assert_tb(path: str, line: str, prefix: str = "") -> str:
    """A traceback's last frame, a bare assert and the message-less AssertionError (Python 3.11+ carets)."""
    return (f'{prefix}  File "{path}", line 120, in __init__\n{prefix}    {line}\n'
            f"{prefix}           {'^' * len(line[7:])}\n{prefix}AssertionError\n")


CONFIG_WORDINGS = [
    # bare divisibility asserts: vLLM model files (0.10.2 / 0.19.0 qwen2.py, llama.py), SGLang (0.4.3 - 0.5.10
    # deepseek_v2.py attn_tp_size, qwen2_moe.py), a multiproc prefix
    Wording("bare-assert-vllm-0.19-kv-heads", K.INVALID_PARALLELISM,
            _assert_tb("/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/qwen2.py",
                       "assert self.total_num_kv_heads % tp_size == 0")),
    Wording("bare-assert-vllm-0.10-heads-worker-prefix", K.INVALID_PARALLELISM,
            _assert_tb("vllm/model_executor/models/llama.py", "assert self.total_num_heads % tp_size == 0",
                       "(VllmWorker rank=1 pid=412) ERROR 09-01 10:00:00 [multiproc_executor.py:559] ")),
    Wording("bare-assert-sglang-attn-tp", K.INVALID_PARALLELISM,
            _assert_tb("sglang/srt/models/deepseek_v2.py", "assert self.total_num_heads % attn_tp_size == 0"),
            SGLANG),
    Wording("bare-assert-sglang-moe-ep", K.INVALID_PARALLELISM,
            _assert_tb("sglang/srt/layers/moe/fused_moe_triton/layer.py",
                       "assert num_experts % self.moe_ep_size == 0"), SGLANG),
    Wording("bare-assert-no-parallel-size-is-unknown", K.UNKNOWN,
            _assert_tb("vllm/model_executor/layers/linear.py", "assert param_data.shape == loaded_weight.shape")),
    Wording("bare-assert-percent-elsewhere-is-unknown", K.UNKNOWN,
            "Loading safetensors checkpoint shards: 100% Completed | 4/4 world_size=2\n"
            "    assert block_size % 16 == 0\nAssertionError"),
    Wording("mamba2-tp-must-divide-heads-0.19", K.INVALID_PARALLELISM,
            "ValueError: Tensor parallel world size must divide num heads."),
    Wording("pp-not-supported-for-model-0.10", K.INVALID_PARALLELISM,
            "NotImplementedError: Pipeline parallelism is not supported for this model. Supported models implement "
            "the `SupportsPP` interface."),
    Wording("awq-output-size-not-aligned", K.INVALID_PARALLELISM,
            "ValueError: The output size is not aligned with the quantized weight shape. This can be caused by too "
            "large tensor parallel size."),
    Wording("fp8-block-n-0.19", K.INVALID_PARALLELISM,
            "ValueError: Weight output_partition_size = 192 is not divisible by weight quantization block_n = 128."),
    Wording("fp8-block-gate-up-older", K.INVALID_PARALLELISM,
            "ValueError: The output_size of gate's and up's weight = 192 is not divisible by weight quantization "
            "block_n = 128.", SGLANG),
    Wording("marlin-min-thread-n", K.INVALID_PARALLELISM,
            "ValueError: Weight output_size_per_partition = 2368 is not divisible by  min_thread_n = 64. Consider "
            "reducing tensor_parallel_size or running with --quantization gptq."),
]

GPU_WORDINGS = [
    Wording("no-backend-sparse-0.19", K.UNSUPPORTED_GPU,
            "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
            "dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=None, use_mla=True, has_sink=False, "
            "use_sparse=True). Reasons: {FLASH_ATTN_MLA: [sparse not supported, compute capability not supported], "
            "FLASHMLA_SPARSE: [compute capability not supported], TRITON_MLA: [sparse not supported]}.", node="n1"),
    Wording("no-backend-kv-dtype-and-capability-is-gpu", K.UNSUPPORTED_GPU,
            "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, "
            "dtype=torch.bfloat16, kv_cache_dtype=fp8). Reasons: {FLASH_ATTN: [kv_cache_dtype not supported, compute "
            "capability not supported], FLASHINFER: [compute capability not supported]}."),
    Wording("forced-backend-capability-0.17", K.UNSUPPORTED_GPU,
            "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. "
            "Reason: ['compute capability not supported']"),
    Wording("forced-backend-kv-dtype-only-0.17", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "ValueError: Selected backend AttentionBackendEnum.TRITON_MLA is not valid for this configuration. "
            "Reason: ['kv_cache_dtype not supported']"),
    Wording("bf16-0.10-worker", K.UNSUPPORTED_GPU,
            "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
            "V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting the "
            "`dtype` flag in CLI, for example: --dtype=half.",
            numbers={"computeCapability": 7.0, "minimumComputeCapability": 8.0}),
    Wording("quant-min-capability-vllm-0.19", K.UNSUPPORTED_GPU,
            "ValueError: The quantization method mxfp4 is not supported for the current GPU. Minimum capability: 80. "
            "Current capability: 75.", numbers={"computeCapability": 7.5, "minimumComputeCapability": 8.0}),
    Wording("quant-min-capability-sglang-0.5", K.UNSUPPORTED_GPU,
            "ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 80. "
            "Current capability: 75.", SGLANG, numbers={"computeCapability": 7.5, "minimumComputeCapability": 8.0}),
    Wording("compressed-tensors-tuple-0.10", K.UNSUPPORTED_GPU,
            "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min capability: 75. ', "
            "'Current capability: 70.')", numbers={"computeCapability": 7.0, "minimumComputeCapability": 7.5}),
    Wording("compressed-tensors-required-0.10", K.UNSUPPORTED_GPU,
            "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Required capability: 89. "
            "', 'Current capability: 80.')", numbers={"computeCapability": 8.0, "minimumComputeCapability": 8.9}),
    Wording("vllm-0.2-below-7.0", K.UNSUPPORTED_GPU,
            "RuntimeError: GPUs with compute capability below 7.0 are not supported.",
            numbers={"minimumComputeCapability": 7.0}),
    Wording("sglang-sm75-0.5.10", K.UNSUPPORTED_GPU, "RuntimeError: SGLang only supports sm75 and above.", SGLANG,
            numbers={"minimumComputeCapability": 7.5}),
    Wording("sglang-fa3-blackwell", K.UNSUPPORTED_GPU,
            "ValueError: The 'fa3' backend is not supported on Blackwell GPUs. Please use another attention backend.",
            SGLANG),
    Wording("torch-sm120-not-compatible", K.UNSUPPORTED_GPU,
            "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
            "PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 "
            "sm_80 sm_86 sm_90.\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
            numbers={"computeCapability": 12.0}),
    Wording("sgl-kernel-no-kernel-image", K.UNSUPPORTED_GPU,
            "RuntimeError: GemmaRMSNorm failed with error code no kernel image is available for execution on the "
            "device", SGLANG),
    Wording("flashmla-dense-hopper-0.19", K.UNSUPPORTED_GPU,
            "RuntimeError: FlashMLA Dense is only supported on Hopper devices."),
    Wording("wna16-kernel-capability-0.19", K.UNSUPPORTED_GPU,
            "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n"
            "MacheteLinearKernel cannot implement due to: Machete requires compute capability of 90 (Hopper)\n"
            "CutlassW4A8LinearKernel cannot implement due to: CUTLASS W4A8 requires compute capability of 90 (Hopper)"),
    Wording("triton-fp8e5-named", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "triton.compiler.errors.CompilationError: at 1:0:\nValueError(\"type fp8e4nv not supported in this "
            "architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")", numbers={"fp8E5m2Supported": 1}),
    Wording("triton-no-fp8e5", K.KV_CACHE_DTYPE_UNSUPPORTED,
            "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15',)"),
]

DOWNLOAD_WORDINGS = [
    Wording("xet-1.0-middleware-retries", K.DOWNLOAD_INTERRUPTED,
            "RuntimeError: Data processing error: CAS service error : ReqwestMiddleware Error: Request failed after 5 "
            "retries", None),
    Wording("xet-1.1-timer-expired", K.DOWNLOAD_INTERRUPTED,
            "RuntimeError: Data processing error: CAS service error : IO Error: Timer expired (os error 62)", None),
    Wording("xet-1.1-term-length", K.DOWNLOAD_INTERRUPTED,
            "Error occurred during download: Data processing error: CAS service error : Error : result term data "
            "length 63574543 did not match expected value 67084736", None),
    Wording("xet-1.4-reconstruction", K.DOWNLOAD_INTERRUPTED,
            "RuntimeError: Data processing error: File reconstruction error: Internal Writer Error: Background writer "
            "channel closed", None),
    Wording("xet-1.8-cas-client", K.DOWNLOAD_INTERRUPTED,
            "RuntimeError: CAS Client Error: Request error: error decoding response body", None),
    Wording("xet-1.8-network-incomplete", K.DOWNLOAD_INTERRUPTED,
            "RuntimeError: File reconstruction error: Network error: request or response body error: end of file "
            "before message length reached", None),
    Wording("xet-1.8-auth", K.DOWNLOAD_INTERRUPTED, "hf_xet.XetAuthenticationError: token refresh failed", None),
    Wording("xet-enospc-is-cache-full", K.CACHE_VOLUME_FULL,
            "RuntimeError: Data processing error: CAS service error : IO Error: No space left on device (os error 28)",
            None),
    Wording("hub-consistency-check", K.DOWNLOAD_INTERRUPTED,
            "OSError: Consistency check failed: file should be of size 4976698672 but has size 2346549248 "
            "(model-00001-of-00004.safetensors).\nThis is usually due to network issues while downloading the file. "
            "Please retry with `force_download=True`.", None),
    Wording("httpx-peer-closed", K.DOWNLOAD_INTERRUPTED,
            "httpx.RemoteProtocolError: peer closed connection without sending complete message body (incomplete "
            "chunked read)", None),
    Wording("requests-proxy-reset", K.DOWNLOAD_INTERRUPTED,
            "requests.exceptions.ProxyError: (MaxRetryError(\"HTTPSConnectionPool(host='cas-bridge.xethub.hf.co', "
            "port=443): Tunnel connection failed: 502 Bad Gateway\"))", None),
]

ISSUE25_WORDINGS = CONFIG_WORDINGS + GPU_WORDINGS + DOWNLOAD_WORDINGS
