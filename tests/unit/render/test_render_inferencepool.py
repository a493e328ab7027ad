"""InferencePool rendering: golden files per engine and topology, and the routing contracts.

Golden files: ``tests/golden/gateway/<case>/inferenceserver.yaml`` -> ``expected.yaml`` (the InferencePool when
the server creates one, the workload and the Service, for attempt 1 of the planner's configuration).
Regenerate only on purpose: ``CTXFIT_UPDATE_GOLDEN=1 pytest tests/unit/test_render_inferencepool.py``.
tests/e2e/test_gateway_goldens.py applies every golden InferencePool to the real CRD.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServer, InferenceServerSpec
from ctxfit.api.routing import MAX_TARGET_PORTS, rank_ports_apply
from ctxfit.api.validation import LABEL_VALUE, managed_flag_in
from ctxfit.budget.multinode import plan_group
from ctxfit.engines.ranks import RANKS_SCRIPT, READY_SCRIPT
from ctxfit.render import RenderInput
from ctxfit.render.deployment import port_name
from ctxfit.render.inferencepool import (
    ACTIVE_PORTS_ANNOTATIONS,
    CONTEXT_LABEL,
    CONTEXT_RANGE_LABEL,
    POOL_LABEL,
    context_range,
    pool_input,
    render_inference_pool,
    selects,
    server_ports,
)
from ctxfit.render.leaderworkerset import render_service_for, render_workload

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "gateway"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "inferenceserver.yaml").exists())
UID = "00000000-0000-4000-8000-000000000026"
NAMESPACE = "inference"


def server(case: str) -> InferenceServer:
    return InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))


def render_input(case: str) -> RenderInput:
    srv = server(case)
    result, _ = plan_group(srv.spec)
    assert result.fits, result.reasons
    return RenderInput(name=srv.metadata.name, namespace=NAMESPACE, uid=UID, spec=srv.spec,
                       effective=result.effective, attempt=1, gpu_product=srv.spec.gpu.product)


def rendered(case: str) -> list[dict[str, Any]]:
    inp = render_input(case)
    docs = []
    if inp.spec.routing.inference_pool is not None and inp.spec.routing.inference_pool.create is not None:
        docs.append(render_inference_pool(pool_input(inp.name, NAMESPACE, UID, inp.spec)))
    return [*docs, render_workload(inp), render_service_for(inp)]


def serving_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """(template, serves the API) of every pod template of a workload."""
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]]
    return [workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]]


def worker_template(workload: dict[str, Any]) -> dict[str, Any] | None:
    if workload["kind"] != "LeaderWorkerSet":
        return None
    return dict(workload["spec"]["leaderWorkerTemplate"]["workerTemplate"])


def test_every_engine_and_topology_has_a_golden_case() -> None:
    specs = [server(c).spec for c in CASES]
    for engine in ("vllm", "sglang"):
        mine = [s for s in specs if s.engine.kind.value == engine]
        assert any(s.nodes == 1 and s.parallelism.data == 1 for s in mine), engine  # single pod
        assert any(s.nodes == 1 and s.parallelism.data > 1 for s in mine), engine  # data parallel
        assert any(s.nodes > 1 for s in mine), engine  # LeaderWorkerSet
    assert any(s.routing.inference_pool and s.routing.inference_pool.join for s in specs)


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    docs = rendered(case)
    expected = GOLDEN / case / "expected.yaml"
    text = yaml.safe_dump_all(docs, sort_keys=False, width=120)
    if os.environ.get("CTXFIT_UPDATE_GOLDEN") == "1":
        expected.write_text(text)
    assert expected.exists(), f"missing {expected}: run with CTXFIT_UPDATE_GOLDEN=1"
    assert list(yaml.safe_load_all(expected.read_text())) == docs


@pytest.mark.parametrize("case", CASES)
def test_selector_is_exactly_the_serving_pods(case: str) -> None:
    """The pool selects every pod that serves the API (single pods, LWS leaders) and no LWS worker."""
    inp = render_input(case)
    pool_routing = inp.spec.routing.inference_pool
    assert pool_routing is not None
    pool = {"spec": {"selector": {"matchLabels": {POOL_LABEL: pool_routing.pool_name(inp.name)}}}}
    workload = render_workload(inp)
    for template in serving_templates(workload):
        assert selects(pool, template["metadata"]["labels"])
    worker = worker_template(workload)
    if worker is not None:
        labels = worker["metadata"]["labels"]
        assert not selects(pool, labels)
        assert CONTEXT_RANGE_LABEL not in labels and CONTEXT_LABEL not in labels
        assert not set(ACTIVE_PORTS_ANNOTATIONS) & set(worker["metadata"]["annotations"])


@pytest.mark.parametrize("case", CASES)
def test_ports_labels_and_annotations_agree(case: str) -> None:
    """targetPorts are the serving container's ports (one per rank), the active-ports annotations name them, the
    context labels carry the effective context in the router's ``min-max`` format."""
    inp = render_input(case)
    ports = server_ports(inp.spec)
    for template in serving_templates(render_workload(inp)):
        container = template["spec"]["containers"][0]
        assert [p["containerPort"] for p in container["ports"]] == list(ports)
        assert [p["name"] for p in container["ports"]] == [port_name(r) for r in range(len(ports))]
        annotations, labels = template["metadata"]["annotations"], template["metadata"]["labels"]
        for key in ACTIVE_PORTS_ANNOTATIONS:
            assert annotations[key] == ",".join(map(str, ports))
        tokens = inp.effective.context_length
        assert labels[CONTEXT_RANGE_LABEL] == f"0-{tokens}" and labels[CONTEXT_LABEL] == str(tokens)
        assert re.match(LABEL_VALUE, labels[CONTEXT_RANGE_LABEL]) and len(labels[CONTEXT_RANGE_LABEL]) <= 63
    pool = inp.spec.routing.inference_pool
    if pool is not None and pool.create is not None:
        doc = render_inference_pool(pool_input(inp.name, NAMESPACE, UID, inp.spec))
        assert [p["number"] for p in doc["spec"]["targetPorts"]] == list(ports)


