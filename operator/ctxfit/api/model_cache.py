"""Where the model's weights live: ``spec.model.cache``, ``spec.model.tokenSecretRef`` and ``status.model``.

``cache`` holds exactly one of four modes (checked by pydantic and by a CEL rule in the CRD):

- ``volumeClaimTemplate`` ``{storageClassName, accessModes, size, retain}``: ctxfit creates one
  PersistentVolumeClaim per InferenceServer, owned by it (deleted with it unless ``retain``), sized
  from the checkpoint when ``size`` is absent (``ctxfit.render.cache.claim_size_bytes``), reused by
  every attempt and every spec change;
- ``persistentVolumeClaim`` ``{claimName, subPath, readOnly}``: the user's claim; ``readOnly: true``
  means the weights are preloaded and nothing is downloaded;
- ``hostPath`` ``{path}``: a node-local directory;
- ``emptyDir`` ``{}``: no cache; the pod requests ``ephemeral-storage`` sized from the checkpoint and
  every attempt downloads again.

No ``cache`` at all means ``volumeClaimTemplate`` with the cluster's default StorageClass, or
``emptyDir`` when the cluster has none (the operator says so in the ``WeightsCached`` condition).
The operator never reads the token Secret: it is rendered as ``HF_TOKEN`` from a ``secretKeyRef``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .base import WireModel
from .quantity import Quantity, TiB, check_quantity_bounds
from .validation import CONFIG_KEY, DNS1123_SUBDOMAIN

if TYPE_CHECKING:
    from .resolution import ResolvedAdapter, ResolvedModel

MODES = ("volumeClaimTemplate", "persistentVolumeClaim", "hostPath", "emptyDir")
"""Wire names of the cache modes, in the order the docs list them."""


class CacheMode(StrEnum):
    """The cache mode in force (``status.model.cache``)."""

    VOLUME_CLAIM_TEMPLATE = "volumeClaimTemplate"
    PERSISTENT_VOLUME_CLAIM = "persistentVolumeClaim"
    HOST_PATH = "hostPath"
    EMPTY_DIR = "emptyDir"


AccessMode = Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany"]


class TokenSecretRef(WireModel):
    """A key of a Secret in the server's namespace holding a Hugging Face token (gated/private models)."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
    """Secret in the server's namespace holding the Hugging Face token (rendered as `HF_TOKEN`)."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIG_KEY)] = "token"
    """Key of the token in that Secret."""


def _read_write_once() -> list[AccessMode]:
    return ["ReadWriteOnce"]


class VolumeClaimTemplate(WireModel):
    """An operator-owned claim. ``size`` absent: checkpoint bytes x 1.1 + 5 GiB (``render.cache``)."""

    storage_class_name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)] | None = None
    """StorageClass of the operator-owned claim; unset: the cluster's default StorageClass."""
    access_modes: list[AccessMode] = Field(default_factory=_read_write_once, min_length=1, max_length=4)
    """Access modes of the claim (`ReadWriteOnce` by default; `ReadWriteMany` to share across nodes)."""
    size: Quantity | None = None
    """Claim size as a quantity (`700Gi`); unset: sized from the checkpoint bytes (see ctxfit.render.cache)."""
    retain: bool = False
    """Keep the claim (and the downloaded weights) when the InferenceServer is deleted."""

    @field_validator("size")
    @classmethod
    def _size_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=64 * TiB, lower_bytes=1 << 20)


class UserClaim(WireModel):
    """The user's claim; ``readOnly: true`` = weights preloaded under ``subPath``, never downloaded."""

    claim_name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
    """Existing PersistentVolumeClaim in the server's namespace (e.g. a ReadWriteMany share holding weights)."""
    sub_path: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """Directory inside the claim used as the Hugging Face cache (a relative path without `..`); unset: the
    claim's root."""

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value.split("/")):
            raise ValueError("model.cache.persistentVolumeClaim.subPath: a relative path without '..' elements")
        return value
    read_only: bool = False
    """The weights are preloaded: mount read-only and never download."""


class HostPathCache(WireModel):
    """A node-local directory used as the Hugging Face cache."""

    path: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/")]
    """Absolute node-local directory used as the Hugging Face cache (kept on the node across attempts); no `..`
    elements."""

    @field_validator("path")
    @classmethod
    def _no_backsteps(cls, value: str) -> str:
        if ".." in value.split("/"):
            raise ValueError("model.cache.hostPath.path: no '..' elements")
        return value


class EmptyDirCache(WireModel):
    """Explicitly no cache (every attempt downloads into the pod's ephemeral storage)."""


