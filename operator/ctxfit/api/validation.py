"""What Kubernetes will refuse, checked at admission: name, label, image and flag grammars (pure data).

Each pattern is the one the API server (or the container runtime) applies to the rendered object, so
a spec the CRD accepts renders objects the API server accepts. Patterns are RE2- and Rust-regex-safe
(ASCII classes only: ``\\w`` would match Unicode in pydantic's Rust regex but not in Go).

Sources:
- DNS-1035 label, DNS-1123 subdomain, qualified name, label value: apimachinery
  ``pkg/util/validation/validation.go`` (``IsDNS1035Label``, ``IsDNS1123Subdomain``, ``IsQualifiedName``,
  ``IsValidLabelValue``); a Service name must be a DNS-1035 label (core ``ValidateServiceName``).
- Env var names: core validation ``validateEnvVarName`` with ``IsEnvVarName`` (``[-._a-zA-Z][-._a-zA-Z0-9]*``,
  accepted by every Kubernetes version; 1.34's relaxed rule still forbids ``=``).
- Image references: distribution/reference ``regexp.go`` (domain, path components, tag, digest);
  Kubernetes itself only refuses surrounding whitespace (core ``validateContainers``).
- Tolerations: core ``ValidateTolerations`` (operator Exists/Equal, effect, tolerationSeconds only with
  NoExecute, an empty key only with Exists, no value with Exists).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1035_MAX = 63
SERVER_NAME_MESSAGE = (f"must be a DNS-1035 label of at most {DNS1035_MAX} characters (lower-case letters, digits "
                       "and '-', starting with a letter): the engine Service is named like the server")
"""``metadata.name`` of an InferenceServer: the CRD root CEL rule (``admission.ROOT_CEL_RULES``), ``ObjectMeta``."""
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A label or annotation key: optional DNS-1123 prefix (<= 253) and ``/``, then a name of <= 63 chars."""
QUALIFIED_NAME_MAX = 253 + 1 + 63
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX = 63
ENV_VAR_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
IMAGE_REFERENCE = (
    r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]+)?/)?"
    r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][-A-Za-z0-9_.]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
"""``[domain[:port]/]path[:tag][@digest]`` (distribution/reference); no whitespace, no shell characters."""
IMAGE_REFERENCE_MAX = 512
ENGINE_VERSION = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.\-][-A-Za-z0-9_.]*)?$"
"""An engine version that is also a valid image tag after ``v`` (tag grammar ``[\\w][\\w.-]{0,127}``)."""
ENGINE_VERSION_MAX = 100
FIELD_PATH = (
    r"^(metadata\.(name|namespace|uid|labels\['[^']+'\]|annotations\['[^']+'\])"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)
"""``fieldRef.fieldPath`` values the downward API supports for env (core ``validateEnvVarValueFrom``)."""
RESOURCE_FIELD = r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[-A-Za-z0-9]+)$"

MAX_ARGS = 128
MAX_ARG_LENGTH = 1024
MAX_ENV = 128
MAX_ENV_VALUE = 32768
MAX_ENV_BYTES = 65536
"""One ``engine.env`` value at most 32 KiB (the CRD), all of them at most 64 KiB (validated by the operator): a
spec is kept in the operator's memory per server (its body, the rendered Deployment, the drift view), so its
size is bounded in bytes, not only in entries (twenty servers with 1.2 MB env values held 354 MiB)."""
MAX_LABELS = 64
MAX_ANNOTATIONS = 64
MAX_ANNOTATION_VALUE = 3072
"""64 values of 3 KiB plus keys stay under the API server's 256 KiB total for a pod's annotations
(apimachinery ``ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB``) with room for ctxfit's own."""
MAX_TOLERATIONS = 32
CPU_MIN = "1m"
CPU_MAX = "4096"
"""``resources.cpu`` bounds: 1 millicore (the API server's precision) to 4096 cores (no node has more)."""


@dataclass(frozen=True)
class ManagedFlag:
    """A command-line flag ctxfit sets itself, so ``engine.args`` may not repeat it.

    Attributes:
        names: every spelling the engine's parser accepts for it (aliases included).
        engines: the engines (``EngineKind`` values) that have it.
        use: the spec field (or sentence) that sets it instead.
    """

    names: tuple[str, ...]
    engines: tuple[str, ...]
    use: str


_BOTH = ("vllm", "sglang")
_VLLM = ("vllm",)
_SGLANG = ("sglang",)