def test_data_parallel_vllm_serves_one_port_per_rank() -> None:
    inp = render_input("vllm-dp2")
    container = render_workload(inp)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["python3", "-c"]
    assert container["args"][:5] == ["2", "1", "8000", "--data-parallel-rank", ""]
    program = container["args"][5:]
    assert program[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert "--port" not in program and "--data-parallel-rank" not in program  # the launcher's, per rank
    assert program[program.index("--data-parallel-size") + 1] == "2"
    assert container["readinessProbe"]["exec"]["command"][-2:] == ["8000", "8001"]
    assert container["startupProbe"]["httpGet"]["port"] == "http"
    service = render_service_for(inp)
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", 8000), ("http-rank1", 8001)]


def test_data_parallel_sglang_serves_one_server_per_rank() -> None:
    """SGLang in a pool: one launch_server per replica (no --dp-size: each is one replica), the rank in
    SGLANG_DP_RANK so its log lines say "DPr", a port per rank, readiness over every rank."""
    inp = render_input("sglang-dp2")
    container = render_workload(inp)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["python3", "-c"]
    assert container["args"][:5] == ["2", "1", "8000", "", "SGLANG_DP_RANK"]
    program = container["args"][5:]
    assert program[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--port" not in program and "--dp-size" not in program
    assert program[program.index("--tp-size") + 1] == "1"
    assert container["readinessProbe"]["exec"]["command"][-3:] == ["/health", "8000", "8001"]
    assert container["startupProbe"]["httpGet"]["port"] == "http"
    assert server_ports(inp.spec) == (8000, 8001)
    service = render_service_for(inp)
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", 8000), ("http-rank1", 8001)]


def test_one_port_where_ranks_cannot_serve_alone() -> None:
    """Unpooled DP, vLLM before external load balancing, and SGLang's DP attention (its ranks are one model
    instance) keep one port."""
    spec = server("vllm-dp2").spec.model_copy(update={"routing": server("sglang-single").spec.routing
                                                       .model_copy(update={"inference_pool": None})})
    assert server_ports(spec) == (8000,)
    old = server("vllm-dp2").spec.model_copy(deep=True)
    old.engine.version = "0.9.2"
    assert server_ports(old) == (8000,)
    unpooled = server("sglang-dp2").spec.model_copy(update={"routing": spec.routing})
    assert server_ports(unpooled) == (8000,)
    attention = server("sglang-dp2").spec.model_copy(deep=True)
    attention.engine.args = ["--enable-dp-attention"]
    assert server_ports(attention) == (8000,)
    assert rank_ports_apply("sglang", 1, 2, True) and not rank_ports_apply("sglang", 1, 2, True,
                                                                          ["--enable-dp-attention"])
    assert not rank_ports_apply("sglang", 2, 2, True) and not rank_ports_apply("vllm", 1, 1, True)


def test_served_model_name_is_rendered_and_managed() -> None:
    for case, flag in (("vllm-single", "llama-3.1-8b"), ("sglang-single", "qwen3-32b")):
        args = render_workload(render_input(case))["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--served-model-name") + 1] == flag
        assert managed_flag_in(["--served-model-name", "x"], server(case).spec.engine.kind.value) is not None
    with pytest.raises(ValueError, match=r"spec\.routing\.servedModelName"):
        raw = yaml.safe_load((GOLDEN / "vllm-single" / "inferenceserver.yaml").read_text())
        raw["spec"]["engine"]["args"] = ["--served-model-name=other"]
        InferenceServer.model_validate(raw)


def test_user_labels_cannot_claim_a_pool() -> None:
    raw = yaml.safe_load((GOLDEN / "sglang-single" / "inferenceserver.yaml").read_text())
    raw["spec"]["routing"] = {}
    raw["spec"]["pod"] = {"labels": {POOL_LABEL: "someone-elses", CONTEXT_RANGE_LABEL: "0-999999", "team": "a"},
                          "annotations": {ACTIVE_PORTS_ANNOTATIONS[0]: "9999"}}
    srv = InferenceServer.model_validate(raw)
    result, _ = plan_group(srv.spec)
    inp = RenderInput(name="x", namespace=NAMESPACE, uid=UID, spec=srv.spec, effective=result.effective, attempt=1)
    meta = render_workload(inp)["spec"]["template"]["metadata"]
    assert POOL_LABEL not in meta["labels"] and CONTEXT_RANGE_LABEL not in meta["labels"]
    assert meta["labels"]["team"] == "a"
    assert ACTIVE_PORTS_ANNOTATIONS[0] not in meta["annotations"]


def test_shared_pool_lists_every_servers_ports() -> None:
    creator = render_input("vllm-single")
    joined = server_ports(server("vllm-dp2").spec)
    doc = render_inference_pool(pool_input(creator.name, NAMESPACE, UID, creator.spec, (joined, (8000,))))
    assert [p["number"] for p in doc["spec"]["targetPorts"]] == [8000, 8001]
    assert doc["metadata"]["ownerReferences"][0]["uid"] == UID
    assert doc["metadata"]["annotations"] == {"ctxfit.io/model": "meta-llama/Llama-3.1-8B-Instruct",
                                              "ctxfit.io/served-model-name": "llama-3.1-8b"}


def test_a_joiner_renders_no_pool() -> None:
    inp = render_input("vllm-join-l4")
    with pytest.raises(ValueError, match="create is not set"):
        pool_input(inp.name, NAMESPACE, UID, inp.spec)
    labels = render_workload(inp)["spec"]["template"]["metadata"]["labels"]
    assert labels[POOL_LABEL] == "llama31-8b"


def test_context_range_is_what_the_router_parses() -> None:
    """llm-d's ``parseContextRange``: one ``min-max`` pair of integers with min <= max."""
    for tokens in (16, 8192, 131072, 1 << 27):
        lo, hi = context_range(tokens).split("-")
        assert int(lo) == 0 and int(hi) == tokens


def _spec(case: str, **update: Any) -> dict[str, Any]:
    raw = yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text())
    raw["spec"].update(update)
    return raw


