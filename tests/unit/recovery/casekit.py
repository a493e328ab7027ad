"""The handed failure cases (tests/fixtures/failures.yaml) and their harness: the case's spec and Observation,
the checks of kind, numbers and next config, and the library and ``ctxfit diagnose -o json`` runs of one case."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import GiB, InferenceServerSpec, quantity_to_bytes
from ctxfit.cli import diagnose as diagnose_cli
from ctxfit.recovery import Failure, FailureKind, Observation, classify, decide, fallback_effective, observed_effective
from pydantic import ValidationError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "failures.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
IDS = [case["id"] for case in CASES]
BYTES_TOLERANCE = 0.005 * GiB
"""The cases' stated tolerance for byte numbers: the engines print GiB with 2 decimals."""
QUANTITY_FIELDS = ("memoryLimit", "shmSize")


def build_spec(server: dict[str, Any]) -> InferenceServerSpec:
    """The case's spec. A KV dtype the API does not list yet (nvfp4) is carried over unvalidated."""
    try:
        return InferenceServerSpec.model_validate(server)
    except ValidationError as exc:
        if not any(err["loc"][-1] == "kvCacheDtype" for err in exc.errors()):
            raise
    memory = dict(server["memory"])
    dtype = memory.pop("kvCacheDtype")
    spec = InferenceServerSpec.model_validate({**server, "memory": memory})
    return spec.model_copy(update={"memory": spec.memory.model_copy(update={"kv_cache_dtype": dtype})})


def spec_is_valid(server: dict[str, Any]) -> bool:
    try:
        InferenceServerSpec.model_validate(server)
    except ValidationError:
        return False
    return True


def observation(case: dict[str, Any]) -> Observation:
    observed = case["observed"]
    terminated = observed.get("terminated", {})
    return Observation(
        reason=terminated.get("reason"),
        exit_code=terminated.get("exitCode"),
        message=observed.get("message", ""),
        events=tuple(observed.get("events", ())),
    )


def assert_numbers(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for name, want in expected.items():
        assert name in actual, f"{name} missing from {actual}"
        got = actual[name]
        if name.endswith("Bytes"):
            assert abs(got - want) <= BYTES_TOLERANCE, f"{name}: {got} vs {want}"
        elif isinstance(want, float):
            assert got == pytest.approx(want, abs=1e-9), name
        else:
            assert got == want, name


def _comparable(field: str, value: Any) -> Any:
    if field in QUANTITY_FIELDS and value is not None:
        return quantity_to_bytes(value)
    return value


def assert_next(current: dict[str, Any], nxt: dict[str, Any], bounds: dict[str, Any]) -> None:
    for field, bound in bounds.items():
        got = _comparable(field, nxt[field])
        if bound == "unchanged":
            assert got == _comparable(field, current[field]), f"{field} changed: {current[field]} -> {nxt[field]}"
        elif isinstance(bound, dict):
            if "max" in bound:
                assert got <= _comparable(field, bound["max"]), f"{field}={nxt[field]} above {bound['max']}"
            if "min" in bound:
                assert got >= _comparable(field, bound["min"]), f"{field}={nxt[field]} below {bound['min']}"
        elif isinstance(bound, list):
            assert got in [_comparable(field, b) for b in bound], f"{field}={nxt[field]} not in {bound}"
        else:
            assert got == _comparable(field, bound), f"{field}={nxt[field]}, expected {bound}"


def assert_case(case: dict[str, Any], failure: Failure, current: dict[str, Any], permanent: bool,
                nxt: dict[str, Any] | None) -> None:
    expect = case["expect"]
    assert failure.kind.value == expect["failure"], failure.evidence
    assert_numbers(dict(failure.numbers), expect.get("numbers", {}))
    assert failure.evidence, "evidence must name the matched line"
    assert permanent is bool(expect.get("permanent", False))
    if expect.get("next"):
        assert nxt is not None
        assert_next(current, nxt, expect["next"])


def check_library(case: dict[str, Any]) -> None:
    """classify -> fallback current -> decide, checked against the case's expectations."""
    spec = build_spec(case["server"])
    failure = classify(observation(case), spec.engine.kind)
    current = observed_effective(fallback_effective(spec), failure, spec)
    decision = decide(spec, current, failure)
    assert "\n" not in decision.explanation
    assert_case(case, failure, current.to_wire(), decision.permanent,
                decision.next.to_wire() if decision.next else None)


def check_engine_unknown(case: dict[str, Any]) -> None:
    """The case's texts are recognized without knowing the engine."""
    failure = classify(observation(case), None)
    assert failure.kind.value == case["expect"]["failure"]
    assert_numbers(dict(failure.numbers), case["expect"].get("numbers", {}))


def check_cli_json(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The case through ``ctxfit diagnose -o json``, checked against the case's expectations."""
    assert spec_is_valid(case["server"]), "every case's server must be a valid spec"
    manifest = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                "metadata": {"name": case["id"]}, "spec": case["server"]}
    (tmp_path / "server.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    (tmp_path / "message.txt").write_text(case["observed"].get("message", ""), encoding="utf-8")
    obs = observation(case)
    argv = ["-f", str(tmp_path / "server.yaml"), "--message-file", str(tmp_path / "message.txt"), "-o", "json"]
    if obs.reason:
        argv += ["--reason", obs.reason]
    if obs.exit_code is not None:
        argv += ["--exit-code", str(obs.exit_code)]
    for event in obs.events:
        argv += ["--event", event]
    parser = argparse.ArgumentParser()
    diagnose_cli.add_arguments(parser)
    assert diagnose_cli.run(parser.parse_args(argv)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"failure", "permanent", "next", "explanation"}
    failure = Failure(FailureKind(doc["failure"]["kind"]), doc["failure"]["numbers"], doc["failure"]["evidence"])
    spec = build_spec(case["server"])
    _, current, _ = diagnose_cli.diagnose(spec, obs)
    assert_case(case, failure, current.to_wire(), doc["permanent"], doc["next"])
