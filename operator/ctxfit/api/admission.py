"""CEL rules that make the API server refuse, at admission, what it would refuse later on the rendered
objects or what the operator would have to second-guess.

- root: ``metadata.name`` must be a DNS-1035 label of <= 63 characters, because the Service is named
  like the server (core ``ValidateServiceName``; CRD validation rules at the root may read
  ``self.metadata.name``, Kubernetes docs "Validation rules", https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules);
- ``engine.args`` may not set a flag ctxfit manages (``validation.MANAGED_FLAGS``), in ``--flag v``,
  ``--flag=v`` or vLLM's ``--flag_name`` spelling; the message names the flag and the spec field to use;
- pod label and annotation keys must be qualified names (apimachinery ``IsQualifiedName``);
- quantities have the models' bounds (CEL Kubernetes quantity library, ``isQuantity``/``quantity``,
  https://kubernetes.io/docs/reference/using-api/cel/#kubernetes-quantity-library).
"""

from __future__ import annotations

from .validation import (
    CPU_MAX,
    CPU_MIN,
    DNS1035_LABEL,
    DNS1035_MAX,
    MANAGED_FLAGS,
    QUALIFIED_NAME,
    SERVER_NAME_MESSAGE,
    flag_pattern,
    managed_flag_message,
)

ROOT_CEL_RULES: list[dict[str, str]] = [
    {
        "rule": f"size(self.metadata.name) <= {DNS1035_MAX} && self.metadata.name.matches('{DNS1035_LABEL}')",
        "message": f"metadata.name: {SERVER_NAME_MESSAGE}",
        "reason": "FieldValueInvalid",
    },
]
"""Rules on the whole object (``openAPIV3Schema`` root)."""


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _managed_flag_rules() -> list[dict[str, str]]:
    rules = []
    for flag in MANAGED_FLAGS:
        engines = " || ".join(f"self.kind == '{e}'" for e in flag.engines)
        rules.append({
            "rule": f"!({engines}) || !has(self.args) || "
            f"!self.args.exists(a, a.matches({_cel_string(flag_pattern(flag.names))}))",
            "message": managed_flag_message(flag),
            "reason": "FieldValueForbidden",
        })
    return rules


def _quantity_rule(field: str, lower: str, upper: str, where: str) -> dict[str, str]:
    value = f"string(self.{field})"
    return {
        "rule": f"!has(self.{field}) || (isQuantity({value}) && quantity({value}).compareTo(quantity('{lower}')) >= 0"
        f" && quantity({value}).compareTo(quantity('{upper}')) <= 0)",
        "message": f"{where}: must be a quantity between {lower} and {upper}",
        "reason": "FieldValueInvalid",
    }


ADMISSION_CEL_RULES: dict[str, list[dict[str, str]]] = {
    "EngineSpec": _managed_flag_rules(),
    "PodSpecOverrides": [
        {
            "rule": "!has(self.labels) || self.labels.all(k, size(k) <= 317 && "
            f"k.matches({_cel_string(QUALIFIED_NAME)}))",
            "message": "pod.labels: keys must be qualified names ([prefix/]name, name <= 63 characters)",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.annotations) || self.annotations.all(k, size(k) <= 317 && "
            f"k.matches({_cel_string(QUALIFIED_NAME)}))",
            "message": "pod.annotations: keys must be qualified names ([prefix/]name, name <= 63 characters)",
            "reason": "FieldValueInvalid",
        },
    ],
    "ResourcesSpec": [
        _quantity_rule("cpu", CPU_MIN, CPU_MAX, "resources.cpu"),
        _quantity_rule("memory", "1Mi", "64Ti", "resources.memory"),
        _quantity_rule("shm", "1Mi", "64Ti", "resources.shm"),
    ],
    "GPUSpec": [_quantity_rule("memory", "1Gi", "2Ti", "gpu.memory")],
    "ModelSpec": [_quantity_rule("weightsPerGPU", "1Mi", "2Ti", "model.weightsPerGPU")],
}
"""CEL rules per model name, merged into ``crd.CEL_RULES`` (bounds as in ``spec.py``'s validators)."""
