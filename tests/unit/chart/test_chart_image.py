"""The operator image (Dockerfile), without a Docker engine: its shape is checked, then its build-stage
RUN commands run as written in a scratch root (container paths mapped into tmp_path), and its ENTRYPOINT
runs from the resulting venv with the image's ENV until kopf's liveness endpoint and /metrics answer.

Deliberate differences from `docker build`, all listed here: the context is the repo filtered by
.dockerignore; `python` is this interpreter (same minor version as the pinned base); pip keeps its cache
(PIP_NO_CACHE_DIR is dropped) so the test stays fast; the runtime stage's single `useradd` is checked,
not run (it needs root and a throwaway system); the ports come from free ones instead of 8080/9090; the
kubeconfig points at a closed port (the operator must start and stay up without a cluster).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.unit.chart.chartkit import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|cmake|rustc|cargo|python3-dev)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; continuation lines joined, comments dropped."""
    logical: list[str] = []
    buffer = ""
    for line in text.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1] + " "
            continue
        logical.append(buffer + line.strip())
        buffer = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            stages.append(Stage(base, parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def parse_env(arg: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in shlex.split(arg))


ARGS, STAGES = parse_dockerfile(DOCKERFILE.read_text())
BUILD, RUNTIME = STAGES[0], STAGES[-1]


def test_multi_stage_on_a_pinned_python_base() -> None:
    assert len(STAGES) == 2 and BUILD.name == "build"
    base = ARGS["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base), f"base image not pinned to a patch release: {base}"
    assert BUILD.base == RUNTIME.base == base
    assert RUNTIME.all("COPY") == ["--from=build /opt/ctxfit /opt/ctxfit"]  # the venv, nothing else


def test_runtime_stage_is_non_root_without_build_tools() -> None:
    (user,) = RUNTIME.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0  # numeric: runAsNonRoot checks it
    (useradd,) = RUNTIME.all("RUN")
    assert re.fullmatch(rf"useradd --uid {uid} --user-group --no-create-home --home-dir /tmp "
                        r"--shell /usr/sbin/nologin \w+", useradd)
    for keyword, arg in RUNTIME.instructions:
        assert not COMPILERS.search(arg), f"{keyword} {arg}"
        assert "apt-get" not in arg and "pip install" not in arg, f"{keyword} {arg}"


def test_entrypoint_runs_the_operator_with_liveness() -> None:
    (entrypoint,) = RUNTIME.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["python", "-m", "ctxfit.controller"]
    env = parse_env(" ".join(RUNTIME.all("ENV")))
    assert int(env["CTXFIT_HEALTH_PORT"]) > 0  # 0 would disable kopf's liveness endpoint
    assert env["CTXFIT_HEALTH_PORT"] in RUNTIME.all("EXPOSE")[0].split()
    assert env["PATH"].startswith("/opt/ctxfit/bin:")


def _context_files() -> list[Path]:
    """Files of the build context: the repo filtered by .dockerignore (last matching pattern wins)."""
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]

    def ignored(rel: str) -> bool:
        verdict = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            pat = pattern[1:] if negate else pattern
            pat = pat.rstrip("/")
            parts = rel.split("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            if any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.replace("**/", "")) or
                   (pat.startswith("**/") and fnmatch.fnmatchcase(parts[i], pat[3:]))
                   for i, p in enumerate(prefixes)):
                verdict = not negate
        return verdict

    out = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if path.is_file() and not rel.startswith(".git/") and not ignored(rel):
            out.append(path)
    return out


def test_build_context_is_small() -> None:
    files = {p.relative_to(REPO).as_posix() for p in _context_files()}
    assert {"pyproject.toml", "README.md", "operator/ctxfit/__init__.py"} <= files
    assert all(f in ("pyproject.toml", "README.md") or f.startswith("operator/ctxfit/") for f in files), \
        sorted(f for f in files if not f.startswith("operator/ctxfit/"))[:10]
    assert not [f for f in files if "__pycache__" in f or ".egg-info" in f]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - localhost
        return response.status, response.read().decode()


@pytest.mark.timeout(120)
def test_build_and_entrypoint_in_a_venv(tmp_path: Path) -> None:
    """The Dockerfile's own RUN lines and ENTRYPOINT, executed; under ~40 s with a warm pip cache."""
    root = tmp_path / "root"  # container path /x -> root/x
    context = tmp_path / "context"
    for path in _context_files():
        target = context / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)

    def host(container_path: str) -> Path:
        return root / container_path.lstrip("/")

    def map_paths(command: str) -> str:
        return re.sub(r"(?<![\w.])(/(?:src|wheels|opt/ctxfit|tmp))\b", lambda m: str(host(m.group(1))), command)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXFIT_", "KUBECONFIG", "PYTHONPATH"))}
    workdir = root
    started = time.monotonic()
    for keyword, arg in BUILD.instructions:
        if keyword == "ENV":
            env.update({k: v for k, v in parse_env(arg).items() if k != "PIP_NO_CACHE_DIR"})
        elif keyword == "WORKDIR":
            workdir = host(arg)
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            *sources, dest = arg.split()
            dst = host(dest) if dest.startswith("/") else workdir / dest
            for source in sources:
                src = context / source.rstrip("/")
                if src.is_dir():
                    shutil.copytree(src, dst, dirs_exist_ok=True)
                elif dest.endswith("/"):
                    dst.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst / src.name)
                else:
                    shutil.copy2(src, dst)
        elif keyword == "RUN":
            command = map_paths(arg)
            command = re.sub(r"^python\b", shlex.quote(sys.executable), command)
            proc = subprocess.run(command, shell=True, cwd=workdir, env=env, capture_output=True, text=True,
                                  check=False)
            assert proc.returncode == 0, f"RUN {arg}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        else:
            pytest.fail(f"the test does not know how to run {keyword} {arg}: teach it")
    build_seconds = time.monotonic() - started

    # runtime stage: the image's ENV, then the ENTRYPOINT as written (python found on the venv's PATH)
    runtime_env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXFIT_", "PYTHON"))}
    for arg in RUNTIME.all("ENV"):
        for key, value in parse_env(arg).items():
            runtime_env[key] = map_paths(value).replace("$PATH", os.environ.get("PATH", ""))
    host("/tmp").mkdir(parents=True, exist_ok=True)
    health, metrics = _free_port(), _free_port()
    runtime_env.update(CTXFIT_HEALTH_PORT=str(health), CTXFIT_METRICS_PORT=str(metrics))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": f"http://127.0.0.1:{_free_port()}"}}],
        "users": [{"name": "none", "user": {}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}]}))
    runtime_env["KUBECONFIG"] = str(kubeconfig)
    entrypoint = json.loads(RUNTIME.all("ENTRYPOINT")[0])
    executable = shutil.which(entrypoint[0], path=runtime_env["PATH"])
    assert executable == str(host("/opt/ctxfit/bin/python")), executable
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        proc = subprocess.Popen([executable, *entrypoint[1:]], cwd=host("/tmp"), env=runtime_env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        answered: dict[str, tuple[int, str]] = {}
        while time.monotonic() < deadline and len(answered) < 2:
            assert proc.poll() is None, f"the operator exited {proc.returncode}:\n{log.read_text()[-4000:]}"
            for name, url in (("health", f"http://127.0.0.1:{health}/healthz"),
                              ("metrics", f"http://127.0.0.1:{metrics}/metrics")):
                if name not in answered:
                    try:
                        answered[name] = _get(url)
                    except OSError:
                        pass
            time.sleep(0.2)
        assert set(answered) == {"health", "metrics"}, f"no answer from {answered.keys()}:\n{log.read_text()[-4000:]}"
        assert answered["health"][0] == 200
        assert "ctxfit_reconcile_duration_seconds" in answered["metrics"][1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, -15), f"unclean stop {proc.returncode}:\n{log.read_text()[-4000:]}"
    installed = subprocess.run([executable, "-c", "import ctxfit, sys; print(ctxfit.__file__)"], cwd=host("/tmp"),
                               env=runtime_env, capture_output=True, text=True, check=True).stdout.strip()
    assert installed.startswith(str(host("/opt/ctxfit/lib"))), installed  # the wheel, not the source tree
    assert build_seconds < 60, f"the image build commands took {build_seconds:.0f} s"
