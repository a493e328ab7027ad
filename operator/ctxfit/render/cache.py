"""The model-weights cache in the pod (pure): which mode applies, the claim, the download init container.

Shape of a pod with a cache (``apply_cache``):

- a volume ``model-cache`` (the claim, the host path, or an emptyDir) mounted at ``/models`` in the
  init container ``model-download`` and in the engine, both with ``HF_HOME=/models`` (huggingface_hub
  ``constants.HF_HOME``; its hub cache is ``$HF_HOME/hub``);
- ``model-download`` runs the engine's own image (no extra image to pull) with ``python3 -c
  DOWNLOAD_SCRIPT``: ``huggingface_hub.snapshot_download`` of ``spec.model.name`` at
  ``spec.model.revision`` into the cache, only the files the engine loads (``allow_patterns``), so a
  second run finds every file present and downloads nothing, and an interrupted run resumes its
  ``.incomplete`` blobs (huggingface_hub ``file_download._download_to_tmp_and_move``);
- the engine runs with ``HF_HUB_OFFLINE=1`` (huggingface_hub ``constants.HF_HUB_OFFLINE``; transformers
  and vLLM/SGLang honour it), so it never downloads by itself; with a revision other than ``main`` it
  gets ``--revision REV`` (vLLM ``EngineArgs.revision``, SGLang ``ServerArgs.revision``: same flag);
- ``HF_TOKEN`` from the user's ``secretKeyRef`` on the download container (the operator never reads it), and the
  user's own ``HF_*`` engine env (a mirror's ``HF_ENDPOINT``, timeouts), except ``HF_HUB_OFFLINE`` and ``HF_HOME``;
- pod annotations ``ctxfit.io/cache-claim`` and ``ctxfit.io/cache-bytes`` (the claim and its size), so a
  pod tells which claim it was started with.

Sizing (``claim_size_bytes``): checkpoint bytes x 1.1 + 5 GiB, rounded up to a GiB. The 10% covers
files besides the weights and a re-download of a revision that changed; the 5 GiB covers the
tokenizer/config files and ``.incomplete`` blobs of parallel downloads (8 workers x ~5 GB shards, the
usual ``max_shard_size`` of ``transformers`` ``save_pretrained``). Checkpoint bytes come from the model
catalog (``checkpointBytes``, or parameters x bytes per parameter), else from the planned per-GPU
weights x tensor x pipeline parallel size (each of those GPUs holds a distinct slice).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ctxfit.api import (
    ADAPTER_ROOT,
    API_GROUP,
    API_VERSION,
    DRAFT_ROOT,
    KIND,
    GiB,
    InferenceServerSpec,
    bytes_to_quantity,
    quantity_to_bytes,
)
from ctxfit.api.model_cache import CacheMode, ModelCache, VolumeClaimTemplate
from ctxfit.catalog import lookup_model

from .labels import DOMAIN, OWNER_UID_ANNOTATION, common_labels, owner_reference

CACHE_VOLUME = "model-cache"
CACHE_MOUNT_PATH = "/models"
DOWNLOAD_CONTAINER = "model-download"
CLAIM_ANNOTATION = f"{DOMAIN}/cache-claim"
CACHE_BYTES_ANNOTATION = f"{DOMAIN}/cache-bytes"
CLAIM_GROWTH = 1.1
HUB_ENV_PREFIX = "HF_"
"""``spec.engine.env`` entries named ``HF_*`` (huggingface_hub ``constants.py``: HF_ENDPOINT, HF_HUB_ETAG_TIMEOUT,
HF_HUB_DOWNLOAD_TIMEOUT, HF_HUB_ENABLE_HF_TRANSFER, ...) are also given to ``model-download``."""
DOWNLOAD_ENV_SKIP = frozenset({"HF_HUB_OFFLINE", "HF_HOME"})
CLAIM_MARGIN_BYTES = 5 * GiB
DOWNLOAD_WORKERS = 8
"""``snapshot_download(max_workers=8)`` (huggingface_hub's default)."""

ALLOW_PATTERNS = (
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json", "tokenizer*",
    "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt", "*.tiktoken", "tiktoken.model",
    "*.model", "chat_template*", "*.jinja", "preprocessor_config.json", "processor_config.json", "*.py",
)
"""What vLLM/SGLang load: safetensors shards and index (vLLM ``weight_utils.download_weights_from_hf``
prefers ``*.safetensors`` and takes ``*.bin`` only when a repo has no safetensors), config.json and
generation_config.json (transformers ``AutoConfig``/``GenerationConfig``), tokenizer files (transformers
``tokenization_utils_base`` ``VOCAB_FILES_NAMES`` of the fast and slow tokenizers, tiktoken models),
chat templates, processor configs of multimodal models, and ``*.py`` for ``--trust-remote-code`` models."""
FALLBACK_PATTERNS = ("*.bin", "*.bin.index.json")
"""Taken only when the revision has no ``*.safetensors`` (as vLLM does)."""
IGNORE_PATTERNS = ("original/*", "*.pth", "*.pt", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.ckpt")
"""Never downloaded: the ``original/`` tree (consolidated checkpoints for other runtimes, e.g. Llama's),
and formats no engine here loads."""

DOWNLOAD_SCRIPT = """\
import fnmatch, json, os, pathlib, threading, time
from huggingface_hub import HfApi, snapshot_download
repo, rev = os.environ["CTXFIT_MODEL"], os.environ["CTXFIT_REVISION"]
allow = os.environ["CTXFIT_ALLOW"].split(",")
ignore = os.environ["CTXFIT_IGNORE"].split(",")
def wanted(name, patterns):
    return any(fnmatch.fnmatch(name, p) for p in patterns) and not any(fnmatch.fnmatch(name, p) for p in ignore)
files = HfApi().model_info(repo, revision=rev, files_metadata=True).siblings or []
if not any(wanted(f.rfilename, ["*.safetensors"]) for f in files):
    allow += os.environ["CTXFIT_FALLBACK"].split(",")
total = sum(f.size or 0 for f in files if wanted(f.rfilename, allow))
blobs = pathlib.Path(os.environ["HF_HOME"], "hub", "models--" + repo.replace("/", "--"), "blobs")
start, stop = time.monotonic(), threading.Event()
def done():
    return sum(p.stat().st_size for p in blobs.glob("*") if p.is_file()) if blobs.is_dir() else 0
def report():
    while not stop.wait(15):
        print(f"ctxfit-download: {done()} of {total} bytes", flush=True)
threading.Thread(target=report, daemon=True).start()
workers = int(os.environ["CTXFIT_WORKERS"])
snapshot_download(repo, revision=rev, allow_patterns=allow, ignore_patterns=ignore, max_workers=workers)
for extra_repo, extra_rev, link in json.loads(os.environ.get("CTXFIT_EXTRA", "[]")):
    path = snapshot_download(extra_repo, revision=extra_rev, ignore_patterns=ignore, max_workers=workers)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.islink(link) or os.path.exists(link):
        os.remove(link)
    os.symlink(path, link)
    print(f"ctxfit-download: {extra_repo}@{extra_rev} -> {link}", flush=True)
stop.set()
print(f"ctxfit-download: complete {total} of {total} bytes in {time.monotonic() - start:.0f} s", flush=True)
"""
"""The init container's program. Progress lines ``ctxfit-download: DONE of TOTAL bytes`` every 15 s
(bytes in the repo's blob directory, ``.incomplete`` parts included) and a final ``complete`` line;
``ctxfit.controller.converge.cache.parse_progress`` reads them. ``CTXFIT_EXTRA`` lists ``[repo, revision, link]``
of the LoRA adapters and the speculative draft on the Hub (``extra_downloads``): each is downloaded whole into the
same cache and linked where the engine reads it (``ADAPTER_ROOT/<name>``, ``DRAFT_ROOT``)."""


@dataclass(frozen=True)
class CacheVolume:
    """The cache as the pod renders it.

    Attributes:
        mode: the mode in force.
        claim_name: PVC mounted (operator-owned or the user's), else None.
        size_bytes: the claim's requested size, or the ephemeral-storage request for emptyDir (bytes).
        sub_path: mount sub-path inside the volume (user claims).
        read_only: preloaded user claim: mounted read-only, no download container.
        host_path: node directory (hostPath mode).
    """

    mode: CacheMode
    claim_name: str | None = None
    size_bytes: int | None = None
    sub_path: str | None = None
    read_only: bool = False
    host_path: str | None = None

    @property
    def downloads(self) -> bool:
        """Whether the pod gets the ``model-download`` init container."""
        return not self.read_only


def checkpoint_bytes(spec: InferenceServerSpec, weights_per_gpu_bytes: int | None) -> int | None:
    """Bytes of the checkpoint on disk: the catalog's figure, else per-GPU weights x TP x PP, else None."""
    entry = lookup_model(spec.model.name)
    draft = _draft_checkpoint_bytes(spec)
    if entry is not None and entry.weights_total_bytes is not None:
        return entry.weights_total_bytes + draft
    if weights_per_gpu_bytes:
        return weights_per_gpu_bytes * spec.parallelism.tensor * spec.parallelism.pipeline + draft
    return None


def _draft_checkpoint_bytes(spec: InferenceServerSpec) -> int:
    """A Hub draft's checkpoint: the catalog's, else its weightsPerGPU x TP, else 0 (the 5 GiB margin)."""
    draft = spec.speculative.draft if spec.speculative is not None else None
    if draft is None:
        return 0
    entry = lookup_model(draft.name)
    if entry is not None and entry.weights_total_bytes is not None:
        return entry.weights_total_bytes
    if draft.weights_per_gpu is not None:
        return quantity_to_bytes(draft.weights_per_gpu) * spec.parallelism.tensor
    return 0


def claim_size_bytes(checkpoint: int | None) -> int:
    """Claim size for a checkpoint: ``ceil_GiB(checkpoint x 1.1) + 5 GiB`` (module docstring); 100 GiB unknown."""
    if not checkpoint or checkpoint <= 0:
        return 100 * GiB
    return math.ceil(checkpoint * CLAIM_GROWTH / GiB) * GiB + CLAIM_MARGIN_BYTES


def default_cache(has_default_storage_class: bool) -> tuple[ModelCache, str]:
    """The cache when ``spec.model.cache`` is absent, and a sentence saying why.

    A default StorageClass (annotation ``storageclass.kubernetes.io/is-default-class: "true"``) ->
    an operator-owned claim of that class; none -> emptyDir, re-downloaded by every attempt.
    """
    if has_default_storage_class:
        return (ModelCache(volume_claim_template=VolumeClaimTemplate()),
                "default: a claim of the cluster's default StorageClass")
    return (ModelCache.model_validate({"emptyDir": {}}),
            "no default StorageClass in the cluster: weights go to the pod's ephemeral storage and every "
            "attempt downloads them again; set spec.model.cache to keep them")


def claim_name_for(server: str, generation: int = 1) -> str:
    """Name of the operator's claim: ``SERVER-weights``, ``SERVER-weights-2`` after a replacement."""
    return f"{server}-weights" if generation <= 1 else f"{server}-weights-{generation}"


def render_claim(server: str, namespace: str, uid: str, spec: InferenceServerSpec, template: VolumeClaimTemplate,
                 claim_name: str, size_bytes: int) -> dict[str, Any]:
    """The operator-owned PVC; owned by the InferenceServer (garbage-collected with it) unless ``retain``, and
    marked with its uid (``ctxfit.io/owner-uid``) in both cases, so a retained claim stays known as its own."""
    meta: dict[str, Any] = {"name": claim_name, "namespace": namespace,
                            "labels": common_labels(server, spec.engine.kind),
                            "annotations": {OWNER_UID_ANNOTATION: uid}}
    if not template.retain:
        meta["ownerReferences"] = [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, server, uid)]
    body: dict[str, Any] = {"accessModes": list(template.access_modes),
                            "resources": {"requests": {"storage": bytes_to_quantity(size_bytes)}}}
    if template.storage_class_name:
        body["storageClassName"] = template.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": body}


def _volume(cache: CacheVolume) -> dict[str, Any]:
    if cache.mode is CacheMode.HOST_PATH:
        return {"name": CACHE_VOLUME, "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    if cache.mode is CacheMode.EMPTY_DIR:
        source: dict[str, Any] = {"sizeLimit": bytes_to_quantity(cache.size_bytes)} if cache.size_bytes else {}
        return {"name": CACHE_VOLUME, "emptyDir": source}
    claim: dict[str, Any] = {"claimName": cache.claim_name}
    if cache.read_only:
        claim["readOnly"] = True
    return {"name": CACHE_VOLUME, "persistentVolumeClaim": claim}


def _mount(cache: CacheVolume, read_only: bool) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT_PATH}
    if cache.sub_path:
        mount["subPath"] = cache.sub_path
    if read_only:
        mount["readOnly"] = True
    return mount


def extra_downloads(spec: InferenceServerSpec) -> list[list[str]]:
    """``[repo, revision, link]`` of every Hub adapter (``spec.lora``) and Hub draft (``spec.speculative.draft``)."""
    out: list[list[str]] = []
    if spec.lora is not None:
        out += [[a.source, a.revision, f"{ADAPTER_ROOT}/{a.name}"] for a in spec.lora.adapters if a.from_hub]
    draft = spec.speculative.draft if spec.speculative is not None else None
    if draft is not None and draft.name.count("/") == 1 and not draft.name.startswith(("/", ".")):
        out.append([draft.name, draft.revision, DRAFT_ROOT])
    return out


def download_container(spec: InferenceServerSpec, image: str, cache: CacheVolume) -> dict[str, Any]:
    """The ``model-download`` init container (same image as the engine; see the module docstring)."""
    env: list[dict[str, Any]] = [
        {"name": "CTXFIT_ALLOW", "value": ",".join(ALLOW_PATTERNS)},
        {"name": "CTXFIT_FALLBACK", "value": ",".join(FALLBACK_PATTERNS)},
        {"name": "CTXFIT_IGNORE", "value": ",".join(IGNORE_PATTERNS)},
        {"name": "CTXFIT_MODEL", "value": spec.model.name},
        {"name": "CTXFIT_REVISION", "value": spec.model.revision},
        {"name": "CTXFIT_WORKERS", "value": str(DOWNLOAD_WORKERS)},
        {"name": "HF_HOME", "value": CACHE_MOUNT_PATH},
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
    ]
    extras = extra_downloads(spec)
    if extras:
        env.append({"name": "CTXFIT_EXTRA", "value": json.dumps(extras, separators=(",", ":"))})
    if spec.model.token_secret_ref is not None:
        ref = spec.model.token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    ours = {e["name"] for e in env}
    # the user's Hub settings reach the download too (HF_ENDPOINT for a mirror, HF_HUB_ETAG_TIMEOUT, ...); never
    # HF_HUB_OFFLINE (the engine's, it would stop the download) nor what is set above
    env += [var.to_wire() for var in spec.engine.env
            if var.name.startswith(HUB_ENV_PREFIX) and var.name not in ours and var.name not in DOWNLOAD_ENV_SKIP]
    container: dict[str, Any] = {
        "name": DOWNLOAD_CONTAINER,
        "image": image,
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "env": env,
        "volumeMounts": [_mount(cache, read_only=False)],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if cache.mode is CacheMode.EMPTY_DIR and cache.size_bytes:
        storage = bytes_to_quantity(cache.size_bytes)
        container["resources"] = {"requests": {"ephemeral-storage": storage}, "limits": {"ephemeral-storage": storage}}
    return container


def apply_cache(template: dict[str, Any], engine_container: dict[str, Any], spec: InferenceServerSpec,
                image: str, cache: CacheVolume) -> None:
    """Add the cache volume, mounts, offline env, the download init container and annotations (in place).

    ``template``: the pod template (``metadata`` + ``spec``); ``engine_container``: its engine container.
    """
    pod_spec = template["spec"]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), _volume(cache)]
    engine_container["volumeMounts"] = [*engine_container.get("volumeMounts", []),
                                        _mount(cache, read_only=cache.read_only)]
    ours = [{"name": "HF_HOME", "value": CACHE_MOUNT_PATH}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
    engine_container["env"] = [*ours, *engine_container.get("env", [])]  # the user's entries come last and win
    if spec.model.revision != "main":
        engine_container["args"] = [*engine_container.get("args", []), "--revision", spec.model.revision]
    if cache.mode is CacheMode.EMPTY_DIR and cache.size_bytes:
        resources = engine_container.setdefault("resources", {})
        storage = bytes_to_quantity(cache.size_bytes)
        for key in ("requests", "limits"):
            resources[key] = dict(sorted({**resources.get(key, {}), "ephemeral-storage": storage}.items()))
    if cache.downloads:
        pod_spec["initContainers"] = [download_container(spec, image, cache)]
    annotations = template["metadata"].setdefault("annotations", {})
    if cache.claim_name:
        annotations[CLAIM_ANNOTATION] = cache.claim_name
    if cache.size_bytes:
        annotations[CACHE_BYTES_ANNOTATION] = str(cache.size_bytes)
    template["metadata"]["annotations"] = dict(sorted(annotations.items()))


def describe_cache(cache: CacheVolume) -> str:
    """One line: the mode, the claim or path, the size (for ``ctxfit plan`` and status messages)."""
    size = f" of {bytes_to_quantity(cache.size_bytes)}" if cache.size_bytes else ""
    if cache.mode is CacheMode.VOLUME_CLAIM_TEMPLATE:
        return f"volumeClaimTemplate: claim {cache.claim_name}{size} (operator-owned, reused by every attempt)"
    if cache.mode is CacheMode.PERSISTENT_VOLUME_CLAIM:
        what = "preloaded, read-only, no download" if cache.read_only else "downloads into it"
        return f"persistentVolumeClaim: {cache.claim_name}{'/' + cache.sub_path if cache.sub_path else ''} ({what})"
    if cache.mode is CacheMode.HOST_PATH:
        return f"hostPath: {cache.host_path} (node-local)"
    return f"emptyDir: ephemeral-storage{size} (no cache: every attempt downloads again)"


def resolve_cache(spec: InferenceServerSpec, *, server: str, has_default_storage_class: bool,
                  checkpoint: int | None, claim_name: str | None = None,
                  claim_bytes: int | None = None) -> tuple[CacheVolume, ModelCache, str]:
    """The cache in force: ``(volume, the mode's spec, why)``.

    ``claim_name``/``claim_bytes``: the operator-owned claim already chosen (``status.model``); they win
    over the template, so a grown or replaced claim stays in use. ``checkpoint``: bytes on disk (sizes a
    claim without ``size`` and the emptyDir request).
    """
    cache, note = (spec.model.cache, "set in spec.model.cache") if spec.model.cache is not None \
        else default_cache(has_default_storage_class)
    mode = cache.mode
    if cache.volume_claim_template is not None:
        template = cache.volume_claim_template
        size = claim_bytes or (quantity_to_bytes(template.size) if template.size else claim_size_bytes(checkpoint))
        return CacheVolume(mode, claim_name=claim_name or claim_name_for(server), size_bytes=size), cache, note
    if cache.persistent_volume_claim is not None:
        user = cache.persistent_volume_claim
        return (CacheVolume(mode, claim_name=user.claim_name, sub_path=user.sub_path, read_only=user.read_only),
                cache, note)
    if cache.host_path is not None:
        return CacheVolume(mode, host_path=cache.host_path.path), cache, note
    return CacheVolume(mode, size_bytes=claim_size_bytes(checkpoint)), cache, note
