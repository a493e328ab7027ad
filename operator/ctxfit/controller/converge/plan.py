"""Planning in the pass (pure): choose the node, plan the spec on it, start attempt 1; re-plan with a pin for
the recovery policy. ``spec_key`` says what the plan and the attempt history depend on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import BudgetBytes, BudgetExtra, EffectiveStatus, Phase, PlanStatus, Reason
from ctxfit.budget.calibrate import CalibrationTable
from ctxfit.budget.planner import Plan, plan
from ctxfit.vocab.inputs import PlanInputError, check_pipeline, known_layers
from ctxfit.vocab.modelsource import ModelSource

from ..settings import Settings
from ..views.pods import GPUNode, PodView, describe_nodes, eligible_nodes
from . import attempts, status
from .groups import best_group_node, group_shortage
from .readback import inputs_from_status
from .status import mark_failed_spec, mark_no_node, mark_phase
from .types import EventNote, Outcome, Snapshot

HISTORY_NEUTRAL_FIELDS = ("replicas", "attempts", "pod", "autoscaling", "routing")
"""Spec fields whose change keeps the plan and the attempt history (they do not change what fits; adding or
removing ``autoscaling`` restarts no engine; joining or leaving a pool keeps what the server learnt)."""


def spec_key(spec: InferenceServerSpec) -> str:
    """Digest of the spec fields the plan and attempt history depend on (all but ``HISTORY_NEUTRAL_FIELDS``, and
    the weights claim's ``retain``: it changes the claim's ownerReference, never the pod; hashed as ``false`` so
    the digest of a server without it is the one it always had)."""
    wire = spec.to_wire()
    for name in HISTORY_NEUTRAL_FIELDS:
        wire.pop(name, None)
    template = ((wire.get("model") or {}).get("cache") or {}).get("volumeClaimTemplate")  # type: ignore[attr-defined]
    if isinstance(template, dict) and "retain" in template:
        template["retain"] = False
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()[:16]


def plan_for(spec: InferenceServerSpec, node: GPUNode | None, settings: Settings,
             pin: dict[str, Any] | None = None, calibration: CalibrationTable | None = None,
             model: ModelSource | None = None, draft: ModelSource | None = None,
             adapters: dict[str, ModelSource] | None = None) -> Plan:
    return plan(
        spec,
        model=model,
        draft_model=draft,
        adapter_configs={name: a.config for name, a in adapters.items()} if adapters else None,
        node_product=node.product if node else None,
        node_gpu_memory_mib=node.gpu_memory_mib if node else None,
        node_compute_capability=node.compute if node else None,
        node_gpus=node.gpus if node else None,
        default_headroom=settings.default_headroom,
        pin=pin,
        suggest=pin is None,
        calibration=calibration,
    )


def first_plan(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, now: str,
               model: ModelSource | None = None, draft: ModelSource | None = None,
               adapters: dict[str, ModelSource] | None = None) -> bool:
    """Choose a node (of a product ``status.excludedProducts`` does not name) and plan (with the resolved
    ``model``, ``draft`` and adapters, when read: ``converge.resolution``). Returns True when the next attempt (1, or
    N+1 after ``products.move_on``) was created (False: waiting or failed); the plan, when one was made, is
    ``out.plan_result``."""
    st = out.status
    try:  # a verdict the nodes cannot change comes before waiting for nodes (pipeline 64 on 32 layers): the
        # planner's own DoesNotFit verdict (budget.parallel), as the CLI says it, not a spec error
        check_pipeline(spec, known_layers(spec) if model is None else _config_layers(model.config))
    except PlanInputError as exc:
        status.mark_does_not_fit(out, str(exc), now, snap.generation)
        return False
    operator_image = settings.image_for(spec.engine.kind.value)
    avoid = st.excluded_names()
    listed = eligible_nodes(spec, snap.nodes, operator_image)
    nodes = [n for n in listed if n.product not in avoid]
    shortage = group_shortage(spec, nodes)
    if not nodes or shortage:
        why = shortage or describe_nodes(spec, snap.nodes, operator_image)
        if listed and not nodes:
            why = f"every eligible GPU product is excluded after failed attempts: {', '.join(sorted(avoid))}"
        mark_no_node(out, why, now, snap.generation)
        out.waiting_for_nodes = True
        out.requeue(settings.node_recheck_seconds)
        return False
    node = best_group_node(spec, nodes)
    try:
        result = plan_for(spec, node, settings, calibration=snap.calibration, model=model, draft=draft,
                          adapters=adapters)
        if result.capability_refusals and spec.gpu.product is None:
            node, result = capable_product(spec, nodes, node, result, settings, snap.calibration, model, draft,
                                           adapters)
    except (PlanInputError, ValueError) as exc:
        mark_failed_spec(out, str(exc), now, snap.generation)
        return False
    except (TypeError, KeyError, ArithmeticError, RecursionError) as exc:  # a model's files are input too: a shape
        # the planner did not expect is this server's failure (a condition and an Event), never the operator's
        mark_failed_spec(out, f"the model's config.json or checkpoint could not be planned ({type(exc).__name__}: "
                              f"{str(exc)[:200]})", now, snap.generation)
        return False
    out.plan_result = result
    st.node_product = spec.gpu.product or node.product
    st.plan = plan_status(result, spec, node, settings.default_headroom)
    if not result.fits:
        status.mark_does_not_fit(out, result, now, snap.generation)
        return False
    status.mark_fits(out, result, spec, st.plan.headroom, now, snap.generation)
    first = attempts.start(out, EffectiveStatus.of(result.effective), now)
    out.events.append(EventNote(
        "Normal", Reason.PLANNED,
        f"planned context {result.context_length} on {st.node_product} (predicted max "
        f"{result.max_context_length}, {result.kv_bytes_per_token} B/token/GPU): {'; '.join(result.reasons)}"))
    mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, f"starting attempt {first.number}", now, snap.generation)
    return True


def capable_product(spec: InferenceServerSpec, nodes: list[GPUNode], node: GPUNode, result: Plan,
                    settings: Settings, calibration: CalibrationTable | None,
                    model: ModelSource | None, draft: ModelSource | None = None,
                    adapters: dict[str, ModelSource] | None = None) -> tuple[GPUNode, Plan]:
    """An unpinned spec whose plan on ``node``'s product the compute-capability rules refuse
    (``Plan.capability_refusals``, ``budget.capability``): the best node of the next eligible product (best-first,
    with enough nodes for a group) whose plan they do not refuse, its reasons first saying which products were
    skipped and why; ``node`` and ``result`` when every product is refused."""
    skipped = [f"skipped {node.product}: {'; '.join(result.capability_refusals)}"]
    counts = Counter(n.product for n in nodes)
    for product in dict.fromkeys(n.product for n in nodes):
        if product == node.product or counts[product] < spec.nodes:
            continue
        candidate = next(n for n in nodes if n.product == product)
        other = plan_for(spec, candidate, settings, calibration=calibration, model=model, draft=draft,
                         adapters=adapters)
        if other.capability_refusals:
            skipped.append(f"skipped {product}: {'; '.join(other.capability_refusals)}")
            continue
        return candidate, dataclasses.replace(other, reasons=[*skipped, *other.reasons])
    return node, result


def node_of(snap: Snapshot, pod: PodView | None, product: str | None) -> GPUNode | None:
    by_name = {n.name: n for n in snap.nodes}
    if pod is not None and pod.node in by_name:
        return by_name[pod.node]
    return next((n for n in snap.nodes if n.product == product), None)


def replan(spec: InferenceServerSpec, pin: dict[str, Any], node: GPUNode | None,
           settings: Settings, out: Outcome) -> tuple[int, str]:
    """A re-plan of the same spec (step-down, verify): the resolved architecture and weights come back from
    ``status.model.resolved`` (no Hub request)."""
    model = out.status.model
    spec = inputs_from_status(spec, model.resolved if model is not None else None,
                              model.draft if model is not None else None,
                              model.adapters if model is not None else None)
    result = plan_for(spec, node, settings, pin=pin)
    return result.context_length, (result.reasons[-1] if result.reasons else "")


def plan_status(result: Plan, spec: InferenceServerSpec, node: GPUNode | None, default_headroom: float) -> PlanStatus:
    """The planner's result as ``status.plan`` (bytes as integers)."""
    t = result.per_gpu
    return PlanStatus(
        fits=result.fits,
        target_fits=result.target_fits,
        context_length=result.context_length,
        max_context_length=result.max_context_length,
        kv_bytes_per_token=result.kv_bytes_per_token,
        kv_pool_bytes=result.kv_pool_bytes,
        headroom=spec.context.headroom if spec.context.headroom is not None else default_headroom,
        per_gpu=BudgetBytes(
            total_bytes=t.total_bytes, usable_bytes=t.usable_bytes, weights_bytes=t.weights_bytes,
            activation_bytes=t.activation_bytes, cuda_graph_bytes=t.cuda_graph_bytes,
            other_bytes=t.other_bytes, kv_cache_bytes=t.kv_cache_bytes,
            extras=[BudgetExtra(term=e.label, bytes=e.bytes, in_budget=e.in_budget, host_memory=e.host,
                                source=e.source[:512]) for e in t.extras],
        ),
        gpu_product=spec.gpu.product or (node.product if node else None),
        gpu_memory_bytes=t.total_bytes,
        reasons=list(result.reasons),
        calibration_key=result.calibration_key,
        calibration_bytes=result.calibration_bytes or None,
    )


def _config_layers(config: dict[str, object]) -> int | None:
    """``num_hidden_layers`` of a resolved config.json (its ``text_config`` for a multimodal model), None when
    it does not say (``resolve_inputs`` checks again with the layers it derives)."""
    text = config.get("text_config")
    layers = (text if isinstance(text, dict) else config).get("num_hidden_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) else None
