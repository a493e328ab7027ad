"""Bad input from the model itself: a broken config.json or safetensors header, a name that is no repo id, an
endpoint that is no Hub. Each ends in one typed kind (``ResolveKind``) or the planner's named error, never an
exception of another class; ``ctxfit plan`` prints one line naming the repo and exits 2. The real huggingface_hub
client talks to the local Hub stand-in (tests/hubfixtures/broken.py serves the broken repos)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.hub.errors import ResolveError, ResolveKind
from ctxfit.hub.resolve import resolve_hub
from ctxfit.vocab.inputs import PlanInputError
from ctxfit.vocab.modelsource import ModelSource

from tests.hubfixtures.broken import CASES, Broken
from tests.hubfixtures.repos import fixture_repo
from tests.hubfixtures.server import hub_env, shared_hub
from tests.unit.hub.silenthub import RECORD_TIMEOUTS, recorded_timeouts, silent_hub

ROOT = Path(__file__).resolve().parents[3]


def _spec(repo: str, tp: int = 1) -> dict[str, Any]:
    return {"model": {"name": repo}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": tp}, "parallelism": {"tensor": tp}}


CHILD = """
import io, json, sys
from contextlib import redirect_stderr, redirect_stdout
from ctxfit.cli import main
out = {}
for path in sys.argv[1:]:
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            code = main(["plan", "-f", path, "-o", "json"])
        except SystemExit as exc:
            code = exc.code
    out[path] = [code, err.getvalue()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cli_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """``ctxfit plan -f`` of every broken repo, in one child process pointed at the stand-in (huggingface_hub reads
    HF_ENDPOINT once per process): repo -> (exit code, stderr)."""
    tmp = tmp_path_factory.mktemp("broken")
    paths = {}
    for case in CASES:
        path = tmp / f"{case.repo.split('/')[1]}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                        "metadata": {"name": "broken"}, "spec": _spec(case.repo)}))
        paths[str(path)] = case.repo
    run = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True, text=True, timeout=600,
                         env=hub_env(str(tmp)), cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return {paths[p]: (code, err) for p, (code, err) in json.loads(run.stdout).items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.repo.split("/")[1])
def test_each_broken_repo_ends_in_its_kind_and_one_cli_line(case: Broken,
                                                           cli_lines: dict[str, tuple[int, str]]) -> None:
    endpoint = shared_hub().url
    if case.kind is not None and case.kind != "UnsupportedArchitecture":
        with pytest.raises(ResolveError) as bad:
            resolve_hub(case.repo, endpoint=endpoint)
        assert bad.value.kind.value == case.kind, bad.value.line()
        assert not bad.value.kind.waiting  # broken files are not a Hub that is down: no retry loop
    else:
        source = resolve_hub(case.repo, endpoint=endpoint)
        with pytest.raises((PlanInputError, ValueError)) as refused:
            plan(InferenceServerSpec.model_validate(_spec(case.repo)), model=source)
        assert case.field in str(refused.value)
    code, err = cli_lines[case.repo]
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err and case.repo in lines[0]
    if case.kind is not None:
        assert case.kind in lines[0]
    if case.field:
        assert case.field in lines[0]


def test_a_name_that_is_no_repo_id_and_an_endpoint_that_is_no_hub_are_not_found() -> None:
    endpoint = shared_hub().url
    with pytest.raises(ResolveError) as bad_id:
        resolve_hub("a/b/c", endpoint=endpoint)
    assert bad_id.value.kind is ResolveKind.NOT_FOUND and "repo id" in bad_id.value.detail
    with pytest.raises(ResolveError) as no_route:  # the stand-in has no route for an id without an owner
        resolve_hub("Qwen2.5-7B-Instruct-bnb-4bit", endpoint=endpoint)
    assert no_route.value.kind is ResolveKind.NOT_FOUND and "HTTP 404" in no_route.value.detail
    with pytest.raises(ResolveError) as not_hub:  # HF_ENDPOINT at a server (or a path) that is not a Hub
        resolve_hub("Qwen/Qwen2.5-7B", endpoint=endpoint + "/not-a-hub")
    assert not_hub.value.kind is ResolveKind.NOT_FOUND and "HF_ENDPOINT" in not_hub.value.detail
    assert not not_hub.value.kind.waiting


BAD_VALUES: tuple[object, ...] = ("DELETE", None, "x", "4096", -1, 0, 1.5, [], {}, True, 10**30)


@pytest.mark.parametrize("repo", ["Qwen/Qwen2.5-7B", "deepseek-ai/DeepSeek-V2-Lite", "Qwen/Qwen3-VL-8B-Instruct",
                                  "openai/gpt-oss-20b", "nvidia/Nemotron-H-56B-Base-8K"])
def test_no_config_field_of_any_type_makes_the_planner_raise_another_class(repo: str) -> None:
    """Every config.json field (nested ones too) deleted or replaced by a value of every JSON type: the planner
    plans, or raises ``PlanInputError`` / ``ValueError`` (what the CLI and the operator turn into one line and a
    condition), never a ``TypeError`` or ``KeyError`` of some arithmetic further on."""
    fixture = fixture_repo(repo)
    spec = InferenceServerSpec.model_validate(_spec(repo, tp=2))
    checkpoint = fixture.checkpoint()

    def paths(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        out = []
        for k, v in doc.items():
            out.append((*prefix, k))
            if isinstance(v, dict):
                out += paths(v, (*prefix, k))
        return out

    escaped = []
    for path in paths(fixture.config):
        for value in BAD_VALUES:
            config = copy.deepcopy(fixture.config)
            node = config
            for part in path[:-1]:
                node = node[part]
            if value == "DELETE":
                del node[path[-1]]
            else:
                node[path[-1]] = value
            try:
                plan(spec, model=ModelSource(config, checkpoint, "hub", repo))
            except (PlanInputError, ValueError):
                pass
            except Exception as exc:  # noqa: BLE001 - the point of the test
                escaped.append(f"{'.'.join(path)}={value!r}: {type(exc).__name__}: {exc}")
    assert not escaped, escaped[:5]


def test_a_hub_that_accepts_and_never_answers_is_unreachable_within_the_timeout(tmp_path: Path) -> None:
    """A Hub (or proxy) that accepts the connection and never answers: ``ctxfit plan`` ends HubUnreachable, one line,
    exit 2, having given ``model_info`` CTXFIT_HUB_TIMEOUT_SECONDS (huggingface_hub's client has no timeout of its
    own; what the code passes is recorded in the child). Unbounded, the child hangs past the hang guard (120 s)."""
    log = tmp_path / "timeouts"
    with silent_hub() as hub:
        path = tmp_path / "server.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                        "metadata": {"name": "silent"}, "spec": _spec("Qwen/Qwen2.5-7B")}))
        env = hub_env(str(tmp_path)) | {"HF_ENDPOINT": hub.endpoint, "CTXFIT_TEST_TIMEOUTS": str(log),
                                        "CTXFIT_HUB_TIMEOUT_SECONDS": "1", "HF_HUB_ETAG_TIMEOUT": "1",
                                        "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
        cli = RECORD_TIMEOUTS + "from ctxfit.cli import main\nsys.exit(main(sys.argv[1:]))\n"
        run = subprocess.run([sys.executable, "-c", cli, "plan", "-f", str(path)], capture_output=True, text=True,
                             timeout=120, env=env, cwd=ROOT)  # hang guard, not a speed check
        stalled = hub.stalled()
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "HubUnreachable" in lines[0], run.stderr
    assert "Traceback" not in run.stderr
    assert recorded_timeouts(log) == [1.0], run.stderr
    assert stalled >= 1, "ctxfit plan never reached the silent Hub"


@pytest.mark.parametrize("endpoint", ["notaurl", "ftp://mirror.internal", "https://", "http://[::1", "",
                                      "http://mirror.internal:99999", "http://mirror.internal:port"])
def test_an_endpoint_that_is_not_an_http_url_is_a_setting_to_fix_not_a_hub_that_is_down(
        endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    for offline in (False, True):
        with pytest.raises(ResolveError) as bad:
            resolve_hub("Qwen/Qwen2.5-7B", offline=offline)
        assert bad.value.kind is ResolveKind.BAD_ENDPOINT and not bad.value.kind.waiting
        assert repr(endpoint) in bad.value.line() and "HF_ENDPOINT must be the http(s) URL" in bad.value.line()


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_local_directory_without_a_model_says_what_the_directory_needs(tmp_path: Path, make: str) -> None:
    """``--model-dir`` (or a volume path): the hint is about the directory, not "give --model-dir" again."""
    from ctxfit.hub.resolve import resolve_local

    directory = tmp_path / "model"
    if make == "empty":
        directory.mkdir()
    with pytest.raises(ResolveError) as bad:
        resolve_local(directory, repo="acme/local")
    line = bad.value.line()
    assert bad.value.kind is ResolveKind.NOT_FOUND and str(directory) in line, line
    assert "--model-dir" not in line and "config.json and *.safetensors" in line, line


def test_offline_names_the_cache_folder_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CTXFIT_CACHE`` moves the resolution cache: the hint names that folder, not ~/.cache/ctxfit."""
    monkeypatch.setenv("CTXFIT_CACHE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    with pytest.raises(ResolveError) as bad:
        resolve_hub("acme/never-resolved", offline=True)
    assert bad.value.kind is ResolveKind.OFFLINE, bad.value.line()
    assert f"in {tmp_path / 'elsewhere' / 'resolved'})" in bad.value.line(), bad.value.line()


def test_a_hugging_face_cache_that_is_no_directory_is_a_setting_to_fix_not_a_hub_that_is_down(tmp_path: Path) -> None:
    """HF_HOME naming a file (or a read-only volume): huggingface_hub's NotADirectoryError was read as
    HubUnreachable ("check the network"), which the operator would wait on forever."""
    from tests.unit.hub.silenthub import hub_env as plain_env

    (tmp_path / "hf-file").write_text("")
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                    "metadata": {"name": "cache"}, "spec": _spec("acme/not-in-any-catalog")}))
    env = plain_env(tmp_path, "http://127.0.0.1:9", {"HF_HOME": str(tmp_path / "hf-file")})
    run = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path)], capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT)  # a hang guard
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "LocalCacheUnusable: NotADirectoryError" in lines[0] and str(tmp_path / "hf-file") in lines[0], lines[0]
    assert "HF_HOME" in lines[0] and "HubUnreachable" not in lines[0], lines[0]
    assert not ResolveKind.CACHE_UNUSABLE.waiting


def test_every_resolve_kind_has_a_hint_and_an_operator_reason() -> None:
    from ctxfit.controller.converge.resolution import HINTS as OPERATOR_HINTS
    from ctxfit.controller.converge.resolution import REASONS
    from ctxfit.hub.errors import HINTS

    for kind in ResolveKind:
        assert kind in HINTS and kind.value in REASONS and kind.value in OPERATOR_HINTS, kind
