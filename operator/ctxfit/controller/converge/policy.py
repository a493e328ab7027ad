"""Operator-side policy: which images, tolerations and Secret references an InferenceServer may use.
Pure; the settings come from ``CTXFIT_*`` (``settings.py``, chart ``policy.*``).

The permission model (README "Security"): creating an InferenceServer is creating pods in its
namespace; the chart's ``ctxfit-edit`` ClusterRole aggregates into ``edit``/``admin``, so by default only
people who may already create pods there may create servers. These settings narrow what a server may
ask for, for clusters where that is not enough:

- ``CTXFIT_ALLOWED_IMAGE_PREFIXES``: the container image (``spec.engine.image``, else the operator default,
  else the engine's official image) must start with one of these prefixes (empty: any image);
- ``CTXFIT_ALLOW_WILDCARD_TOLERATIONS=false``: refuse a toleration without a key (operator Exists with no
  key tolerates every taint, e.g. control-plane nodes);
- ``CTXFIT_ALLOWED_TOLERATION_KEYS``: toleration keys allowed (empty: any key);
- ``CTXFIT_ALLOW_SECRET_ENV=false``: refuse ``engine.env[].valueFrom.secretKeyRef``.

A refused server is Failed with ``Admitted`` False (reason ``RefusedByPolicy``), a Warning Event, and no
Deployment (an existing one is scaled to zero). A server refused before it was planned starts once the
settings allow it; one refused later (settings narrowed) starts again after a change of its spec.
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.render.deployment import engine_image

from ..settings import Settings


def refusal(spec: InferenceServerSpec, settings: Settings) -> str | None:
    """The first policy violation of ``spec`` as one sentence, None when the spec is allowed."""
    image = engine_image(spec, settings.image_for(spec.engine.kind.value))
    prefixes = settings.allowed_image_prefixes
    if prefixes and not any(image.startswith(prefix) for prefix in prefixes):
        return f"engine image {image!r} is not under an allowed prefix ({', '.join(prefixes)})"
    for i, toleration in enumerate(spec.pod.tolerations):
        if not toleration.key and not settings.allow_wildcard_tolerations:
            return f"pod.tolerations[{i}]: a toleration without a key (tolerates every taint) is not allowed"
        allowed = settings.allowed_toleration_keys
        if allowed and toleration.key and toleration.key not in allowed:
            return f"pod.tolerations[{i}]: key {toleration.key!r} is not allowed ({', '.join(allowed)})"
    if not settings.allow_secret_env:
        for var in spec.engine.env:
            if var.value_from is not None and var.value_from.secret_key_ref is not None:
                return f"engine.env {var.name}: Secret references are not allowed"
    return None
