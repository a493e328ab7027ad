"""Download failures: the texts of huggingface_hub, HTTP clients and the kubelet, and what to do after them.

Kinds (``ctxfit.vocab.kinds.DOWNLOAD_KINDS``); none is a failed engine configuration, so no decision
here ever changes an engine flag:

- ``ModelAccessDenied`` (permanent at once): a gated repo without access, or 401/403 from the Hub.
  huggingface_hub ``utils/_http.py`` ``hf_raise_for_status`` (same wording v0.14 .. v1.28):
  "Cannot access gated repo for url ..." (``GatedRepoError``, X-Error-Code GatedRepo) followed by the
  Hub's message "Access to model X is restricted and you are not in the authorized list. Visit
  https://huggingface.co/X to ask for access." (older Hub) or "... is restricted. You must have access
  to it and be authenticated to access it. Please log in." (newer Hub); v0.25+ "403 Forbidden: ...
  Cannot access content at: ... Make sure your token has the correct permissions."; requests (hf < 1.0)
  "401 Client Error: Unauthorized for url", "403 Client Error: Forbidden for url"; httpx (hf >= 1.0)
  "Client error '401 Unauthorized'", "Client error '403 Forbidden'"; transformers ``utils/hub.py``
  "You are trying to access a gated repo."; "Invalid credentials in Authorization header" (a bad token).
- ``ModelNotFound`` (permanent at once): "Repository Not Found for url" (``RepositoryNotFoundError``,
  404, and 401 for a missing *or private* repo, so the explanation names the token too), "Revision Not
  Found for url" / "Invalid rev id" (``RevisionNotFoundError``), "Entry Not Found for url"
  (``EntryNotFoundError``); offline engine with an empty cache: "Cannot find the requested files in the
  disk cache and outgoing traffic has been disabled" (``file_download.py``, v0.20 .. v1.28); a name that is
  neither a directory here nor a repo id: ``HFValidationError`` "Repo id must be in the form ..." / "Repo id must
  use alphanumeric chars ..." (``utils/_validators.py``; a model path missing on this node).
  transformers' generic "Can't load the configuration of 'X'" ranks below any chained Hub or network error.
  An offline engine whose cache lacks a file: ``OfflineModeIsEnabled`` "Cannot reach URL: offline mode is enabled";
  a bare HTTP 404 ("404 Client Error: Not Found for url", httpx "Client error '404 Not Found'") is a hint.
- ``CacheVolumeFull``: ENOSPC "[Errno 28] No space left on device" while writing the cache, or
  huggingface_hub's "Not enough free disk space to download the file. The expected file size is: X MB.
  The target location T only has Y MB free disk space." (``file_download._check_disk_space``, v0.21+,
  MB = 10^6 bytes). An operator-owned claim grows (x1.5, at least the missing bytes); a user's claim or
  host path is permanent, with the numbers.
- ``EphemeralStorageEvicted``: the kubelet evicted the pod for ephemeral storage (eviction manager
  ``pkg/kubelet/eviction/helpers.go``: "The node was low on resource: ephemeral-storage.", "Pod
  ephemeral local storage usage exceeds the total limit of containers X.", "Usage of EmptyDir volume
  \\"V\\" exceeds the limit \\"X\\"."; "Container C exceeded its local ephemeral storage limit"):
  permanent, the explanation says to move the cache to a claim or raise the request.
- ``DownloadInterrupted``: network errors, timeouts, HTTP 429 and 5xx, retried with backoff:
  requests "Max retries exceeded with url", "Read timed out", "Connection reset by peer",
  "Temporary failure in name resolution", "429 Client Error: Too Many Requests", "50x Server Error";
  httpx "ConnectError", "ReadTimeout", "RemoteProtocolError", "Server error '503 ...'"; huggingface_hub
  "429 Too Many Requests" (v1.x), "An error happened while trying to locate the file on the Hub and we
  cannot find the requested files in the local cache" (``LocalEntryNotFoundError`` on a connection error).

  The Xet transfer path (huggingface_hub 0.30+ with hf_xet; the Rust client's errors come up through
  ``xet_get`` as ``RuntimeError`` with the error's display text, read in the hf_xet 1.0.5, 1.1.10, 1.4.3 and 1.8.0
  binaries): 1.0-1.1 "Data processing error: CAS service error : ReqwestMiddleware Error: Request failed after 5
  retries", "... : IO Error: Timer expired", "... : Error : single flight error: Real call failed", "... : result
  term data length N did not match expected value M" (a reconstruction cut short); 1.2+ "File reconstruction
  error: ...", "CAS Client Error: ...", "Network error: ...", "Internal Writer Error: Background writer channel
  closed"; the HTTP layer under it (reqwest/hyper) "error decoding response body", "request or response body
  error", "end of file before message length reached" (an incomplete body), "connection reset"; 1.8
  ``XetAuthenticationError`` / ``XetObjectNotFoundError`` (a short-lived CAS token or a chunk the CAS did not
  serve: the Hub already granted the file, so they are retried like the others). huggingface_hub's own check after
  a plain HTTP download, "Consistency check failed: file should be of size N but has size M ... This is usually
  due to network issues while downloading the file" (0.30.2 - 2.4.0 ``file_download.py``), and proxy failures
  ("ProxyError", "Tunnel connection failed", httpx "peer closed connection without sending complete message
  body") are the same class.

Precedence: the classifier's ranks (``RANK_SPECIFIC`` for a named Hub error beats ``RANK_HINT`` for a
bare HTTP/network line), so a 401 that huggingface_hub turns into "Repository Not Found" is ModelNotFound.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxfit.api import GiB, TiB, bytes_to_quantity
from ctxfit.api.model_cache import CacheMode
from ctxfit.vocab.kinds import DOWNLOAD_KINDS, Failure, FailureKind
from ctxfit.vocab.patterns import NUM, RANK_HINT, RANK_ROOT, RANK_SPECIFIC, RANK_VAGUE, FailurePattern, extractor

from .evidence import trim_words
from .policy import Check, Decision, PolicyContext, permanent

DOWNLOAD_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.MODEL_ACCESS_DENIED,
        markers=("Cannot access gated repo", "You are trying to access a gated repo", "not in the authorized list",
                 "is restricted. You must have access to it", "Invalid credentials in Authorization header",
                 "Make sure your token has the correct permissions"),
        rank=RANK_ROOT,
        source="huggingface_hub utils/_http.py hf_raise_for_status (v0.14-v1.28, GatedRepoError, 403 Forbidden); "
        "Hub X-Error-Message; transformers utils/hub.py cached_files",
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("Repository Not Found for url", "Revision Not Found for url", "Invalid rev id",
                 "Entry Not Found for url", "Cannot find the requested files in the disk cache",
                 "RepositoryNotFoundError", "RevisionNotFoundError"),
        rank=RANK_ROOT,
        source="huggingface_hub utils/_http.py (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError, "
        "v0.14-v1.28); file_download.py LocalEntryNotFoundError in offline mode (v0.20-v1.28)",
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("offline mode is enabled",),
        rank=RANK_SPECIFIC,
        requires_any=("OfflineModeIsEnabled",),
        source="huggingface_hub utils/_http.py OfflineModeIsEnabled 'Cannot reach URL: offline mode is enabled. To "
        "disable it, please unset the `HF_HUB_OFFLINE` environment variable.' (v0.20-v2.4; vLLM issue 3719): an "
        "offline engine asked the Hub for a file the cache does not hold",
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("404 Client Error", "Client error '404"),
        rank=RANK_HINT,
        source="requests HTTPError (huggingface_hub < 1.0) '404 Client Error: Not Found for url: .../config.json' / "
        "httpx (>= 1.0) \"Client error '404 Not Found'\": no such repo, revision or file (vLLM PR 8501)",
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("Can't load the configuration of", "Can't load config for"),
        rank=RANK_VAGUE,
        source="transformers configuration_utils.py _get_config_dict (4.x): the generic \"Can't load the configuration "
        "of 'X'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local "
        "directory with the same name. Otherwise, make sure 'X' is the correct path to a directory containing a "
        "config.json file\" (SGLang and vLLM read the config through it); a Hub or network error chained above wins",
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("HFValidationError: Repo id must",),
        rank=RANK_SPECIFIC,
        source="huggingface_hub utils/_validators.py validate_repo_id ('Repo id must be in the form ...' / 'Repo id "
        "must use alphanumeric chars ...'): the model name is neither a local directory nor a repo id, e.g. a path "
        "missing on this node (vLLM issue 5727); the bare retry log line of vLLM 0.7 (no exception name) stays out",
    ),
    FailurePattern(
        kind=FailureKind.CACHE_VOLUME_FULL,
        markers=("Not enough free disk space to download the file",),
        rank=RANK_ROOT,
        source="huggingface_hub file_download._check_disk_space warning (v0.21-v1.28; MB = 1e6 bytes)",
        extractors=(
            extractor("expectedMegabytes", r"expected file size is: " + NUM + r" MB", "float"),
            extractor("freeMegabytes", r"only has " + NUM + r" MB free", "float"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.CACHE_VOLUME_FULL,
        markers=("[Errno 28] No space left on device", "No space left on device"),
        rank=RANK_SPECIFIC,
        source="ENOSPC (errno 28) from the kernel while huggingface_hub writes a blob (hf_xet: 'Data processing error: "
        "CAS service error : IO Error: No space left on device (os error 28)')",
        requires_any=("/models", "huggingface", ".incomplete", "blobs", "snapshot_download", "hf_hub_download",
                      "file_download", "(os error 28)", "CAS service error", "Data processing error"),
    ),
    FailurePattern(
        kind=FailureKind.MODEL_ACCESS_DENIED,
        markers=("401 Client Error", "403 Client Error", "Client error '401", "Client error '403"),
        rank=RANK_HINT,
        source="requests HTTPError (huggingface_hub < 1.0) / httpx HTTPStatusError (>= 1.0) for 401/403",
    ),
    FailurePattern(
        kind=FailureKind.DOWNLOAD_INTERRUPTED,
        markers=("429 Client Error", "429 Too Many Requests", "Client error '429", " Server Error: ",
                 "Server error '5", "Max retries exceeded with url", "Read timed out", "ReadTimeout",
                 "ConnectTimeout", "ConnectError", "RemoteProtocolError", "Connection reset by peer",
                 "Temporary failure in name resolution", "Name or service not known",
                 "error happened while trying to locate the file on the Hub", "IncompleteRead",
                 "ChunkedEncodingError", "Connection aborted"),
        rank=RANK_HINT,
        source="requests/urllib3 and httpx exception texts; huggingface_hub LocalEntryNotFoundError (online)",
    ),
    FailurePattern(
        kind=FailureKind.DOWNLOAD_INTERRUPTED,
        markers=("CAS service error", "File reconstruction error", "CAS Client Error", "ReqwestMiddleware Error",
                 "single flight error", "did not match expected value", "Internal Writer Error",
                 "error decoding response body", "request or response body error",
                 "end of file before message length reached", "XetAuthenticationError", "XetObjectNotFoundError",
                 "Consistency check failed: file should be of size", "peer closed connection without sending",
                 "incomplete chunked read", "ProxyError", "Tunnel connection failed"),
        rank=RANK_HINT,
        source="hf_xet 1.0.5-1.8.0 (the Rust client's error texts, read in the wheels' binaries; xet-core issues 303, "
        "394, 444) raised through huggingface_hub 0.30.2-2.4.0 file_download.xet_get; huggingface_hub http_get "
        "'Consistency check failed' (0.30.2-2.4.0); httpx/h11 RemoteProtocolError, requests ProxyError (module "
        "docstring). RANK_HINT: an ENOSPC under the same line ('IO Error: No space left on device') stays "
        "CacheVolumeFull",
        covers=(("hf_xet 1.0.5", "hf_xet 1.8.0"), ("huggingface_hub 0.30.2", "huggingface_hub 2.4.0")),
    ),
)
"""Download failure texts (module docstring); ``ctxfit.recovery.classify`` runs them with the generic ones."""

DOWNLOAD_EVENT_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.EPHEMERAL_STORAGE_EVICTED,
        markers=("low on resource: ephemeral-storage", "ephemeral local storage usage exceeds",
                 "exceeded its local ephemeral storage limit", "exceeds the limit"),
        rank=RANK_ROOT,
        source="kubelet eviction manager pkg/kubelet/eviction/helpers.go (nodeLowMessageFmt, "
        "podEphemeralStorageMessageFmt, emptyDirMessageFmt, containerEphemeralStorageMessageFmt; 1.14-1.34)",
        requires_any=("ephemeral", "EmptyDir", "Evicted"),
    ),
)
"""Texts in the pod's Events and ``status.message`` (an eviction has no container log)."""

