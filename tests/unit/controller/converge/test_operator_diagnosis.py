"""Failure kinds on the operator path: the controller's ``reconcile.diagnose`` (pod termination -> Observation,
with the pod's node) -> ``classify`` -> ``converge`` -> ``attempts.fail`` -> ``decide``.

Each case is real engine wording; the status the controller writes is checked (attempt kind, evidence,
the next attempt's knobs, or phase Failed with the explanation).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import EngineKind
from ctxfit.api.status import InferenceServerStatus
from ctxfit.controller.converge import Outcome, converge
from ctxfit.controller.reconcile import diagnose as controller_diagnose
from ctxfit.controller.views.pods import PodView, Termination
from ctxfit.recovery import Failure

from tests.unit.controller.builders import H100, NOW, RTX, SETTINGS, applied, never, pod, snapshot, spec
from tests.unit.controller.converge.diagnosiskit import check_through_the_operator_policy
from tests.unit.controller.fakekube import FakeKube, runtime
from tests.unit.recovery.casekit import CASES, IDS


def failed_pod(message: str, node: str = "rtx-0", attempt: int = 1) -> PodView:
    return replace(pod(attempt, terminated="Error"), termination=Termination("Error", 1, message, None), node=node)


def run(message: str, *, node: str = "rtx-0", body: dict[str, Any] | None = None,
        status: InferenceServerStatus | None = None, attempt: int = 1) -> tuple[Outcome, list[Failure]]:
    """One failed start of ``attempt`` through the controller; returns the outcome and what was diagnosed."""
    body = body or spec()
    rt = runtime(FakeKube(None), SETTINGS)
    seen: list[Failure] = []

    def diagnose(p: PodView, restarts: int) -> Failure:
        failure = controller_diagnose(rt, "ns", p, EngineKind.VLLM)
        seen.append(failure)
        return failure

    if status is None:
        start = converge(snapshot(body), SETTINGS, never)
        status, deployment = start.status, applied(start)
    else:
        deployment = None
    # the pod's node exists (a pod on a node that is gone is lost, not failed: views.pod_wait.lost)
    nodes = (RTX, H100) if node in (RTX.name, H100.name) else (replace(RTX, name=node), H100)
    out = converge(snapshot(body, status, pods=(failed_pod(message, node, attempt),), deployment=deployment,
                            nodes=nodes, now=NOW + timedelta(seconds=30 * attempt)), SETTINGS, diagnose)
    return out, seen


def test_invalid_parallelism_is_failed_at_once_with_the_sizes_that_divide() -> None:
    out, seen = run("ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3).")
    assert seen[0].kind.value == "InvalidParallelism"
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert len(st.attempts) == 1 and st.attempts[0].failure_kind == "InvalidParallelism"
    explanation = st.attempts[0].explanation or ""
    assert "1, 2, 4, 8" in explanation and "attentionHeads 64" in explanation


@pytest.mark.parametrize("message", [
    "RuntimeError: The NVIDIA driver on your system is too old (found version 12040). Please update your GPU driver",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non "
    "supported HW",
    "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
], ids=["torch-too-old", "error-804", "insufficient-driver"])
def test_cuda_driver_too_old_is_permanent_and_names_the_node(message: str) -> None:
    out, seen = run(message, node="gpu-node-17")
    assert seen[0].kind.value == "CUDADriverTooOld" and seen[0].node == "gpu-node-17"
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert "node gpu-node-17" in (st.attempts[0].explanation or "")


def test_mamba_cache_too_small_caps_max_num_seqs_and_keeps_the_context() -> None:
    out, seen = run("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (614). Each decode "
                    "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed.")
    assert seen[0].kind.value == "MambaCacheTooSmall"
    first, second = out.status.attempts
    assert first.failure_kind == "MambaCacheTooSmall"
    assert second.effective.max_num_seqs <= 614
    assert second.effective.context_length == first.effective.context_length


def test_bare_oom_after_the_kv_pool_lowers_the_utilization() -> None:
    body = spec()
    start = converge(snapshot(body), SETTINGS, never)
    util = start.status.attempts[0].effective.gpu_memory_utilization
    assert util is not None
    total_gib = 95.59
    in_use = util * total_gib
    message = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 3 has a total capacity "
               f"of {total_gib:.2f} GiB of which 17.06 MiB is free. Including non-PyTorch memory, this process has "
               f"{in_use:.2f} GiB memory in use.")
    out, seen = run(message)
    assert seen[0].kind.value == "GPUOutOfMemory"
    first, second = out.status.attempts
    assert second.effective.gpu_memory_utilization is not None
    assert second.effective.gpu_memory_utilization <= round(util - 0.02, 3)
    assert "already allocated" in (first.explanation or "")


def test_bare_oom_below_the_weights_is_loading_and_permanent() -> None:
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 95.59 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 40.10 GiB "
               "memory in use.")
    out, _ = run(message)
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert "while loading the weights" in (st.attempts[0].explanation or "")


def test_bare_oom_above_the_weights_is_profiling_and_halves_max_num_seqs() -> None:
    body = spec()
    body["model"]["weightsPerGPU"] = "30Gi"
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 95.59 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 40.10 GiB "
               "memory in use.")
    out, _ = run(message, body=body)
    first, second = out.status.attempts
    assert "profiling activations" in (first.explanation or "")
    assert second.effective.max_num_seqs == first.effective.max_num_seqs // 2
    assert second.effective.context_length == first.effective.context_length


def test_unknown_retries_unchanged_once_then_fails_with_the_error_line() -> None:
    long_tail = " ".join(f"detail{i}" for i in range(120))
    message = ("INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
               f"ZeroDivisionError: something nobody has seen {long_tail}\n"
               "RuntimeError: Engine core initialization failed. See root cause above.\nINFO bye")
    out, seen = run(message)
    assert seen[0].kind.value == "Unknown"
    assert seen[0].evidence.startswith("ZeroDivisionError: something nobody has seen")
    first, second = out.status.attempts
    assert second.effective == first.effective and second.not_before is not None
    explanation = first.explanation or ""
    assert "ZeroDivisionError" in explanation and explanation.rstrip("; ").split(";")[0]
    quoted = explanation.split("unrecognized failure: ", 1)[1].split("; retrying")[0]
    assert quoted.endswith("...") and quoted[:-3].split(" ")[-1].startswith("detail")
    words = set(long_tail.split()) | {"ZeroDivisionError:", "something", "nobody", "has", "seen"}
    assert all(w in words for w in quoted[:-3].split(" ")), "cut mid-word"
    again, _ = run(message, status=out.status, attempt=2)
    st = again.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert "ZeroDivisionError: something nobody has seen" in (st.attempts[1].explanation or "")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_handed_case_through_the_operator_policy(case: dict[str, Any]) -> None:
    """Every handed case (tests/fixtures/failures.yaml) through the controller: ``reconcile.diagnose`` on a pod
    carrying the case's termination and Events, then ``attempts.fail`` (the policy wire the
    controller uses) on the configuration the operator would have rendered."""
    check_through_the_operator_policy(case)
