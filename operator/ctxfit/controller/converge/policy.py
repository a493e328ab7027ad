"""Operator-side policy: which images, tolerations and Secret references an InferenceServer may use
(issue 10, class 7). Pure; the settings come from ``CTXFIT_*`` (``settings.py``, chart ``policy.*``).

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

from typing import TYPE_CHECKING

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType, Phase, Reason
from ctxfit.engines import get_engine

from ..settings import Settings
from .status import EventNote, mark_phase

if TYPE_CHECKING:
    from .flow import Outcome


def image_of(spec: InferenceServerSpec, settings: Settings) -> str:
    """The image the renderer will use (``render.deployment.image_for``'s order)."""
    engine = get_engine(spec.engine.kind)
    return spec.engine.image or settings.image_for(spec.engine.kind.value) or engine.default_image(spec.engine.version)


def refusal(spec: InferenceServerSpec, settings: Settings) -> str | None:
    """The first policy violation of ``spec`` as one sentence, None when the spec is allowed."""
    image = image_of(spec, settings)
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


def mark_refused(out: Outcome, message: str, now: str, generation: int,
                 reason: Reason = Reason.REFUSED_BY_POLICY) -> None:
    """Failed, ``Admitted`` False, Ready False (reason RefusedByPolicy, or PoolModelMismatch when the server
    disagrees with its InferencePool, ``converge/routing.py``); a Warning Event when new."""
    st = out.status
    old = st.condition(ConditionType.ADMITTED)
    text = f"refused by operator policy: {message}" if reason is Reason.REFUSED_BY_POLICY else f"refused: {message}"
    if old is None or old.status != "False" or old.message != text:
        out.events.append(EventNote("Warning", reason, text))
    st.set_condition(ConditionType.ADMITTED, "False", reason, text, now=now, generation=generation)
    mark_phase(out, Phase.FAILED, reason, text, now, generation)
    st.endpoint = None


def mark_admitted(out: Outcome, now: str, generation: int) -> None:
    """A previously refused server is allowed now: ``Admitted`` True (set only once it was False)."""
    old = out.status.condition(ConditionType.ADMITTED)
    if old is not None and old.status != "True":
        out.status.set_condition(ConditionType.ADMITTED, "True", Reason.ALLOWED_BY_POLICY,
                                 "allowed by operator policy" if old.reason is Reason.REFUSED_BY_POLICY
                                 else "admitted: nothing refuses it any more", now=now, generation=generation)