CLAIM_GROWTH = 1.5
"""An operator-owned claim that ran full grows by half (and by at least the bytes that were missing)."""
MAX_CLAIM_BYTES = 64 * TiB
"""The ``volumeClaimTemplate.size`` bound: no claim grows past it."""
DOWNLOAD_BACKOFF_SECONDS = 30
DOWNLOAD_BACKOFF_MAX_SECONDS = 600


@dataclass(frozen=True)
class ClaimFacts:
    """What the operator knows about the cache when a download failed.

    Attributes:
        mode: the cache mode in force.
        owned: the operator created the claim (volumeClaimTemplate).
        claim_name: the claim (or None: host path / emptyDir).
        size_bytes: the claim's request (or the emptyDir's ephemeral-storage request), bytes.
        token: ``"Secret NAME key KEY"`` or None (no token configured).
    """

    mode: CacheMode
    owned: bool
    claim_name: str | None
    size_bytes: int | None
    token: str | None


def _facts(ctx: PolicyContext) -> ClaimFacts:
    """Facts from the spec alone (``ctxfit diagnose``): a spec without a cache gets the default claim."""
    model = ctx.spec.model
    mode = model.cache.mode if model.cache is not None else CacheMode.VOLUME_CLAIM_TEMPLATE
    ref = model.token_secret_ref
    token = f"Secret {ref.name} key {ref.key}" if ref is not None else None
    claim = model.cache.persistent_volume_claim.claim_name if model.cache and model.cache.persistent_volume_claim \
        else None
    return ClaimFacts(mode, mode is CacheMode.VOLUME_CLAIM_TEMPLATE, claim, None, token)


