"""Typed copies of the Kubernetes fields an InferenceServer passes through: env ``valueFrom``, tolerations.

Free-form dicts let the CRD accept what the API server then refuses on the Deployment. These models carry
the same rules as core validation (``validateEnvVarValueFrom``, ``ValidateTolerations`` in kubernetes
``pkg/apis/core/validation/validation.go``), as pydantic constraints for the CLI and the operator, and as CEL
(``KUBE_CEL_RULES``) for the CRD.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import WireModel
from .validation import (
    CONFIG_KEY,
    DNS1123_SUBDOMAIN,
    FIELD_PATH,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    QUALIFIED_NAME,
    QUALIFIED_NAME_MAX,
    RESOURCE_FIELD,
)

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
ConfigKey = Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIG_KEY)]


class KeyRef(WireModel):
    """``secretKeyRef`` / ``configMapKeyRef``: one key of a Secret or ConfigMap of the namespace."""

    name: ObjectName
    """Name of the Secret or ConfigMap in the server's namespace."""
    key: ConfigKey
    """Key within that Secret or ConfigMap."""
    optional: bool | None = None
    """When true, a missing object or key leaves the variable unset instead of blocking the pod."""


class FieldRef(WireModel):
    """``fieldRef``: a field of the pod (downward API)."""

    field_path: Annotated[str, Field(min_length=1, max_length=512, pattern=FIELD_PATH)]
    """Pod field to expose, e.g. `metadata.name`, `status.podIP` (Kubernetes downward API)."""
    api_version: Literal["v1"] | None = None
    """API version of the field path; only `v1`."""


class ResourceFieldRef(WireModel):
    """``resourceFieldRef``: a limit or request of a container of the pod (downward API)."""

    resource: Annotated[str, Field(min_length=1, max_length=128, pattern=RESOURCE_FIELD)]
    """Container resource to expose, e.g. `limits.memory`, `requests.cpu`."""
    container_name: Annotated[str, Field(max_length=63)] | None = None
    """Container whose resource is read; unset: this container."""
    divisor: Annotated[str, Field(max_length=64, pattern=r"^[0-9]+(\.[0-9]+)?([numkMGTPE]|[KMGTPE]i)?$")] | None = None
    """Quantity the value is divided by (`1Mi`); unset: 1."""


class EnvVarSource(WireModel):
    """``valueFrom`` of an env var: exactly one source."""

    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None
    field_ref: FieldRef | None = None
    resource_field_ref: ResourceFieldRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        given = [self.secret_key_ref, self.config_map_key_ref, self.field_ref, self.resource_field_ref]
        if sum(v is not None for v in given) != 1:
            raise ValueError("valueFrom: give exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
        return self


TolerationOperator = Literal["Exists", "Equal"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(WireModel):
    """A pod toleration, as core/v1 ``Toleration``."""

    key: Annotated[str, Field(max_length=QUALIFIED_NAME_MAX, pattern=QUALIFIED_NAME)] | None = None
    """Taint key tolerated; unset with operator Exists: every taint (the operator's policy may refuse that)."""
    operator: TolerationOperator | None = None
    """`Equal` (default: key and value must match) or `Exists` (any value)."""
    value: Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE)] | None = None
    """Taint value matched with operator Equal (a label value, <= 63 characters)."""
    effect: TaintEffect | None = None
    """Taint effect tolerated: `NoSchedule`, `PreferNoSchedule` or `NoExecute`; unset: all."""
    toleration_seconds: int | None = None
    """With effect NoExecute: seconds the pod stays bound after the taint appears; unset: forever."""

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError("tolerations: an empty key needs operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("tolerations: operator Exists takes no value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerations: tolerationSeconds needs effect NoExecute")
        return self


KUBE_CEL_RULES: dict[str, list[dict[str, str]]] = {
    "EnvVarSource": [
        {
            "rule": "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), "
            "has(self.resourceFieldRef)].exists_one(x, x)",
            "message": "valueFrom: give exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef",
            "reason": "FieldValueInvalid",
        },
    ],
    "Toleration": [
        {
            "rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            "message": "tolerations: an empty key needs operator Exists",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "message": "tolerations: operator Exists takes no value",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "message": "tolerations: tolerationSeconds needs effect NoExecute",
            "reason": "FieldValueInvalid",
        },
    ],
}
"""CEL rules per model name (merged into ``crd.CEL_RULES``): the cross-field checks above, for the CRD."""
