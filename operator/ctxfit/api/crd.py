"""The InferenceServer CustomResourceDefinition, generated from the pydantic models (one source of truth).

``build_crd()`` returns the ``apiextensions.k8s.io/v1`` CRD as a dict; ``ctxfit crd`` prints it and
``crds/inferenceservers.ctxfit.io.yaml`` is its checked-in output (a test fails on drift).

Conversion from pydantic's JSON Schema to a Kubernetes *structural* schema:
- ``$ref``/``$defs`` inlined (Kubernetes has no references); ``title``/``default`` dropped (defaults
  stay in the models, so the stored object is what the user wrote);
- ``anyOf [X, null]`` -> X with ``nullable: true``; ``const`` -> one-value ``enum``;
- ``exclusiveMinimum: n`` (2020-12) -> ``minimum: n, exclusiveMinimum: true`` (OpenAPI v3.0);
- ``additionalProperties: false`` dropped (Kubernetes prunes unknown fields instead);
  free-form ``dict[str, Any]`` -> ``x-kubernetes-preserve-unknown-fields``;
- quantities -> ``x-kubernetes-int-or-string`` with the Kubernetes quantity pattern;
- cross-field rules from the models' validators -> ``x-kubernetes-validations`` (CEL), per model.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from .admission import ADMISSION_CEL_RULES, ROOT_CEL_RULES
from .autoscaling import AUTOSCALING_CEL_RULES, SPEC_CEL_RULES
from .fielddocs import document_schema
from .kubetypes import KUBE_CEL_RULES
from .model_cache import CACHE_CEL_RULES
from .quantity import _canonical_quantity
from .routing import POOL_PORT_CEL_RULES, ROUTING_CEL_RULES
from .spec import API_GROUP, API_VERSION, KIND, PLURAL, InferenceServerSpec
from .speculative import SPECULATIVE_CEL_RULES
from .status import InferenceServerStatus

SHORT_NAMES = ["infsrv"]
CATEGORIES = ["ctxfit"]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The pattern controller-gen emits for ``resource.Quantity`` (apimachinery ``quantity.go``)."""


def _present(path: str) -> str:
    """CEL: the optional field at ``self.<path>`` is set (parents checked one by one).

    Spec fields are not ``nullable``, so the API server prunes an explicit null and ``has()`` suffices.
    """
    parts = path.split(".")
    checks = []
    for i in range(1, len(parts) + 1):
        parent = ".".join(["self", *parts[: i - 1]])
        checks.append(f"has({parent}.{parts[i - 1]})")
    return "(" + " && ".join(checks) + ")"


def _or_one(path: str) -> str:
    return f"({_present(path)} ? self.{path} : 1)"


CEL_RULES: dict[str, list[dict[str, str]]] = {
    "InferenceServerSpec": [
        {
            "rule": f"{_or_one('parallelism.tensor')} * {_or_one('parallelism.pipeline')} * "
            f"{_or_one('parallelism.data')} == self.gpu.count * {_or_one('nodes')}",
            "message": "parallelism: tensor x pipeline x data must equal gpu.count x nodes",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"self.engine.kind != 'vllm' || !{_present('memory.memFractionStatic')}",
            "message": "memory.memFractionStatic: is an SGLang setting; vLLM uses gpuMemoryUtilization",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"self.engine.kind != 'sglang' || !{_present('memory.gpuMemoryUtilization')}",
            "message": "memory.gpuMemoryUtilization: is a vLLM setting; SGLang uses memFractionStatic",
            "reason": "FieldValueForbidden",
        },
        *SPEC_CEL_RULES,
        *POOL_PORT_CEL_RULES,
    ],
    **CACHE_CEL_RULES,
    **AUTOSCALING_CEL_RULES,
    **ROUTING_CEL_RULES,
    "ContextSpec": [
        {
            "rule": f"!{_present('minimum')} || !{_present('target')} || self.minimum <= self.target",
            "message": "context.minimum must not be above context.target",
            "reason": "FieldValueInvalid",
        },
    ],
    "Architecture": [
        {
            "rule": f"{_present('kvBytesPerToken')} || ({_present('attention')} && {_present('numLayers')})",
            "message": "architecture: give attention and numLayers, or a measured kvBytesPerToken",
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"{_present('kvBytesPerToken')} || !{_present('attention')} || self.attention != 'mla' || "
            f"({_present('kvLoraRank')} && {_present('qkRopeHeadDim')})",
            "message": "architecture: MLA attention needs kvLoraRank and qkRopeHeadDim",
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"{_present('kvBytesPerToken')} || !{_present('attention')} || self.attention == 'mla' || "
            f"({_present('numKVHeads')} && {_present('headDim')})",
            "message": "architecture: mha/gqa attention needs numKVHeads and headDim",
            "reason": "FieldValueRequired",
        },
    ],
}
"""CEL rules per model name: the cross-field checks of ``spec.py``'s validators the API server can run."""