def grown_claim_bytes(size_bytes: int, numbers: dict[str, float | int]) -> int | None:
    """The next size of a full operator-owned claim (whole GiB), or None when past ``MAX_CLAIM_BYTES``.

    ``numbers``: the failure's ``expectedMegabytes``/``freeMegabytes`` (huggingface_hub prints MB = 1e6 bytes).
    """
    missing = int((numbers.get("expectedMegabytes", 0) - numbers.get("freeMegabytes", 0)) * 1e6)
    want = max(int(size_bytes * CLAIM_GROWTH), size_bytes + max(missing, 0))
    want = -(-want // GiB) * GiB
    return want if want <= MAX_CLAIM_BYTES else None


def decide_download(ctx: PolicyContext, facts: ClaimFacts | None = None) -> Decision:
    """The decision after a download failure (a ``DOWNLOAD_KINDS`` failure); never changes an engine flag.

    ``next`` is ``ctx.current`` unchanged or None (permanent). For ``CacheVolumeFull`` on an owned claim,
    ``retry_after_seconds`` is 0 and the controller grows the claim (``grown_claim_bytes``).
    """
    facts = facts or _facts(ctx)
    failure, name = ctx.failure, ctx.spec.model.name
    evidence = trim_words(" ".join(failure.evidence.split()), 200)  # one line, cut at a word boundary
    kind = failure.kind
    if kind is FailureKind.MODEL_ACCESS_DENIED:
        token = (f"the token in {facts.token} was refused" if facts.token else
                 "no token is configured (spec.model.tokenSecretRef)")
        return permanent("ModelAccessDenied", f"the Hub denied access to {name}: {token}; request access on "
                         f"https://huggingface.co/{name} with the token's account and check the token ({evidence})")
    if kind is FailureKind.MODEL_NOT_FOUND:
        return permanent("ModelNotFound", f"{name} at revision {ctx.spec.model.revision} was not found (a "
                         f"private repo looks missing without a token; check spec.model.name, spec.model.revision "
                         f"and spec.model.tokenSecretRef) ({evidence})")
    if kind is FailureKind.EPHEMERAL_STORAGE_EVICTED:
        return permanent("EphemeralStorageEvicted", f"the pod was evicted for ephemeral storage ({evidence}); move "
                         "the weights to a claim (spec.model.cache.volumeClaimTemplate) or give the node more "
                         "ephemeral storage")
    if ctx.failed_attempts >= ctx.spec.attempts:
        return permanent("AttemptsExhausted", f"{ctx.failed_attempts} failed starts reach spec.attempts "
                         f"({ctx.spec.attempts}); the download kept failing ({kind.value}): {evidence}")
    if kind is FailureKind.CACHE_VOLUME_FULL:
        size = f"{bytes_to_quantity(facts.size_bytes)} " if facts.size_bytes else ""
        where = f"claim {facts.claim_name}" if facts.claim_name else facts.mode.value
        needed = failure.numbers.get("expectedMegabytes")
        free = failure.numbers.get("freeMegabytes")
        numbers = f" (a {needed:.0f} MB file, {free:.0f} MB free)" if needed is not None and free is not None else ""
        if not facts.owned:
            return permanent("CacheVolumeFull", f"the {size}{where} is full{numbers}; give it room for "
                             f"{name} or use an operator-owned claim (volumeClaimTemplate)")
        grown = grown_claim_bytes(facts.size_bytes, failure.numbers) if facts.size_bytes else None
        if facts.size_bytes and grown is None:
            return permanent("CacheVolumeFull", f"the {size}{where} is full{numbers} and may not grow past "
                             f"{bytes_to_quantity(MAX_CLAIM_BYTES)}")
        target = bytes_to_quantity(grown) if grown else "a larger size"
        return Decision(ctx.current, False, f"the {size}{where} is full{numbers}; the claim grows to {target}, "
                        "same engine configuration", FailureKind.CACHE_VOLUME_FULL)
    if kind is not FailureKind.DOWNLOAD_INTERRUPTED:
        return permanent(kind.value, f"no download policy for {kind.value}: {evidence}")  # unreachable
    delay = min(DOWNLOAD_BACKOFF_MAX_SECONDS, DOWNLOAD_BACKOFF_SECONDS * 2 ** (ctx.failed_attempts - 1))
    return Decision(ctx.current, False, f"the download was interrupted ({evidence}); retrying in {delay} s, same "
                    "engine configuration", FailureKind.DOWNLOAD_INTERRUPTED, retry_after_seconds=delay)


ENOSPC = "No space left on device"


def as_download_failure(failure: Failure, text: str) -> Failure:
    """A failure of the ``model-download`` container: never an engine-configuration kind.

    ENOSPC without a recognizable cache path is still the cache volume (the download writes nothing
    else); any other engine kind (e.g. a "Bus error" read as /dev/shm) becomes Unknown with its evidence,
    since no engine setting can cause or fix a failed download.
    """
    if failure.kind in DOWNLOAD_KINDS or (failure.kind is FailureKind.UNKNOWN and ENOSPC not in text):
        return failure
    if ENOSPC in text:
        line = next((ln.strip() for ln in text.splitlines() if ENOSPC in ln), ENOSPC)
        return Failure(FailureKind.CACHE_VOLUME_FULL, dict(failure.numbers), line[:512])
    return Failure(FailureKind.UNKNOWN, dict(failure.numbers), failure.evidence)


def download_check(kind: FailureKind) -> Check:
    """The policy-chain entry for one download kind (``checks.POLICY_CHAIN``: one check per kind).

    ``decide`` hands download kinds to ``decide_download`` before the chain (so a retry of the same
    configuration is not refused as "already tried"); the chain entry makes the table complete and
    answers the same when called directly.
    """

    def check(ctx: PolicyContext) -> Decision | None:
        return decide_download(ctx) if ctx.failure.kind is kind else None

    return check
