"""Per-GPU weights predicted from checkpoint tensors vs the figure each engine printed at start-up: the table.

    python bench/weights_accuracy.py [--family MoE] [--csv]

Every start-up fixture that prints the engine's own weight figure (vLLM "Model loading took X GiB", SGLang "Load
weight end ... mem usage=X GB") and whose model has a fixture repo (tests/fixtures/weights/accuracy.yaml), predicted
from the repo's tensors (tests/fixtures/hub: real config.json files, tensors real or generated and checked against
published totals) with the engine's sharding rules (``ctxfit.engines.weights``). One row per start-up: the repo, its
family and weight format, engine and layout, predicted and printed GiB, the error, and whether it is within the
issue's bound max(2 %, 0.1 GiB) ("known": outside, with the reason in accuracy.yaml). Then median / p90 / max |error|
overall and per family, and the start-ups left out (no fixture repo) with why. No timing: nothing here depends on
the machine's load.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))
    sys.path.insert(0, str(ROOT))


def main() -> int:  # noqa: C901 - one report, case by case
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", help="only repos whose family contains this (e.g. MoE, MLA, FP8)")
    parser.add_argument("--csv", action="store_true", help="print rows as CSV")
    args = parser.parse_args()
    from tests.hubfixtures.accuracy import TABLE, bound, cases, family, predict, summary, weight_format

    rows = []
    for case in cases():
        fam = family(case)
        if args.family and args.family.lower() not in fam.lower():
            continue
        predicted = predict(case)
        error = predicted - case["observed"]
        within = abs(error) <= bound(case["observed"])
        status = "ok" if within else ("known" if case["id"] in TABLE["known"] else "OUT")
        rows.append((case, fam, weight_format(case), predicted, error, status))
    if not rows:
        print("no start-up matches")
        return 1
    header = ("start-up", "repo", "family", "format", "engine", "TP", "PP", "predicted GiB", "printed GiB",
              "error GiB", "bound")
    if args.csv:
        print(",".join(header))
        for case, fam, fmt, predicted, error, status in rows:
            print(",".join(str(v) for v in (case["id"], case["repo"], fam.replace(",", ";"), fmt, case["engine"],
                                            case["tp"], case["pp"], f"{predicted:.3f}", f"{case['observed']:.3f}",
                                            f"{error:+.3f}", status)))
        return 0
    print(f"{'start-up':<58} {'repo':<34} {'format':<16} {'eng':<6} {'TP':>2} {'PP':>2} {'pred':>8} {'printed':>8} "
          f"{'error':>7}  bound")
    for case, _fam, fmt, predicted, error, status in rows:
        print(f"{case['id'][:58]:<58} {case['repo'][:34]:<34} {fmt[:16]:<16} {case['engine']:<6} {case['tp']:>2} "
              f"{case['pp']:>2} {predicted:>8.3f} {case['observed']:>8.3f} {error:>+7.3f}  {status}")

    def line(label: str, picked: list[tuple]) -> str:  # type: ignore[type-arg]
        s = summary([abs(r[4]) for r in picked], [r[0]["observed"] for r in picked])
        within = sum(1 for r in picked if r[5] == "ok")
        return (f"{label:<44} n={s['n']:>3}  median {s['median']:.3f} GiB ({100 * s['medianRel']:.2f} %)  "
                f"p90 {s['p90']:.3f} GiB ({100 * s['p90Rel']:.2f} %)  max {s['max']:.3f} GiB  within {within}")

    print()
    print(line("all", rows))
    by_family: dict[str, list[tuple]] = defaultdict(list)  # type: ignore[type-arg]
    for r in rows:
        by_family[r[1]].append(r)
    for fam, picked in sorted(by_family.items()):
        print(line(f"  {fam[:42]}", picked))
    out = [r for r in rows if r[5] == "OUT"]
    for case, *_ in out:
        print(f"OUTSIDE THE BOUND: {case['id']}")
    print("\nknown (outside the bound, reason in tests/fixtures/weights/accuracy.yaml):")
    for key, why in TABLE["known"].items():
        print(f"  {key}: {' '.join(str(why).split())}")
    print("\nnot in the table (no fixture repo):")
    for key, why in TABLE["uncovered"].items():
        print(f"  {key}: {' '.join(str(why).split())[:200]}")
    return 1 if out else 0


if __name__ == "__main__":
    raise SystemExit(main())
