"""A GPU product the engine cannot run the model on: an unpinned spec moves to another eligible product
(``converge/products.py``); a pinned one, or one with no product left, ends Failed as before."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from ctxfit.api.status import AttemptOutcome, Phase, Reason
from ctxfit.controller.converge import Outcome, converge
from ctxfit.controller.converge.products import to_exclude
from ctxfit.controller.telemetry.decision_log import decisions
from ctxfit.controller.views.pods import GPUNode
from ctxfit.recovery import Failure, FailureKind

from tests.unit.controller.builders import (
    H100,
    H200,
    NOW,
    RTX,
    SETTINGS,
    applied,
    diagnosed,
    never,
    pod,
    snapshot,
    stored,
)
from tests.unit.controller.builders import spec as manifest_spec

L4 = GPUNode("l4-0", "NVIDIA-L4", 23034, 1, (8, 9), 64 << 30, True)
NODES = (H200, RTX, H100, L4)
MXFP8 = Failure(  # vLLM 0.19.0 config/vllm.py: a ModelOpt MXFP8 checkpoint on a Hopper GPU
    FailureKind.UNSUPPORTED_GPU, {"computeCapability": 9.0, "minimumComputeCapability": 10.0},
    "ValueError: The quantization method modelopt_mxfp8 is not supported for the current GPU. Minimum capability: "
    "100. Current capability: 90.")
NO_BACKEND = Failure(  # vLLM 0.19 attention selector, DeepSeek sparse MLA on a GPU without FlashMLA sparse kernels
    FailureKind.UNSUPPORTED_GPU, {},
    "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
    "dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=None, use_mla=True, has_sink=False, use_sparse=True). "
    "Reasons: {FLASH_ATTN_MLA: [sparse not supported, compute capability not supported], FLASHMLA_SPARSE: "
    "[compute capability not supported], TRITON_MLA: [sparse not supported]}.")


def unpinned(**changes: Any) -> dict[str, Any]:
    body = manifest_spec("llama31-8b-h100.yaml")
    body["gpu"].pop("product")
    body.update(changes)
    return body


def first(body: dict[str, Any], nodes: tuple[GPUNode, ...] = NODES) -> Outcome:
    out = converge(snapshot(body, nodes=nodes), SETTINGS, never)
    assert out.status.node_product == nodes[0].product  # the largest GPU memory first
    return out


def fail_on(body: dict[str, Any], before: Outcome, node: GPUNode, failure: Failure,
            nodes: tuple[GPUNode, ...] = NODES) -> Outcome:
    failed = replace(pod(before.status.attempts[-1].number, terminated="Error"), node=node.name)
    return converge(snapshot(body, stored(before.status), pods=(failed,), nodes=nodes, deployment=applied(before),
                             now=NOW + timedelta(seconds=30)), SETTINGS, diagnosed(failure))


def selector(out: Outcome) -> str:
    assert out.deployment is not None
    return str(out.deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"])


def test_a_minimum_capability_excludes_every_product_below_it_and_moves_on() -> None:
    body = unpinned()
    start = first(body)
    moved = fail_on(body, start, H200, MXFP8)
    st = moved.status
    assert [(e.product, e.compute_capability, e.failure_kind, e.attempt) for e in st.excluded_products or []] == [
        ("NVIDIA-H200", "9.0", "UnsupportedGPU", 1), ("NVIDIA-H100-80GB-HBM3", "9.0", "UnsupportedGPU", 1),
        ("NVIDIA-L4", "8.9", "UnsupportedGPU", 1)]
    assert st.excluded_products is not None and "below the 10.0" in st.excluded_products[1].reason
    one, two = st.attempts
    assert one.outcome is AttemptOutcome.FAILED and one.failure_kind == "UnsupportedGPU" and one.node == "h200-0"
    assert two.outcome is AttemptOutcome.RUNNING and two.number == 2
    assert st.node_product == RTX.product and st.plan is not None and st.plan.gpu_product == RTX.product
    assert st.phase is Phase.STARTING and "starting attempt 2 on " + RTX.product in (st.message or "")
    assert selector(moved) == RTX.product
    reasons = [e.reason for e in moved.events]
    assert Reason.GPU_PRODUCT_EXCLUDED in reasons and Reason.PLANNED in reasons
    assert Reason.PERMANENT_FAILURE not in reasons
    logged = decisions(start.status, moved)
    assert [d.verb for d in logged] == ["failed", "moved", "started"]
    assert logged[1].message.startswith(f"moved from NVIDIA-H200 to {RTX.product} (excluded: NVIDIA-H100")
    wire = st.to_wire()["excludedProducts"]
    assert wire[0] == {"product": "NVIDIA-H200", "computeCapability": "9.0", "failureKind": "UnsupportedGPU",
                       "attempt": 1, "reason": "attempt 1 failed on NVIDIA-H200 (compute capability 9.0) with "
                                               "UnsupportedGPU"}


def test_without_a_minimum_the_same_capability_is_excluded() -> None:
    body = unpinned()
    moved = fail_on(body, first(body), H200, NO_BACKEND)
    assert [e.product for e in moved.status.excluded_products or []] == ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"]
    assert moved.status.node_product == RTX.product  # L4 (8.9) was not ruled out, but the RTX is the larger


def test_a_second_pass_repeats_nothing_and_the_next_product_becomes_ready() -> None:
    body = unpinned()
    moved = fail_on(body, first(body), H200, MXFP8)
    again = converge(snapshot(body, stored(moved.status), nodes=NODES, deployment=applied(moved),
                              now=NOW + timedelta(seconds=31)), SETTINGS, never)
    assert again.status.excluded_products == moved.status.excluded_products
    assert Reason.GPU_PRODUCT_EXCLUDED not in [e.reason for e in again.events]
    ready = replace(pod(2, ready=True), node=RTX.name)
    assert again.deployment is None  # the Deployment the move rendered is the one wanted
    served = converge(snapshot(body, stored(again.status), pods=(ready,), nodes=NODES, deployment=applied(moved),
                               now=NOW + timedelta(seconds=60)), SETTINGS, never)
    assert served.status.phase is Phase.READY and served.status.node_product == RTX.product


def test_a_pinned_product_still_ends_failed() -> None:
    body = manifest_spec("llama31-8b-h100.yaml")
    start = converge(snapshot(body, nodes=NODES), SETTINGS, never)
    failed = fail_on(body, start, H100, MXFP8)
    st = failed.status
    assert st.phase is Phase.FAILED and st.excluded_products is None and len(st.attempts) == 1
    assert failed.scale_to_zero or (failed.deployment or {}).get("spec", {}).get("replicas") == 0


def test_no_product_left_is_permanent_and_says_what_was_excluded() -> None:
    body = unpinned()
    hopper = (H200, H100)
    failed = fail_on(body, first(body, hopper), H200, MXFP8, hopper)
    st = failed.status
    assert st.phase is Phase.FAILED and len(st.attempts) == 1
    assert [e.product for e in st.excluded_products or []] == ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"]
    ready = next(c for c in st.conditions if c.type.value == "Ready")
    assert ready.reason is Reason.PERMANENT_FAILURE
    assert "no other eligible GPU product (excluded: NVIDIA-H100-80GB-HBM3, NVIDIA-H200)" in ready.message


def test_the_attempt_budget_still_ends_it() -> None:
    body = unpinned(attempts=1)
    failed = fail_on(body, first(body), H200, MXFP8)
    assert failed.status.phase is Phase.FAILED and len(failed.status.attempts) == 1


def test_a_spec_change_clears_the_exclusions() -> None:
    body = unpinned()
    moved = fail_on(body, first(body), H200, MXFP8)
    edited = unpinned(context={"target": 65536, "minimum": 8192})
    again = converge(snapshot(edited, stored(moved.status), nodes=NODES, deployment=applied(moved), generation=2,
                              now=NOW + timedelta(seconds=40)), SETTINGS, never)
    assert again.status.excluded_products is None
    assert again.status.node_product == H200.product and [a.number for a in again.status.attempts] == [1]


def test_other_failures_exclude_nothing() -> None:
    body = unpinned()
    oom = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 50000}, "max model len")
    stepped = fail_on(body, first(body), H200, oom)
    assert stepped.status.excluded_products is None and stepped.status.node_product == H200.product


def test_to_exclude_keeps_products_of_unknown_capability() -> None:
    odd = GPUNode("odd-0", "Vendor-Unknown-GPU", 40000, 8, None, 1 << 40, True)
    out = to_exclude(NO_BACKEND, H200.product, (H200, odd, H100), 3)
    assert [(e.product, e.attempt) for e in out] == [("NVIDIA-H200", 3), ("NVIDIA-H100-80GB-HBM3", 3)]
    assert [e.product for e in to_exclude(NO_BACKEND, odd.product, (H200, odd), 1)] == ["Vendor-Unknown-GPU"]


V100 = GPUNode("v100-0", "Tesla-V100-SXM2-32GB", 32768, 8, (7, 0), 512 << 30, True)
T4 = GPUNode("t4-0", "Tesla-T4", 15360, 4, (7, 5), 256 << 30, True)


def bf16(**changes: Any) -> dict[str, Any]:
    body = unpinned(**changes)
    body["engine"]["args"] = ["--dtype", "bfloat16"]
    return body


def test_before_any_start_a_product_the_capability_rules_refuse_is_skipped() -> None:
    """vLLM runs --dtype bfloat16 only from compute capability 8.0 (``budget.capability``): the V100, the larger GPU,
    is skipped before attempt 1 and the plan is made on the L4."""
    out = converge(snapshot(bf16(), nodes=(V100, L4)), SETTINGS, never)
    st = out.status
    assert st.node_product == L4.product and st.plan is not None and st.plan.fits
    assert [a.number for a in st.attempts] == [1] and st.excluded_products is None
    assert selector(out) == L4.product
    assert st.plan.reasons[0].startswith("skipped Tesla-V100-SXM2-32GB: engine.args sets --dtype bfloat16")
    planned = next(e for e in out.events if e.reason is Reason.PLANNED)
    assert "skipped Tesla-V100-SXM2-32GB" in planned.message


def test_every_product_refused_is_the_first_products_verdict() -> None:
    out = converge(snapshot(bf16(), nodes=(V100, T4)), SETTINGS, never)
    st = out.status
    assert st.node_product == V100.product and st.plan is not None and not st.plan.fits and not st.attempts
    assert out.deployment is None or out.deployment["spec"]["replicas"] == 0


def test_a_pinned_product_is_never_swapped_for_a_capable_one() -> None:
    body = bf16()
    body["gpu"]["product"] = V100.product
    out = converge(snapshot(body, nodes=(V100, L4)), SETTINGS, never)
    assert out.status.node_product == V100.product and out.status.plan is not None and not out.status.plan.fits
