"""A GPU product the engine cannot run the model on is avoided by the next attempts (pure).

Records ``status.excludedProducts`` after an ``UnsupportedGPU``-like failure and plans again on another product.
Which products are excluded and why: docs/design/attempts.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ExcludedProduct, Phase, Reason
from ctxfit.catalog import lookup_gpu
from ctxfit.recovery import Failure, FailureKind

from ..settings import Settings
from ..views.pods import GPUNode, eligible_nodes
from .plan import first_plan
from .readback import inputs_from_status
from .status import mark_phase
from .types import EventNote, Outcome, Snapshot

PRODUCT_KINDS = frozenset({FailureKind.UNSUPPORTED_GPU})
"""Failure kinds bound to the GPU product or its compute capability (not to the node, the spec or the model)."""
REASON_CHARS = 512


def capability(product: str, nodes: Iterable[GPUNode]) -> tuple[int, int] | None:
    """Compute capability of ``product``: a node's GFD ``nvidia.com/gpu.compute.*`` labels, else the catalog."""
    for node in nodes:
        if node.product == product and node.compute is not None:
            return node.compute
    entry = lookup_gpu(product)
    return entry.compute_capability if entry is not None else None


def _text(cc: tuple[int, int] | None) -> str | None:
    return f"{cc[0]}.{cc[1]}" if cc is not None else None


def _value(cc: tuple[int, int]) -> float:
    return cc[0] + cc[1] / 10


def to_exclude(failure: Failure, product: str, nodes: Iterable[GPUNode], attempt: int) -> list[ExcludedProduct]:
    """The products of ``nodes`` that ``failure`` on ``product`` rules out, the failed one first
    (docs/design/attempts.md).

    ``failure.numbers``: ``computeCapability`` (the GPU's, major.minor) and ``minimumComputeCapability`` when the
    message states them."""
    listed = list(nodes)
    failed_cc = capability(product, listed)
    if (stated := failure.numbers.get("computeCapability")) is not None:
        failed_cc = (int(stated), round((stated - int(stated)) * 10))
    minimum = failure.numbers.get("minimumComputeCapability")
    shown = f"{product} (compute capability {_text(failed_cc)})" if failed_cc else product
    kind = failure.kind.value
    out = [ExcludedProduct(product=product, compute_capability=_text(failed_cc), failure_kind=kind, attempt=attempt,
                           reason=f"attempt {attempt} failed on {shown} with {kind}"[:REASON_CHARS])]
    for other in sorted({n.product for n in listed if n.product and n.product != product}):
        cc = capability(other, listed)
        if cc is None:
            continue
        if minimum is not None and _value(cc) < minimum - 1e-9:
            why = f"compute capability {_text(cc)} is below the {minimum:.1f} attempt {attempt} on {product} needed"
        elif minimum is None and failed_cc is not None and cc == failed_cc:
            why = f"the same compute capability {_text(cc)} as {product}, where attempt {attempt} failed with {kind}"
        else:
            continue
        out.append(ExcludedProduct(product=other, compute_capability=_text(cc), failure_kind=kind, attempt=attempt,
                                   reason=why[:REASON_CHARS]))
    return out


def move_on(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, failure: Failure,
            node: GPUNode | None, attempt: int, seen: str, now: str) -> bool:
    """After a permanent failure of ``attempt`` on ``node``: exclude the products it rules out and plan on another.

    Returns True when the pass moved on (status and Events say so: the next attempt on another product, or the
    plan's own verdict there); False when the failure is not bound to the product, the spec pins the product,
    the attempt budget is spent or no eligible product remains (the caller ends the server Failed; the
    exclusions it recorded stay in status)."""
    st = out.status
    product = (node.product if node is not None else None) or st.node_product
    if failure.kind not in PRODUCT_KINDS or spec.gpu.product is not None or product is None:
        return False
    known = st.excluded_names()
    new = [e for e in to_exclude(failure, product, snap.nodes, attempt) if e.product not in known]
    if new:
        st.excluded_products = [*(st.excluded_products or []), *new]
    if len(st.attempts) >= min(spec.attempts, settings.max_attempts):
        return False
    avoid = st.excluded_names()
    remaining = [n for n in eligible_nodes(spec, snap.nodes, settings.image_for(spec.engine.kind.value))
                 if n.product not in avoid]
    if not remaining:
        return False
    names = ", ".join(e.product for e in new) or product
    out.events.append(EventNote("Warning", Reason.GPU_PRODUCT_EXCLUDED,
                                f"{seen}; excluded GPU product(s) {names}: "
                                f"{'; '.join(e.reason for e in new)}; planning on another eligible GPU product"))
    st.plan, st.node_product = None, None
    resolved = st.model.resolved if st.model is not None else None
    if first_plan(snap, inputs_from_status(spec, resolved), out, settings, now):
        nxt = st.current_attempt
        assert nxt is not None
        mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING,
                   f"{seen}; excluded {names}; starting attempt {nxt.number} on {st.node_product}", now,
                   snap.generation)
    return True