MANAGED_FLAGS: tuple[ManagedFlag, ...] = (
    ManagedFlag(("--max-model-len",), _VLLM, "spec.context.target / spec.context.minimum"),
    ManagedFlag(("--context-length",), _SGLANG, "spec.context.target / spec.context.minimum"),
    ManagedFlag(("--port",), _BOTH, "spec.serving.port"),
    ManagedFlag(("--host",), _BOTH, "nothing (the engine listens on 0.0.0.0 behind its Service)"),
    ManagedFlag(("--gpu-memory-utilization", "--device-memory-utilization"), _VLLM,
                "spec.memory.gpuMemoryUtilization"),
    ManagedFlag(("--mem-fraction-static",), _SGLANG, "spec.memory.memFractionStatic"),
    ManagedFlag(("--tensor-parallel-size", "-tp"), _VLLM, "spec.parallelism.tensor"),
    ManagedFlag(("--tp-size", "--tensor-parallel-size", "--tp"), _SGLANG, "spec.parallelism.tensor"),
    ManagedFlag(("--pipeline-parallel-size", "-pp"), _VLLM, "spec.parallelism.pipeline"),
    ManagedFlag(("--pp-size", "--pipeline-parallel-size"), _SGLANG, "spec.parallelism.pipeline"),
    ManagedFlag(("--data-parallel-size", "-dp"), _VLLM, "spec.parallelism.data"),
    ManagedFlag(("--dp-size", "--data-parallel-size", "--dp"), _SGLANG, "spec.parallelism.data"),
    ManagedFlag(("--enable-expert-parallel", "-ep"), _VLLM, "spec.parallelism.expert"),
    ManagedFlag(("--ep-size", "--expert-parallel-size", "--ep"), _SGLANG, "spec.parallelism.expert"),
    ManagedFlag(("--kv-cache-dtype",), _BOTH, "spec.memory.kvCacheDtype"),
    ManagedFlag(("--max-num-seqs",), _VLLM, "spec.batching.maxNumSeqs"),
    ManagedFlag(("--max-running-requests",), _SGLANG, "spec.batching.maxNumSeqs"),
    ManagedFlag(("--max-num-batched-tokens",), _VLLM, "spec.batching.maxNumBatchedTokens"),
    ManagedFlag(("--max-cudagraph-capture-size", "--cuda-graph-sizes"), _VLLM, "spec.batching.cudaGraphMaxBatchSize"),
    ManagedFlag(("--chunked-prefill-size",), _SGLANG, "spec.batching.maxNumBatchedTokens"),
    ManagedFlag(("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"), _SGLANG,
                "spec.batching.cudaGraphMaxBatchSize"),
    ManagedFlag(("--model",), _VLLM, "spec.model.name"),
    ManagedFlag(("--model-path", "--model"), _SGLANG, "spec.model.name"),
    ManagedFlag(("--enable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-modules",
                 "--lora-target-modules"), _VLLM, "spec.lora"),
    ManagedFlag(("--enable-lora", "--lora-paths", "--max-loras-per-batch", "--max-lora-rank", "--lora-target-modules",
                 "--max-loaded-loras"), _SGLANG, "spec.lora"),
    ManagedFlag(("--speculative-config", "-sc", "--speculative-model", "--num-speculative-tokens"), _VLLM,
                "spec.speculative"),
    ManagedFlag(("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens"), _SGLANG, "spec.speculative"),
    ManagedFlag(("--served-model-name",), _BOTH, "spec.routing.servedModelName"),
)
"""Flags the engines' ``engine_args`` render (engines/vllm/__init__.py and engines/sglang/__init__.py
``engine_args``), with the aliases their parsers accept (vLLM ``vllm/engine/arg_utils.py``
``EngineArgs.add_cli_args``: ``-tp``/``-pp``/``-dp``/``-ep``; SGLang ``sglang/srt/server_args.py``
``ServerArgs.add_cli_args``: ``--tensor-parallel-size``/``--tp``...). tests/unit/test_admission.py
checks that every flag an engine renders is listed here."""


ABBREVIATION_MIN_CHARS = 5
"""Shortest abbreviation of a long flag (after ``--``) treated as that flag. Both engines parse with
argparse's default ``allow_abbrev=True`` (vLLM ``FlexibleArgumentParser(ArgumentParser)`` in
``vllm/utils/argparse_utils.py`` does not turn it off; SGLang ``sglang/srt/server_args.py`` uses
``argparse.ArgumentParser``), so ``--max-model 5`` sets ``--max-model-len``. A shorter prefix is either
ambiguous (argparse refuses it) or another flag."""


def _chars(text: str) -> str:
    return "".join("[-_]" if ch == "-" else re.escape(ch) for ch in text)


def _prefixes(body: str) -> str:
    """``body`` or any prefix of it at least ``ABBREVIATION_MIN_CHARS`` long, as nested optional groups."""
    fixed = min(len(body), ABBREVIATION_MIN_CHARS)
    pattern = ""
    for ch in reversed(body[fixed:]):
        pattern = f"({_chars(ch)}{pattern})?"
    return _chars(body[:fixed]) + pattern


def flag_pattern(names: tuple[str, ...]) -> str:
    """RE2/Rust pattern matching an argument that sets one of ``names``: ``--flag``, ``--flag=v``, vLLM's
    underscore spelling ``--flag_name`` (vLLM ``FlexibleArgumentParser.parse_args`` turns ``_`` into ``-``)
    and argparse abbreviations of long flags (``--max-model``); single-dash aliases (``-tp``) exactly."""
    alternatives = []
    for name in names:
        if name.startswith("--"):
            alternatives.append("--" + _prefixes(name[2:]))
        else:
            alternatives.append("-" + _chars(name[1:]))
    # (?s:.*): a value may hold a newline (RE2's '.' stops at one, and its '$' is only the end of the text, so
    # "--max-model-len=4096\n" passed the CEL while argparse's int() strips the newline and sets the flag)
    return "^(" + "|".join(alternatives) + ")(=(?s:.*))?$"


def managed_flag_message(flag: ManagedFlag) -> str:
    """The admission message for ``flag``: names the flag and the spec field to use instead."""
    return (f"engine.args: {flag.names[0]} is set by ctxfit from the spec and may not be passed through; "
            f"use {flag.use} instead")


def managed_flag_in(args: list[str], engine: str) -> ManagedFlag | None:
    """The first managed flag of ``engine`` that ``args`` sets, None when there is none (mirrors the CEL)."""
    if not args:
        return None
    for flag in MANAGED_FLAGS:
        if engine not in flag.engines:
            continue
        pattern = _compiled(flag.names)
        if any(pattern.fullmatch(arg) for arg in args):  # fullmatch: Python's '$' also matches before a final \n
            return flag
    return None


@functools.cache
def _compiled(names: tuple[str, ...]) -> re.Pattern[str]:
    """``flag_pattern(names)`` compiled once per process (every spec validation asks for each managed flag)."""
    return re.compile(flag_pattern(names))