class ModelCache(WireModel):
    """``spec.model.cache``: exactly one of the four modes (see the module docstring)."""

    volume_claim_template: VolumeClaimTemplate | None = None
    persistent_volume_claim: UserClaim | None = None
    host_path: HostPathCache | None = None
    empty_dir: EmptyDirCache | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelCache:
        given = [m for m, v in zip(MODES, self._values(), strict=True) if v is not None]
        if len(given) != 1:
            raise ValueError(f"model.cache: set exactly one of {', '.join(MODES)} (got {len(given)})")
        return self

    def _values(self) -> tuple[object, ...]:
        return (self.volume_claim_template, self.persistent_volume_claim, self.host_path, self.empty_dir)

    @property
    def mode(self) -> CacheMode:
        """The mode that is set."""
        for name, value in zip(MODES, self._values(), strict=True):
            if value is not None:
                return CacheMode(name)
        raise ValueError("model.cache: no mode set")  # unreachable after validation


CACHE_CEL_RULES: dict[str, list[dict[str, str]]] = {
    # core validation refuses these in the pod (``validateLocalDescendingPath``, ``validatePathNoBacksteps``):
    # the CRD refuses them at ``kubectl apply`` instead of a Deployment the API server then refuses
    "UserClaim": [{"rule": "!has(self.subPath) || (!self.subPath.startsWith('/') && "
                           "!self.subPath.split('/').exists(p, p == '..'))",
                   "message": "model.cache.persistentVolumeClaim.subPath: a relative path without '..' elements",
                   "reason": "FieldValueInvalid"}],
    "HostPathCache": [{"rule": "!self.path.split('/').exists(p, p == '..')",
                       "message": "model.cache.hostPath.path: no '..' elements", "reason": "FieldValueInvalid"}],
    "ModelCache": [
        {
            "rule": "[has(self.volumeClaimTemplate), has(self.persistentVolumeClaim), has(self.hostPath), "
            "has(self.emptyDir)].filter(x, x).size() == 1",
            "message": "model.cache: set exactly one of volumeClaimTemplate, persistentVolumeClaim, hostPath, "
            "emptyDir",
            "reason": "FieldValueInvalid",
        },
    ],
}
"""CEL for ``ctxfit.api.crd`` (the same rule as ``ModelCache._exactly_one``)."""


class ModelStatus(WireModel):
    """``status.model``: what resolution found, the cache in force and what the download did.

    Attributes:
        resolved: the resolved model (``ctxfit.api.resolution``; before the cache is chosen it is the only field).
        draft: the speculative draft (``spec.speculative.draft``) resolved the same way, when it was read.
        adapters: the Hub LoRA adapters whose adapter_config.json was read (rank and modules not in the spec).
        cache: the mode in force (after the default rule); None until the cache step ran.
        claim_name: the PersistentVolumeClaim mounted (operator-owned or the user's).
        claim_bytes: the operator-owned claim's requested size as stored (what the claim has), bytes; absent
            until the claim exists.
        claim_wanted_bytes: the size the operator asks that claim to have (the spec's size, or a growth after
            a full download) while the claim is smaller: an expansion pending, or refused (condition
            ``ObjectsAccepted``), or a replacement claim not created yet; absent once the claim has it.
        ephemeral_bytes: the ``ephemeral-storage`` request for ``emptyDir``, bytes.
        bytes: checkpoint bytes the download reported (its last progress line), when known.
        download_seconds: how long the last completed download took (init container start -> end).
        changed_at: when the claim last changed (grown or replaced); download failures that ended
            before it belong to the old claim and are ignored (RFC 3339).
        note: why this mode (e.g. no default StorageClass).
        owned_claim: the operator's own weights claim of this server, in every mode: kept (and not deleted)
            while another mode is in force, mounted again when ``volumeClaimTemplate`` comes back, so a cache
            mode round trip never abandons a filled claim.
    """

    resolved: ResolvedModel | None = None  # defined in .resolution (imports .spec, which imports this module)
    draft: ResolvedModel | None = None
    """The speculative draft resolved like the model (config.json and the safetensors headers of
    `spec.speculative.draft.name`), when it was read; a re-plan reads its geometry and weights back from here."""
    adapters: list[ResolvedAdapter] | None = Field(default=None, max_length=64)
    """Hub LoRA adapters whose adapter_config.json was read (the rank and target modules the spec leaves unset); a
    re-plan reads them back from here."""
    cache: CacheMode | None = None
    claim_name: str | None = None
    claim_bytes: int | None = None
    claim_wanted_bytes: int | None = None
    ephemeral_bytes: int | None = None
    bytes: int | None = None
    download_seconds: int | None = None
    changed_at: str | None = None
    note: str | None = None
    owned_claim: str | None = None
