"""The restart budget of a multi-node group (pure): a LeaderWorkerSet group recreated again and again without ever
becoming Ready ends Failed, never in an endless recreate loop. See docs/design/group-restarts.md."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Attempt, GroupLeader, Reason, parse_rfc3339
from ctxfit.render.deployment import TERMINATION_GRACE_SECONDS

from ..views.pods import PodView
from . import attempts
from .types import EventNote, Outcome

BUDGET_SETTING = "CTXFIT_GROUP_RESTART_BUDGET"
RECREATION_WINDOW_SECONDS = 10
"""Recreations of a group within this many seconds of the leader that opened its current disruption count once:
the LWS controller's repeated reaction to one deletion takes 1-3 s on the local control plane (e2e
``test_a_group_recreated_repeatedly_ends_failed_within_the_budget``), a group that really comes up again (image,
scheduling, container start) takes longer."""

CASCADE_SECONDS = TERMINATION_GRACE_SECONDS + RECREATION_WINDOW_SECONDS
"""The longest one disruption's cascade of incomplete incarnations can last: the old pods terminate within their
grace period (``render.deployment.TERMINATION_GRACE_SECONDS``), then the LWS controller reacts within the window.
An incomplete incarnation replaced later than this after the disruption opened is a recreation loop (a worker
evicted at once, every time), counted like a complete one, so that loop also ends Failed."""


def _seconds_between(earlier: str | None, later: str | None) -> float | None:
    """``later - earlier`` in seconds for RFC 3339 timestamps (``Z`` or an offset, any fractional seconds); None
    when either is missing or unreadable (no zone: naive and aware times do not subtract)."""
    if not earlier or not later:
        return None
    try:
        return (parse_rfc3339(later) - parse_rfc3339(earlier)).total_seconds()
    except (ValueError, TypeError):
        return None


def _leaders(pods: Sequence[PodView]) -> dict[int, PodView]:
    """Group index -> its live leader pod (worker index 0), among ``pods``."""
    out: dict[int, PodView] = {}
    for pod in pods:
        facts = pod.facts
        if facts.worker_index == 0 and facts.group_index is not None and pod.uid and not pod.deleting:
            out[facts.group_index] = pod
    return out


def _complete(leader: PodView, pods: Sequence[PodView], group_size: int) -> bool:
    """All ``group_size`` pods of ``leader``'s incarnation exist: its live workers (same group index, not being
    deleted, created no earlier than the leader; a worker or leader without a readable creation time counts)."""
    index = leader.facts.group_index
    workers = [p for p in pods if p.facts.group_index == index and p.facts.worker_index not in (None, 0)
               and not p.deleting and (_seconds_between(leader.created, p.created) or 0) >= 0]
    return 1 + len(workers) >= group_size


def count_recreations(cur: Attempt, pods: Sequence[PodView], group_size: int,
                      groups: int | None = None) -> list[PodView]:
    """Remember the leaders of ``pods`` (the attempt's own) on ``cur``; returns the leaders that are new
    incarnations of a known, complete group (same revision, new uid, ``RECREATION_WINDOW_SECONDS`` or more after
    the disruption's first leader; docs/design/group-restarts.md), each counted
    once in ``cur.group_restarts``. ``group_size``: pods per group (``spec.nodes``). ``groups``: the
    LeaderWorkerSet's ``spec.replicas`` (None: unknown): groups of a higher index were scaled away and are
    forgotten, so a scale-up that brings one back is a new group, not a recreation."""
    known = {leader.group: leader.model_copy(update={"restarts": _restarts_of(leader, cur) or 0})
             for leader in cur.group_leaders or [] if groups is None or leader.group < groups}  # legacy: explicit
    recreated: list[PodView] = []
    for index, pod in sorted(_leaders(pods).items()):
        if groups is not None and index >= groups:
            continue  # being scaled away
        seen = known.get(index)
        complete = _complete(pod, pods, group_size)
        if seen is not None and seen.uid == pod.uid:
            if complete and seen.complete is False:
                known[index] = seen.model_copy(update={"complete": True})
            continue
        since = pod.created
        restarts = 0 if seen is None else _restarts_of(seen, cur)
        if seen is not None and seen.revision == pod.facts.revision:
            apart = _seconds_between(seen.since, pod.created)
            if (seen.complete is not False and (apart is None or apart >= RECREATION_WINDOW_SECONDS)) or \
                    (seen.complete is False and apart is not None and apart >= CASCADE_SECONDS):
                recreated.append(pod)
                restarts = (restarts or 0) + 1
            else:
                since = seen.since  # the same disruption
        known[index] = GroupLeader(group=index, uid=pod.uid, revision=pod.facts.revision, complete=complete,
                                   since=since, restarts=restarts)
    if [leader.model_dump() for leader in cur.group_leaders or []] != \
            [known[i].model_dump() for i in sorted(known)]:
        cur.group_leaders = [known[i] for i in sorted(known)] or None
    if recreated:
        cur.group_restarts = max(_restarts_of(leader, cur) or 0 for leader in known.values())
    return recreated


def _ready_groups(pods: Sequence[PodView], group_size: int) -> set[int]:
    """Indexes of the groups with ``group_size`` Ready pods (not being deleted) among ``pods``."""
    ready = Counter(p.facts.group_index for p in pods if p.ready and not p.deleting)
    return {index for index, count in ready.items() if index is not None and count >= group_size}


def _restarts_of(leader: GroupLeader, cur: Attempt) -> int | None:
    """Recreations counted for ``leader``'s group; a leader stored before the per-group count existed inherits
    the attempt's count (nothing counted is lost)."""
    return leader.restarts if leader.restarts is not None else cur.group_restarts


def follow_group(out: Outcome, spec: InferenceServerSpec, cur: Attempt, pods: Sequence[PodView], budget: int,
                 now: str, generation: int, groups: int | None = None) -> bool:
    """Count the attempt's group recreations (docs/design/group-restarts.md); True when the budget is exhausted and
    the server was marked Failed (the caller stops there). ``groups``: the live LeaderWorkerSet's
    ``spec.replicas`` (None: not read). Single-node specs are never touched."""
    if spec.nodes <= 1:
        return False
    recreated = count_recreations(cur, pods, spec.nodes, groups)
    ready = _ready_groups(pods, spec.nodes)
    leaders = cur.group_leaders or []
    if any(leader.group in ready and _restarts_of(leader, cur) for leader in leaders):
        counts = [0 if leader.group in ready else _restarts_of(leader, cur) or 0 for leader in leaders]
        # a group with every pod Ready made progress: its count starts over (not the others': with
        # spec.autoscaling one Ready group makes the server Ready while another is recreated forever)
        cur.group_leaders = [leader.model_copy(update={"restarts": n})
                             for leader, n in zip(leaders, counts, strict=True)]
        cur.group_restarts = max(counts)
    recreated = [p for p in recreated if p.facts.group_index not in ready]
    if not recreated:
        return False
    restarts = cur.group_restarts or 0
    per_group = {leader.group: leader.restarts or 0 for leader in cur.group_leaders or []}
    last = max(recreated, key=lambda p: per_group.get(p.facts.group_index or 0, 0))  # the group nearest its budget
    restarts = per_group.get(last.facts.group_index or 0, restarts)
    where = f" on {last.node}" if last.node else ""
    seen = (f"the LeaderWorkerSet recreated group {last.facts.group_index} of attempt {cur.number} "
            f"(new leader pod {last.name}{where}): {restarts} recreation(s) without every pod Ready")
    if restarts <= budget:
        out.events.append(EventNote("Warning", Reason.GROUP_RECREATED,
                                    f"{seen}; budget {budget} ({BUDGET_SETTING})"))
        return False
    explanation = (f"recreated more than {budget} times ({BUDGET_SETTING}) without becoming Ready and without a "
                   "failure the engine reported: see the LeaderWorkerSet's RecreateGroupOnPodRestart Events and "
                   "the group pods' Events (evictions, deletions, node problems)")
    attempts.fail_group(out, cur, last, seen, explanation, now, generation)
    return True