CEL_RULES.update(KUBE_CEL_RULES)
CEL_RULES.update(ADMISSION_CEL_RULES)
CEL_RULES.update(SPECULATIVE_CEL_RULES)


class _KubeJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, with quantities marked as int-or-string."""

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        if schema["function"].get("function") is _canonical_quantity:
            return {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": QUANTITY_PATTERN,
            }
        return super().function_before_schema(schema)

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        """Pydantic's model schema, with every field's description (``fielddocs.document_schema``)."""
        json_schema = super().model_schema(schema)
        document_schema(json_schema, schema["cls"])
        return json_schema


_DROP = {"title", "default", "additionalProperties", "$defs", "examples"}


def _clean_description(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"``([^`]*)``", r"`\1`", text)).strip()


def _structural(node: dict[str, Any], defs: dict[str, Any], nullable: bool) -> dict[str, Any]:  # noqa: C901 - one case per JSON-schema form
    """Convert one JSON-schema node (recursively) to a Kubernetes structural schema node.

    ``nullable``: mark ``Optional`` fields ``nullable: true`` (status, where the operator writes nulls);
    otherwise the API server prunes nulls, which keeps CEL rules on the spec simple.
    """
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        inlined = _structural(merged, defs, nullable)
        rules = CEL_RULES.get(name)
        if rules:
            inlined["x-kubernetes-validations"] = [dict(r) for r in rules]
        return inlined
    any_of = node.get("anyOf")
    if any_of and not node.get("x-kubernetes-int-or-string"):
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) == 1 and len(any_of) == 2:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            inner = _structural({**non_null[0], **rest}, defs, nullable)
            if nullable:
                inner["nullable"] = True
            return inner
        raise ValueError(f"unsupported anyOf in CRD schema: {any_of}")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "description":
            out[key] = _clean_description(value)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out[key] = {name: _structural(sub, defs, nullable) for name, sub in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs, nullable)
        else:
            out[key] = value
    extra = node.get("additionalProperties")
    if node.get("type") == "object" and "properties" not in node:
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = _structural(extra, defs, nullable)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def model_schema(model: type[BaseModel], *, nullable: bool = False) -> dict[str, Any]:
    """The structural schema of one pydantic model (camelCase wire names)."""
    raw = model.model_json_schema(by_alias=True, schema_generator=_KubeJsonSchema, mode="validation")
    return _structural(raw, raw.get("$defs", {}), nullable)


def _status_schema() -> dict[str, Any]:
    schema = model_schema(InferenceServerStatus, nullable=True)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine.kind"},
    {"name": "GPUs", "type": "integer", "jsonPath": ".spec.gpu.count"},
    {
        "name": "Context",
        "type": "integer",
        "jsonPath": ".status.contextLength",
        "description": "Context length the server runs at (tokens); empty while Failed (no replica runs)",
    },
    {
        "name": "KV Tokens",
        "type": "integer",
        "jsonPath": ".status.kvCacheTokens",
        "description": "KV cache tokens the engine of the attempt in force reported at start-up; empty while Failed "
                       "or before the newest attempt reported",
    },
    {
        "name": "Target",
        "type": "integer",
        "jsonPath": ".spec.context.target",
        "description": "Requested context length (tokens)",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.replicas",
        "description": "Engine replicas the workload has now (set by the autoscaler when spec.autoscaling is set)",
    },
    {
        "name": "Pool",
        "type": "string",
        "jsonPath": ".status.routing.pool",
        "description": "InferencePool the server's engine pods serve in (spec.routing.inferencePool)",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


API_VERSION_DESCRIPTION = f"Versioned schema of this object: `{API_GROUP}/{API_VERSION}`."
KIND_DESCRIPTION = f"The REST resource this object represents: `{KIND}`."
"""Descriptions of the top-level keys, worded as in the Kubernetes API conventions. ``metadata`` gets none:
the API server rejects a CRD whose schema specifies anything for it but name and generateName."""


def build_crd() -> dict[str, Any]:
    """The complete CRD (``apiextensions.k8s.io/v1``), deterministic for a given code version."""
    spec_schema = model_schema(InferenceServerSpec)
    spec_schema["x-kubernetes-validations"] = [dict(r) for r in CEL_RULES["InferenceServerSpec"]]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{API_GROUP}",
            "labels": {"app.kubernetes.io/name": "ctxfit", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": KIND.lower(),
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in PRINTER_COLUMNS],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "An LLM inference server (vLLM or SGLang) sized to the GPUs it lands on.",
                            "properties": {
                                "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
                                "kind": {"type": "string", "description": KIND_DESCRIPTION},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": _status_schema(),
                            },
                            "required": ["spec"],
                            "x-kubernetes-validations": [dict(r) for r in ROOT_CEL_RULES],
                        }
                    },
                }
            ],
        },
    }
