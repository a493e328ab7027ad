"""The operator's exit code: 0 when kopf stopped on a signal or its stop flag, 1 when one of kopf's root tasks
failed (kopf's own task guard, not a stand-in), and 1 when kopf itself raised (a failed start-up)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import pytest
from ctxfit.controller import __main__ as entry
from ctxfit.controller.app.lifecycle import exit_code
from kopf._cogs.aiokits import aiotasks

LOG = logging.getLogger("test")


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fails() -> None:
    raise RuntimeError("the watch broke")


async def _returns() -> None:
    return None


def _ended(*coros_and_names: tuple[Coroutine[Any, Any, None], str]) -> list[asyncio.Task[None]]:
    """Run kopf-guarded tasks as kopf's root tasks end: failing ones fail, eternal ones are cancelled."""

    async def run() -> list[asyncio.Task[None]]:
        tasks = [aiotasks.create_guarded_task(coro=coro, name=name, logger=LOG)
                 for coro, name in coros_and_names]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        return tasks

    return asyncio.run(run())


def test_a_failed_root_task_exits_1_and_names_it(caplog: pytest.LogCaptureFixture) -> None:
    tasks = _ended((_fails(), "multidimensional multitasker"), (_forever(), "poster of events"))
    assert exit_code(tasks) == 1
    ours = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kopf stopped on an error")]
    assert len(ours) == 1 and "multidimensional multitasker" in ours[0] and "poster of events" not in ours[0]


def test_a_stop_without_an_error_exits_0() -> None:
    tasks = _ended((_returns(), "stop-flag checker"), (_forever(), "poster of events"))
    assert all(task.done() for task in tasks)
    assert exit_code(tasks) == 0


def test_tasks_still_running_count_as_no_error() -> None:
    async def run() -> int:
        task = asyncio.create_task(_forever(), name="startup/cleanup activities")
        await asyncio.sleep(0)
        code = exit_code([task])
        task.cancel()
        return code

    assert asyncio.run(run()) == 0


def test_an_error_out_of_kopf_exits_1(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def start_up_failed() -> int:
        raise RuntimeError("startup handler failed")

    monkeypatch.setattr(entry, "main", start_up_failed)
    assert entry.run() == 1
    assert "the operator stopped on an error" in caplog.text


def test_kopf_returning_exits_with_mains_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "main", lambda: 0)
    assert entry.run() == 0