def test_too_many_rank_ports_are_refused() -> None:
    data = MAX_TARGET_PORTS + 1
    raw = _spec("vllm-dp2", parallelism={"data": data}, gpu={"count": data, "product": "NVIDIA-H100-80GB-HBM3"})
    with pytest.raises(ValueError, match="at most 8"):
        InferenceServer.model_validate(raw)
    raw["spec"]["routing"] = {}
    assert InferenceServer.model_validate(raw).spec.parallelism.data == data  # no pool: one port
    raw = _spec("sglang-dp2", parallelism={"data": data}, gpu={"count": data, "product": "NVIDIA-H100-80GB-HBM3"})
    with pytest.raises(ValueError, match="at most 8"):
        InferenceServer.model_validate(raw)
    raw["spec"]["engine"]["args"] = ["--enable-dp-attention"]  # one server, one port: no limit from the pool
    assert InferenceServer.model_validate(raw).spec.parallelism.data == data
    raw = _spec("vllm-dp2", serving={"port": 65535})
    with pytest.raises(ValueError, match="above 65535"):
        InferenceServerSpec.model_validate(raw["spec"])


def test_create_xor_join_and_picker_port() -> None:
    for pool in ({}, {"create": {}, "join": {"name": "p"}}):
        with pytest.raises(ValueError, match="exactly one of create and join"):
            InferenceServer.model_validate(_spec("sglang-single", routing={"inferencePool": pool}))
    with pytest.raises(ValueError, match="port: required when kind is Service"):
        InferenceServer.model_validate(_spec("sglang-single", routing={
            "inferencePool": {"create": {"endpointPickerRef": {"name": "epp"}}}}))
    ok = InferenceServer.model_validate(_spec("sglang-single", routing={
        "inferencePool": {"create": {"endpointPickerRef": {"name": "epp", "kind": "Gateway",
                                                           "group": "example.com"}}}}))
    assert ok.spec.routing.inference_pool is not None


