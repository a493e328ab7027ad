"""Reports of ``bench/reconcile_bench.py``: percentiles, the operator's throughput as a fraction of the
ceilings, and the ``--backlog`` summary."""

from __future__ import annotations

import api_ceiling


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report_fractions(what: str, per_second: float, ceilings: list[api_ceiling.Ceiling], rss: float) -> None:
    """The operator's throughput as a fraction of the ceiling (and of the paired ceiling), and the verdict."""
    ceiling = ceilings[0]
    print(f"operator throughput: {what} = {per_second / ceiling.per_second:.2f} of the ceiling "
          f"({ceiling.per_second:.1f}/s, {ceiling.threads} threads)")
    for paired in ceilings[1:]:
        print(f"  = {per_second / paired.per_second:.2f} of a plain client writing the same Deployment + claim "
              f"pairs ({paired.per_second:.1f}/s, {paired.threads} threads)")
    ok = per_second / ceiling.per_second >= 0.8 and rss < 150
    print("targets (>= 0.8 of the ceiling, RSS < 150 MiB):", "met" if ok else "NOT met")


def report_backlog(count: int, created_all: float, written: int, from_start: float, first_to_last: float,
                   rss: float, facts: str, ceilings: list[api_ceiling.Ceiling]) -> int:
    """Print the ``--backlog`` figures: the operator's own rate, not bounded by how fast servers arrive."""
    print(f"servers: {count}, all created in {created_all:.1f} s before the operator started; Deployments "
          f"written: {written}/{count}, the last {from_start:.1f} s after the operator process started, "
          f"{first_to_last:.1f} s after the first")
    print(f"operator peak RSS: {rss:.0f} MiB; at the end: {facts}")
    if not ceilings or written < count or first_to_last <= 0:
        return 0 if written == count else 1
    steady, overall = (count - 1) / first_to_last, count / from_start
    print(f"counting its start-up: {overall:.1f}/s = {overall / ceilings[0].per_second:.2f} of the ceiling")
    report_fractions(f"{steady:.1f} Deployments/s first to last", steady, ceilings, rss)
    return 0
