"""``-f`` read as ``kubectl apply -f`` reads it, by every subcommand that takes it: ``ctxfit plan`` plans every
InferenceServer document (other kinds skipped with a note), ``-f -`` reads stdin, ``--name`` picks one server;
``diagnose`` and ``calibrate`` need ``--name`` in a file of several. Exit codes are ``ctxfit.cli.EXIT_CODES``'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxfit.cli import EXIT_CODES, main

ROOT = Path(__file__).resolve().parents[3]
GATEWAY = "manifests/llama31-8b-gateway.yaml"
FIX = ROOT / "tests" / "fixtures" / "calibrate"


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxfit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, input=stdin)


def _docs(path: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]


def test_plan_plans_every_server_of_the_gateway_manifest_and_skips_the_route() -> None:
    out = run_cli("plan", "-f", GATEWAY)
    assert out.returncode == 0, out.stderr
    assert "llama31-8b-h200: per-GPU memory budget" in out.stdout
    assert "llama31-8b-l4: per-GPU memory budget" in out.stdout
    assert out.stdout.index("llama31-8b-h200:") < out.stdout.index("llama31-8b-l4:"), "file order"
    lines = out.stderr.strip().splitlines()
    assert lines == ["ctxfit: note: skipped 2 documents that are not an InferenceServer: Gateway inference-gateway, "
                     "HTTPRoute llama31-8b"], out.stderr


def test_plan_json_of_several_servers_is_a_list_with_their_names() -> None:
    out = run_cli("plan", "-f", GATEWAY, "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kind"] == "List"
    assert [(i["name"], i["contextLength"]) for i in doc["items"]] == [("llama31-8b-h200", 131072),
                                                                        ("llama31-8b-l4", 24576)]
    one = json.loads(run_cli("plan", "-f", GATEWAY, "--name", "llama31-8b-l4", "-o", "json").stdout)
    assert one == doc["items"][1], "--name plans one server: the plan object itself"
    assert yaml.safe_load(run_cli("plan", "-f", GATEWAY, "-o", "yaml").stdout) == doc


def test_plan_reads_stdin() -> None:
    text = (ROOT / "manifests" / "kimi-128k.yaml").read_text()
    piped = run_cli("plan", "-f", "-", "-o", "json", stdin=text)
    assert piped.returncode == 0, piped.stderr
    filed = run_cli("plan", "-f", "manifests/kimi-128k.yaml", "-o", "json")
    assert json.loads(piped.stdout) == json.loads(filed.stdout)
    assert json.loads(run_cli("plan", "-f", "-", "-o", "json", stdin=(ROOT / GATEWAY).read_text()).stdout)[
        "kind"] == "List"
    empty = run_cli("plan", "-f", "-", stdin="")
    assert empty.returncode == 2 and empty.stderr.strip() == "ctxfit: error: stdin: no InferenceServer document found"


def test_a_bad_document_is_one_line_naming_it_and_the_others_are_planned(tmp_path: Path) -> None:
    good, bad = _docs(GATEWAY)[:2]
    bad["spec"]["gpu"]["count"] = 0  # type: ignore[index]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([good, bad]))
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxfit: error: llama31-8b-l4: spec.gpu.count"), out.stderr
    assert "llama31-8b-h200: per-GPU memory budget" in out.stdout
    doc = json.loads(run_cli("plan", "-f", str(path), "-o", "json").stdout)
    assert [i["name"] for i in doc["items"]] == ["llama31-8b-h200"]


def test_the_worst_exit_code_wins(tmp_path: Path) -> None:
    good, heavy = _docs(GATEWAY)[:2]
    heavy["spec"]["model"]["weightsPerGPU"] = "90Gi"  # type: ignore[index]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([good, heavy]))
    out = run_cli("plan", "-f", str(path), "-o", "json")
    assert out.returncode == 3, out.stderr
    assert [i["fits"] for i in json.loads(out.stdout)["items"]] == [True, False]


def test_plan_name_that_is_not_in_the_file() -> None:
    out = run_cli("plan", "-f", GATEWAY, "--name", "nope")
    assert out.returncode == 2
    assert out.stderr.strip() == (f"ctxfit: error: --name: {GATEWAY} has no InferenceServer 'nope' (it has "
                                  "llama31-8b-h200, llama31-8b-l4)")


def test_diagnose_and_calibrate_take_one_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = tmp_path / "message.txt"
    message.write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    assert main(["diagnose", "-f", str(ROOT / GATEWAY), "--message-file", str(message)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ctxfit: error: {ROOT / GATEWAY} holds 2 InferenceServers (llama31-8b-h200, llama31-8b-l4): "
                   "choose one with --name NAME")
    assert main(["diagnose", "-f", str(ROOT / GATEWAY), "--name", "llama31-8b-l4", "--message-file", str(message),
                 "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["failure"]["kind"]
    log = str(FIX / "vllm019-llama31-8b-h100-tp1.log")
    two = tmp_path / "two.yaml"
    server = yaml.safe_load((FIX / "llama31-8b-h100.yaml").read_text())
    other = {**server, "metadata": {"name": "other"}}
    two.write_text(yaml.safe_dump_all([other, server]))
    assert main(["calibrate", "-f", str(two), "--log", log]) == 2
    assert "choose one with --name NAME" in capsys.readouterr().err
    assert main(["calibrate", "-f", str(two), "--name", server["metadata"]["name"], "--log", log, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] is not None


def test_diagnose_and_calibrate_read_stdin_once() -> None:
    server = (ROOT / "tests" / "fixtures" / "calibrate" / "llama31-8b-h100.yaml").read_text()
    log = (FIX / "vllm019-llama31-8b-h100-tp1.log").read_text()
    piped = run_cli("calibrate", "-f", str(FIX / "llama31-8b-h100.yaml"), "--log", "-", "-o", "json", stdin=log)
    assert piped.returncode == 0, piped.stderr
    filed = run_cli("calibrate", "-f", "-", "--log", str(FIX / "vllm019-llama31-8b-h100-tp1.log"), "-o", "json",
                    stdin=server)
    assert json.loads(piped.stdout) == json.loads(filed.stdout)
    both = run_cli("calibrate", "-f", "-", "--log", "-", stdin=server)
    assert both.returncode == 2 and "cannot both read stdin" in both.stderr
    diag = run_cli("diagnose", "-f", "-", "--message-file", str(FIX / "vllm019-llama31-8b-h100-tp1.log"), "-o", "json",
                   stdin=server)
    assert diag.returncode == 0, diag.stderr
    both = run_cli("diagnose", "-f", "-", "--message-file", "-", stdin=server)
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1


def test_every_exit_code_is_in_the_help_and_the_readme() -> None:
    helped = run_cli("--help").stdout
    readme = (ROOT / "README.md").read_text()
    for code, _ in EXIT_CODES:
        assert f"  {code}  " in helped
        assert f"\n| {code} | " in readme
    for sub in ("plan", "diagnose", "calibrate", "crd"):
        assert "exit codes:" in run_cli(sub, "--help").stdout


def test_calibrate_without_a_prediction_makes_no_sample_and_exits_1(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    server = yaml.safe_load((FIX / "llama31-8b-h100.yaml").read_text())
    server["spec"]["gpu"] = {"count": 1, "product": "NVIDIA-Imaginary-9000"}  # no memory known: no plan
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(server))
    save = tmp_path / "table.yaml"
    code = main(["calibrate", "-f", str(path), "--log", str(FIX / "vllm019-llama31-8b-h100-tp1.log"),
                 "--save", str(save), "-o", "json"])
    out = capsys.readouterr()
    assert code == 1
    assert json.loads(out.out)["observed"]["kvCacheBytes"], "what the log says is still printed"
    assert out.err.strip().startswith("ctxfit: no calibration sample: no prediction to compare the log with")
    assert not save.exists()


@pytest.mark.parametrize(("engine", "coverage"), [({"version": "0.40.0"}, "NewerThanModelled"),
                                                   ({"version": "0.5.4"}, "OlderThanModelled"),
                                                   ({"image": "registry.example.com/vllm:prod"}, "VersionUnknown")])
def test_plan_warns_once_about_an_unmodelled_engine_release(tmp_path: Path, engine: dict[str, str],
                                                            coverage: str) -> None:
    doc = yaml.safe_load((ROOT / "manifests" / "llama31-8b-h100.yaml").read_text())
    doc["spec"]["engine"] = {"kind": "vllm", **engine}
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxfit: warning: spec.engine."), out.stderr
    assert "--max-model-len" in out.stdout, "planned all the same"
    planned = json.loads(run_cli("plan", "-f", str(path), "-o", "json").stdout)
    assert planned["engineVersion"]["coverage"] == coverage
    assert planned["engineVersion"]["message"] in lines[0]
    modelled = run_cli("plan", "-f", "manifests/llama31-8b-h100.yaml", "-o", "json")
    assert not modelled.stderr and json.loads(modelled.stdout)["engineVersion"]["coverage"] == "VersionModelled"


def test_a_key_given_twice_is_refused_as_kubectl_refuses_it(tmp_path: Path) -> None:
    """kubectl apply -f refuses a mapping key given twice; ctxfit does not plan the last value silently. Merge keys
    (``<<: *anchor``) and the same key in different mappings are not duplicates."""
    text = (ROOT / "manifests" / "kimi-128k.yaml").read_text()
    doc = yaml.safe_load(text)
    target = doc["spec"]["context"]["target"]
    twice = text.replace(f"target: {target}", f"target: {target}\n    target: 65536", 1)
    assert twice != text, "the manifest's context target line was not found: the test proves nothing"
    path = tmp_path / "twice.yaml"
    path.write_text(twice)
    for command in (["plan", "-f", str(path)], ["diagnose", "-f", str(path), "--message-file", "boom"]):
        out = run_cli(*command)
        assert out.returncode == 2, out.stdout
        assert out.stderr.strip().splitlines() == [f"ctxfit: error: {path}: not valid YAML (key 'target' given twice "
                                                    f"(line {twice.splitlines().index('    target: 65536') + 1}))"]
    merged = tmp_path / "merged.yaml"  # a merged key given again explicitly overrides it (the YAML merge rule)
    merged.write_text("kind: InferenceServer\nbase: &b {kind: vllm, version: '0.10.0'}\n"
                      "spec:\n  engine:\n    <<: *b\n    version: '0.19.0'\n  other: {version: x}\n")
    out = run_cli("plan", "-f", str(merged))
    assert out.returncode == 2 and "given twice" not in out.stderr and "not valid YAML" not in out.stderr, out.stderr


def test_a_kind_list_document_is_read_as_its_items(tmp_path: Path) -> None:
    """``kubectl get infsrv -o yaml`` prints a ``kind: List``; ``kubectl apply -f`` reads its items, so does ctxfit."""
    items = _docs(GATEWAY)
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    listed = run_cli("plan", "-f", str(path), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == json.loads(run_cli("plan", "-f", GATEWAY, "-o", "json").stdout)
    assert "skipped 2 documents" in listed.stderr


@pytest.mark.parametrize("args", [("diagnose", "--message-file", "README.md", "--message", "x"),
                                  ("plan", "--fetch", "x"), ("plan", "--out", "json")], ids=["message", "fetch", "out"])
def test_an_abbreviated_flag_is_an_error_not_another_flag(args: tuple[str, ...]) -> None:
    """argparse would take ``--message`` as ``--message-file``, ``--out`` as ``--output`` (a prefix): a typo then
    means another flag; every flag is spelled out."""
    out = run_cli(args[0], "-f", "manifests/kimi-128k.yaml", *args[1:])
    assert out.returncode == 2 and f"unrecognized arguments: {' '.join(args[-2:])}" in out.stderr, out.stderr


KINDLESS = "spec: required (a document without kind is read as an InferenceServer; kind: InferenceServer, " \
           "apiVersion: ctxfit.io/v1alpha1)"


@pytest.mark.parametrize(("doc", "line"), [
    ({"a": 1}, KINDLESS),
    ({"kind": "InferenceServer", "apiVersion": "ctxfit.io/v1alpha1", "metadata": {"name": "x"}}, "spec: required"),
], ids=["kindless", "server"])
def test_a_document_without_spec_names_what_it_lacks(tmp_path: Path, doc: dict[str, object], line: str) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"ctxfit: error: {line}"], out.stderr