# ---- the rank launcher and the multi-rank readiness check, run for real


FAKE_RANK = (  # the failing rank exits (ending the launcher) only once every other rank has written: no race
    "import os, pathlib, sys, time\n"
    "port, rank = sys.argv[sys.argv.index('--port') + 1], sys.argv[sys.argv.index('--data-parallel-rank') + 1]\n"
    "line = f'rank {rank} port {port} gpus {os.environ[\"CUDA_VISIBLE_DEVICES\"]} args {sys.argv[1:3]}\\n'\n"
    "os.write(1, line.encode())  # one write: the ranks share the pipe\n"
    "marks = pathlib.Path(os.environ['RANK_MARKS'])\n"
    "(marks / rank).touch()  # after the write: the line is in the pipe\n"
    "if rank != os.environ.get('FAIL_RANK'):\n"
    "    time.sleep(120)\n"
    "    sys.exit(0)\n"
    "deadline = time.monotonic() + 45  # generous; past it the missing line fails the test, not a hang\n"
    "while len(list(marks.iterdir())) < int(os.environ['RANKS']) and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "sys.exit(3)\n"
)


def _launch(env: dict[str, str], marks: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", RANKS_SCRIPT, "3", "2", "8100", "--data-parallel-rank", "",
                             sys.executable, "-c", FAKE_RANK, "--model", "m"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "RANKS": "3", "RANK_MARKS": str(marks), **env}, start_new_session=True)


