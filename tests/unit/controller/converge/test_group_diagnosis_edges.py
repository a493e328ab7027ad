"""Edge cases of ``controller/converge/groups.py::most_telling_failure``: termination times in other RFC 3339 forms."""

from __future__ import annotations

from ctxfit.controller.converge.groups import most_telling_failure

from tests.unit.controller.converge.test_converge_group import member
from tests.unit.controller.converge.test_group_diagnosis import NCCL, by_name, ended


def test_the_first_to_end_is_found_whatever_the_rfc3339_form() -> None:
    """Termination times compare as times: fractional seconds or an offset instead of ``Z`` do not reorder them,
    and one without a zone ranks as unknown (last) instead of raising."""
    _, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": NCCL})
    for leader_at, worker_at in (("2026-01-01T12:00:05.900Z", "2026-01-01T12:00:05Z"),
                                 ("2026-01-01T13:00:05+01:00", "2026-01-01T12:00:04Z"),
                                 ("2026-01-01T12:00:05", "2026-01-01T12:00:09Z")):
        leader = ended(member(1, "kimi-0", terminated="Error"), leader_at)
        worker = ended(member(1, "kimi-0-1", terminated="Error"), worker_at)
        assert most_telling_failure([leader, worker], diagnose)[0].name == "kimi-0-1", leader_at  # type: ignore[arg-type]
