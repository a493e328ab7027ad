"""kopf settings chosen for the per-event cost (controller/app/kopf_settings.py) hold only while the registry has no
change-detecting handlers and every watch/index handler is async."""

from __future__ import annotations

import inspect

import kopf
from ctxfit.controller.app.handlers import build_registry
from ctxfit.controller.app.kopf_settings import KOPF_EXECUTOR_THREADS, NoDiffBase, configure


def test_no_change_detecting_handlers_so_no_diff_base_is_needed() -> None:
    registry = build_registry()
    changing = [h.id for h in registry._changing.get_all_handlers()]
    spawning = [h.id for h in registry._spawning.get_all_handlers()]
    assert changing == [] and spawning == [], "NoDiffBase would hide changes from these handlers"


def test_every_event_and_index_handler_runs_inline() -> None:
    """A sync handler would run in kopf's executor, which has only KOPF_EXECUTOR_THREADS threads."""
    registry = build_registry(scaled_objects=True)
    handlers = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
    assert len(handlers) == 12
    sync = [h.id for h in handlers if not inspect.iscoroutinefunction(h.fn)]
    assert sync == []


def test_owned_groups_always_and_scaled_objects_with_keda_are_watched() -> None:
    """A hand edit of a LeaderWorkerSet, a ScaledObject deleted or paused by hand: seen at once, not at the resync
    (the ScaledObject watch only with KEDA support on: the chart grants list/watch on them only then)."""
    ids = {h.id for h in build_registry()._watching.get_all_handlers()}
    assert "owned_groups" in ids and "owned_scaled_objects" not in ids
    assert "owned_scaled_objects" in {h.id for h in build_registry(scaled_objects=True)._watching.get_all_handlers()}


def test_no_diff_base_copies_and_stores_nothing() -> None:
    storage = NoDiffBase()
    body = kopf.Body({"metadata": {"name": "a"}, "spec": {"x": 1}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    storage.store(body=body, patch=kopf.Patch(), essence=kopf.BodyEssence())


def test_configure() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
    assert settings.execution.max_workers == KOPF_EXECUTOR_THREADS
