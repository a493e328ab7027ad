"""Issue 28, item 6: passes of servers whose body is over the cache bound (up to the API server's ~1.5 MB object
limit) run at most ``LARGE_PASSES`` at once, so their copies of the body bound the operator's peak whatever their
number; servers of ordinary size never wait for them (``app/lifecycle.py``, bench/hostile_rss.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ctxfit.controller.app.lifecycle import LARGE_PASSES, MAX_CACHED_BODY_BYTES, State, Worker, slim


def test_large_bodies_mark_their_server_and_limit_its_passes() -> None:
    running = {"large": 0, "small": 0}
    most = {"large": 0, "small": 0}

    async def run(fn: Any, runtime: Any, namespace: str, name: str, *args: Any, **kwargs: Any) -> Any:
        kind = name.split("-")[0]
        running[kind] += 1
        most[kind] = max(most[kind], running[kind])
        await asyncio.sleep(0.05)
        running[kind] -= 1
        return SimpleNamespace(applied=None, stored=None, conflict=False, waiting_for_nodes=False,
                               requeue_after=None)

    async def main() -> None:
        threads = SimpleNamespace(run=run)
        state = State(runtime=SimpleNamespace(), queue=SimpleNamespace(), threads=threads,  # type: ignore[arg-type]
                      leader=SimpleNamespace(is_leader=True), leader_task=None)  # type: ignore[arg-type]
        state.indexes = ({}, {}, {}, {}, {})
        huge = {"metadata": {"name": "x"}, "spec": {"pad": "x" * (MAX_CACHED_BODY_BYTES + 1)}}
        small = {"metadata": {"name": "x"}, "spec": {}}
        for i in range(6):
            state.keep(("ns", f"large-{i}"), slim(huge))
            state.keep(("ns", f"small-{i}"), slim(small))
        assert state.large == {("ns", f"large-{i}") for i in range(6)}
        assert set(state.bodies) == {("ns", f"small-{i}") for i in range(6)}, "a large body is not kept"
        worker = Worker(state.runtime, threads)  # type: ignore[arg-type]
        worker.state = state
        await asyncio.gather(*(worker(("ns", f"{kind}-{i}")) for i in range(6) for kind in ("large", "small")))
        state.keep(("ns", "large-0"), slim(small))  # edited down: an ordinary server again
        assert ("ns", "large-0") not in state.large and ("ns", "large-0") in state.bodies

    asyncio.run(main())
    assert most["large"] == LARGE_PASSES, most
    assert most["small"] == 6, "servers of ordinary size never wait for the large ones"
