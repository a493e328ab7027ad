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
    registry = build_registry(gateway=True)
    handlers = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
    assert len(handlers) == 11
    sync = [h.id for h in handlers if not inspect.iscoroutinefunction(h.fn)]
    assert sync == []


def test_kopf_watches_only_kinds_the_cluster_always_serves() -> None:
    """kopf stops the whole operator when a watched resource stops being served (an add-on's CRD deleted while it
    runs): LeaderWorkerSets, ScaledObjects and InferencePools are watched by ``owned.start_addon_watches``."""
    registry = build_registry(gateway=True)
    selectors = [h.selector for h in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
                 if h.selector is not None]
    assert {s.group for s in selectors} == {None, "ctxfit.io"}  # None: a core or apps kind named by its plural
    kinds = {s.plural or s.any_name for s in selectors}
    assert kinds == {"pods", "nodes", "deployments", "services", "persistentvolumeclaims", "inferenceservers"}


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