FAKE_ENV_RANK = (  # rank 1 exits (ending the launcher) only once rank 0 has written: no race under load
    "import os, pathlib, sys, time\n"
    "port, rank = sys.argv[sys.argv.index('--port') + 1], os.environ['SGLANG_DP_RANK']\n"
    "os.write(1, f'rank {rank} port {port} gpus {os.environ[\"CUDA_VISIBLE_DEVICES\"]} '\n"
    "         f'args {sys.argv[1:]}\\n'.encode())\n"
    "mark = pathlib.Path(os.environ['RANK0_WROTE'])\n"
    "if rank == '0':\n"
    "    mark.touch()\n"
    "    time.sleep(30)\n"
    "while not mark.exists():\n"
    "    time.sleep(0.05)\n"
)


def test_launcher_gives_the_rank_by_environment_when_the_engine_has_no_rank_flag(tmp_path: Path) -> None:
    """SGLang's form: no rank flag, SGLANG_DP_RANK set per rank; a rank exiting 0 ends the launcher with 0 (the
    other rank stopped)."""
    proc = subprocess.run([sys.executable, "-c", RANKS_SCRIPT, "2", "1", "8200", "", "SGLANG_DP_RANK",
                           sys.executable, "-c", FAKE_ENV_RANK, "--model-path", "m"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "RANK0_WROTE": str(tmp_path / "rank0")})
    assert proc.returncode == 0, proc.stderr
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 port 8200 gpus 0 args ['--model-path', 'm', '--port', '8200']",
        "rank 1 port 8201 gpus 1 args ['--model-path', 'm', '--port', '8201']"]


def _stop(proc: subprocess.Popen[str]) -> None:
    """A launcher a failed test left running, ended with its ranks (its own session; not yet reaped, so the group
    is still this test's)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _catches_sigterm(pid: int) -> bool:
    """The process has a SIGTERM handler (Linux: ``SigCgt`` of /proc/<pid>/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def test_launcher_starts_every_rank_on_its_gpus_and_port_and_fails_with_a_failed_rank(tmp_path: Path) -> None:
    proc = _launch({"FAIL_RANK": "1"}, tmp_path)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 3, out
    lines = sorted(line for line in out.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0 port 8100 gpus 0,1 args ['--model', 'm']",
                     "rank 1 port 8101 gpus 2,3 args ['--model', 'm']",
                     "rank 2 port 8102 gpus 4,5 args ['--model', 'm']"]


@pytest.mark.timeout(180)  # hang guard, not a speed check
def test_launcher_forwards_sigterm_to_every_rank(tmp_path: Path) -> None:
    """SIGTERM to the launcher reaches the ranks: the first rank to end died of it (the ranks would sleep 120 s,
    past the wait's hang guard), and the launcher says so."""
    proc = _launch({}, tmp_path)
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        for line in iter(proc.stdout.readline, ""):
            seen.append(line)
            if len(seen) == 3:
                break
        assert len(seen) == 3 and all(line.startswith("rank") for line in seen), seen
        while not _catches_sigterm(proc.pid):  # the launcher sets its handler once every rank is started
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)  # hang guard, not a speed check: unforwarded, the ranks would outlive it
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM  # the ranks died of SIGTERM; the launcher says so


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_readiness_needs_every_rank() -> None:
    servers = [HTTPServer(("127.0.0.1", 0), _Health) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    ports = [str(s.server_address[1]) for s in servers]
    try:
        ok = subprocess.run([sys.executable, "-c", READY_SCRIPT, "/health", *ports], capture_output=True, timeout=30)
        assert ok.returncode == 0, ok.stderr
        servers[1].shutdown()
        servers[1].server_close()
        bad = subprocess.run([sys.executable, "-c", READY_SCRIPT, "/health", *ports], capture_output=True, timeout=30)
        assert bad.returncode != 0
    finally:
        servers[0].shutdown()
        servers[0].server_close()
