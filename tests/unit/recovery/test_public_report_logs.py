"""Break-it pass with real, unseen logs: failure tails from public vLLM / SGLang bug reports
(tests/fixtures/public-report-logs.yaml, each with its URL and the engine version) are classified as the class an
SRE would name, through the library and through ``ctxfit diagnose`` with a manifest of that engine and version;
the decision fits the class (no memory step after a download, driver or unrecognized failure; more host memory
after a host OOM). A case with ``channel: events`` is text Kubernetes shows as pod Events (``kubectl describe``):
it goes in as Event messages (``Observation.events``, ``ctxfit diagnose --event``), not as the log. The same
classes in the wording of other engine versions (read in the engines' published wheels, the source each pattern
cites) are ``wordings.REPORT_WORDINGS``, checked by ``test_classify_wordings.test_wording``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import EngineKind
from ctxfit.cli import main
from ctxfit.recovery import FailureKind, Observation, classify
from ctxfit.vocab.kinds import DOWNLOAD_KINDS, PERMANENT_KINDS
from kubernetes.utils import parse_quantity

from tests.unit.recovery.diagnosekit import write_server

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "public-report-logs.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text())
K = FailureKind

ENGINE_KNOBS = ("contextLength", "gpuMemoryUtilization", "memFractionStatic", "kvCacheDtype", "maxNumSeqs",
                "cudaGraphMaxBatchSize")
"""The engine flags of ``next``: a download, driver or unrecognized failure moves none of them."""


def test_fixture_is_real_and_new() -> None:
    """At least 25 logs, each from a public report of either engine, none already in the older fixtures."""
    assert len(CASES) >= 25
    assert len({c["id"] for c in CASES}) == len(CASES)
    older = "".join((FIXTURE.parent / name).read_text() for name in
                    ("failures.yaml", "review-wordings.yaml", "sglang-context-rejections.yaml"))
    for case in CASES:
        assert case["source"].startswith(("https://github.com/vllm-project/", "https://github.com/sgl-project/"))
        assert case["source"] not in older, case["id"]
        assert case["engine"] in {"vllm", "sglang"} and case["version"]
    assert len({c["source"] for c in CASES}) >= 25


def observed(case: dict[str, Any]) -> Observation:
    """The case as Kubernetes shows it: its text is the container's log tail, or (``channel: events``) the pod's
    Event messages."""
    if case.get("channel") == "events":
        return Observation(reason="Error", exit_code=1, events=(case["text"],))
    return Observation(reason="Error", exit_code=1, message=case["text"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_report_is_classified(case: dict[str, Any]) -> None:
    failure = classify(observed(case), EngineKind(case["engine"]))
    assert failure.kind is K(case["kind"]), (case["source"], failure)
    assert failure.evidence
    for name, want in case.get("numbers", {}).items():
        assert failure.numbers.get(name) == want, (name, failure.numbers)


def diagnose(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: dict[str, Any], text: str,
             events: tuple[str, ...] = (), history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    server = tmp_path / "s.yaml"
    write_server(server, case["engine"], case["version"])
    log = tmp_path / "log.txt"
    log.write_text(text)
    extra = [arg for event in events for arg in ("--event", event)]
    if history is not None:
        (tmp_path / "history.yaml").write_text(yaml.safe_dump(history))
        extra += ["--history", str(tmp_path / "history.yaml")]
    code = main(["diagnose", "-f", str(server), "--message-file", str(log), "--reason", "Error",
                 "--exit-code", "1", "-o", "json", *extra])
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_report_through_the_cli(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI names the class, and the decision is the class's: the planned configuration is what a text
    nothing recognizes would retry unchanged; against it, no engine flag moves after a download, driver or
    unrecognized failure, an unrecognized failure is not retried twice in the same configuration, host memory
    grows after a host OOM, and the context never rises."""
    text, events = ("", (case["text"],)) if case.get("channel") == "events" else (case["text"], ())
    doc = diagnose(tmp_path, capsys, case, text, events)
    kind = K(doc["failure"]["kind"])
    assert kind is K(case["kind"]), (case["source"], doc["failure"])
    planned = diagnose(tmp_path, capsys, case, "no recognizable text here\n")
    assert planned["failure"]["kind"] == "Unknown" and not planned["permanent"]
    if kind in PERMANENT_KINDS:
        assert doc["permanent"] is True, doc["explanation"]
        return
    if doc["permanent"]:
        return
    nxt, base = doc["next"], planned["next"]
    assert nxt["contextLength"] <= base["contextLength"]
    if kind in DOWNLOAD_KINDS or kind is K.UNKNOWN:
        assert {k: nxt[k] for k in ENGINE_KNOBS} == {k: base[k] for k in ENGINE_KNOBS}, doc["explanation"]
    if kind is K.UNKNOWN:
        # The retry of unrecognized text is once: the same text after that configuration failed so never
        # proposes it again.
        again = diagnose(tmp_path, capsys, case, text, events, history=[dict(nxt, failure="Unknown")])
        assert again["permanent"] or {k: again["next"][k] for k in ENGINE_KNOBS} != {k: nxt[k] for k in ENGINE_KNOBS}
    if kind is K.HOST_OOM_KILLED:
        assert parse_quantity(nxt["memoryLimit"]) > parse_quantity(base["memoryLimit"])
        assert "host memory" in doc["explanation"]


def test_readme_counts_the_public_failure_tails() -> None:
    """README's "Diagnose a failed start" says how many tails the fixture holds, per engine: keep it true."""
    import re
    from collections import Counter

    root = Path(__file__).resolve().parents[3]
    readme = " ".join((root / "README.md").read_text().split())
    said = re.search(r"holds (\d+) failure tails from public vLLM \((\d+)\) and SGLang \((\d+)\)", readme)
    assert said is not None, "README no longer states the count"
    cases = yaml.safe_load(FIXTURE.read_text())
    engines = Counter(case["engine"] for case in cases)
    assert tuple(int(n) for n in said.groups()) == (len(cases), engines["vllm"], engines["sglang"])
