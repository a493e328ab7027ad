"""A burst of new servers of a model in no catalog while its first resolution runs (the 200-server bench is
no slower for catalog-free models after the first resolution): the operator's wiring of the shared resolutions to the
work queue (``lifecycle.shared_resolutions``) gives the servers that waited a first reconcile's priority when their
resolution succeeds, so they plan and create their workloads in their next pass, ahead of every follow-up and of the
servers created after the end (which plan in their first pass) instead of behind the whole burst."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.controller.app.lifecycle import LATER_PASS_SHARE, shared_resolutions
from ctxfit.controller.converge.resolution import need
from ctxfit.controller.converge.types import ResolutionRequest
from ctxfit.controller.runtime.workqueue import WorkQueue
from ctxfit.controller.settings import Settings
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.vocab.modelsource import ModelSource
from prometheus_client import generate_latest

SETTINGS = Settings(metrics_port=0, health_port=0)
SPEC = {"model": {"name": "Qwen/Qwen2.5-7B"}, "engine": {"kind": "vllm"},
        "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}}
NAMESPACE = "bench"
WORKERS = 8


class Burst:
    """What a pass does with the resolution (``reconcile``'s part of it), with an API call's time; the servers named
    ``burst-*`` hold their slots until ``slow`` is set; ``other-*`` are servers of other models (no resolution)."""

    def __init__(self) -> None:
        self.release, self.started = threading.Event(), threading.Event()
        self.log: list[tuple[str, str]] = []  # (server, "pass" | "planned") in the order they happened
        self.planned_in: dict[str, int] = {}
        self.passes: dict[str, int] = {}
        self.slow = asyncio.Event()
        self.woken: list[Hashable] = []
        self.resolutions: Any = None

    def resolve(self, repo: str, **_: Any) -> ModelSource:
        self.started.set()
        self.release.wait(30)
        return ModelSource(config={"architectures": ["Qwen2ForCausalLM"]}, repo=repo)

    async def worker(self, key: Hashable) -> float | None:
        namespace, name = key  # type: ignore[misc]
        self.passes[name] = self.passes.get(name, 0) + 1
        self.log.append((name, "pass"))
        if name.startswith("burst"):
            await self.slow.wait()
        await asyncio.sleep(0.002)
        if name in self.planned_in or name.startswith("other"):
            return None  # a follow-up: status, Events
        view = self.resolutions.view(key, SPEC)
        if view is not None and view.source is not None:
            self.planned_in[name] = self.passes[name]
            self.log.append((name, "planned"))
            return 0.0  # the Deployment is written; its status follows in a later pass
        wanted = need(InferenceServerSpec.model_validate(SPEC), namespace)
        self.resolutions.request(key, ResolutionRequest(wanted), {"metadata": {"namespace": namespace, "name": name}})
        return SETTINGS.resolve_poll_seconds  # "Resolving" written; look again later

    def spy_on_ready(self) -> None:
        ready = self.resolutions.ready

        def spy(key: tuple[str, str]) -> None:  # the production callback, then noted here
            ready(key)
            self.woken.append(key)

        self.resolutions.ready = spy


async def burst_scenario(burst: Burst) -> str:
    queue = WorkQueue(burst.worker, WORKERS, reserved=WORKERS - max(1, WORKERS // LATER_PASS_SHARE))
    metrics = Metrics()
    burst.resolutions = shared_resolutions(None, SETTINGS, asyncio.get_running_loop(), queue, metrics,
                                           resolve=burst.resolve)
    burst.spy_on_ready()
    for i in range(4):  # servers of other models, reconciled once: their follow-ups compete for the later share
        queue.add((NAMESPACE, f"other-{i}"))
    for i in range(3):  # created while the resolution runs: "Resolving"
        queue.add((NAMESPACE, f"waited-{i}"))
    await asyncio.sleep(0.05)
    assert await asyncio.to_thread(burst.started.wait, 10)
    for i in range(16):  # the burst goes on: every slot busy, first passes waiting
        queue.add((NAMESPACE, f"burst-{i:02d}"))
    for i in range(4):
        queue.add((NAMESPACE, f"other-{i}"))  # follow-ups, waiting
    await asyncio.sleep(0.01)
    burst.release.set()  # the resolution ends
    while len(burst.woken) < 3:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.001)  # the wake-ups (call_soon_threadsafe) are in the queue
    for i in range(8):  # created after the end
        queue.add((NAMESPACE, f"after-{i}"))
    await asyncio.sleep(0.01)
    burst.slow.set()
    for _ in range(2000):
        if len(burst.planned_in) == 3 + 16 + 8:
            break
        await asyncio.sleep(0.005)
    await queue.close()
    burst.resolutions.close()
    return generate_latest(metrics.registry).decode()


def test_servers_woken_by_their_resolution_plan_in_their_next_pass_ahead_of_the_rest_of_the_burst() -> None:
    burst = Burst()
    exported = asyncio.run(burst_scenario(burst))
    log, planned_in = burst.log, burst.planned_in
    assert len(planned_in) == 27, f"not all planned: {sorted(planned_in)}"
    assert all(planned_in[f"after-{i}"] == 1 for i in range(8)), "created after the end: planned in the first pass"
    assert all(planned_in[f"burst-{i:02d}"] == 1 for i in range(16))
    assert all(planned_in[f"waited-{i}"] == 2 for i in range(3)), "waited: planned in the pass after the wake-up"
    first_after = log.index(("after-0", "pass"))
    woken_passes = [i for i, (name, what) in enumerate(log) if name.startswith("waited") and what == "pass"][3:]
    assert len(woken_passes) == 3 and max(woken_passes) < first_after, \
        f"a server that waited passed behind the servers created after the end: {log}"
    assert 'ctxfit_model_resolution_duration_seconds_count{kind="hub",outcome="Resolved"} 1.0' in exported
    assert 'ctxfit_model_resolution_end_timestamp_seconds{kind="hub",outcome="Resolved"}' in exported


def test_a_resolution_that_succeeds_calls_ready_one_that_fails_calls_wake_and_each_end_is_told() -> None:
    from ctxfit.controller.kube.resolution import Resolutions
    from ctxfit.hub import ResolveError, ResolveKind

    def resolve(repo: str, **_: Any) -> ModelSource:
        if repo == "owner/missing":
            raise ResolveError(ResolveKind.NOT_FOUND, repo, "no such repo")
        return ModelSource(config={"architectures": ["Qwen2ForCausalLM"]}, repo=repo)

    calls: list[tuple[str, tuple[str, str]]] = []
    ends: list[tuple[str, str]] = []
    done = threading.Semaphore(0)
    res = Resolutions(None, SETTINGS, lambda key: (calls.append(("wake", key)), done.release()), resolve=resolve)
    res.ready = lambda key: (calls.append(("ready", key)), done.release())  # type: ignore[assignment]
    res.finished = lambda kind, outcome, seconds: ends.append((kind, outcome)) if seconds >= 0 else None
    for server, repo in ((("ns", "good"), "owner/present"), (("ns", "bad"), "owner/missing")):
        spec = {**SPEC, "model": {"name": repo}}
        res.request(server, ResolutionRequest(need(InferenceServerSpec.model_validate(spec), "ns")), {})
    assert done.acquire(timeout=10) and done.acquire(timeout=10)
    assert sorted(calls) == [("ready", ("ns", "good")), ("wake", ("ns", "bad"))]
    assert sorted(ends) == [("hub", "ModelNotFound"), ("hub", "Resolved")]
    calls.clear()
    wanted = need(InferenceServerSpec.model_validate({**SPEC, "model": {"name": "owner/present"}}), "ns")
    res.request(("ns", "good"), ResolutionRequest(wanted, recheck=True), {})  # a moving branch re-checked: no plan
    assert done.acquire(timeout=10)
    res.close()
    assert calls == [("wake", ("ns", "good"))]


def test_resolution_metrics_keep_their_labels_bounded() -> None:
    metrics = Metrics()
    metrics.observe_resolution("hub", "Resolved", 0.8)
    metrics.observe_resolution("token", "anything a pod wrote\n", 3.0)
    text = generate_latest(metrics.registry).decode()
    assert 'ctxfit_model_resolution_duration_seconds_count{kind="hub",outcome="Resolved"} 1.0' in text
    assert 'ctxfit_model_resolution_duration_seconds_count{kind="token",outcome="other"} 1.0' in text
