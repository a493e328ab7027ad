"""hack/fake-engine, hack/hub_standin.py and images.write_docker_archive without a cluster:

- the fake engine (run as its image runs it, a child process on loopback): a context that fits its pool gives
  vLLM's start-up lines (which ctxfit's own start-up parser reads back as that pool) and /health, /v1/models;
  one that does not gives vLLM's KV-cache error, which ctxfit's classifier reads as KVCacheTooSmall with the
  engine's numbers; FAKE_ENGINE_FAIL prints any text;
- the Hub stand-in answers the real huggingface_hub client: snapshot_download fetches exactly the allowed files;
- a docker archive written without an engine is well-formed and deterministic.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from ctxfit.api import EngineKind
from ctxfit.recovery import FailureKind, Observation, classify

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
import images  # noqa: E402
from hub_standin import HubStandIn, tiny_safetensors  # noqa: E402

GIB = 1 << 30


def _engine(*args: str, pool: int, port: int | None = None, **env: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "PYTHONPATH": str(HACK), "FAKE_ENGINE_LOAD_SECONDS": "0",
               "FAKE_ENGINE_KV_CACHE_BYTES": str(pool), "FAKE_ENGINE_KV_BYTES_PER_TOKEN": "131072", **env}
    argv = [sys.executable, str(HACK / "fake-engine" / "fake_engine.py"), "vllm", "serve", "m", *args]
    if port is not None:
        argv += ["--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_context_that_does_not_fit_fails_with_vllms_text() -> None:
    proc = _engine("--max-model-len", "32768", pool=3 * GIB)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, (out, err)
    failure = classify(Observation(reason="Error", exit_code=1, message=err), EngineKind.VLLM)
    assert failure.kind is FailureKind.KV_CACHE_TOO_SMALL, failure
    assert failure.numbers["requestedContextLength"] == 32768
    assert failure.numbers["estimatedMaxContextLength"] == 24576  # 3 GiB / 128 KiB per token


def test_fake_engine_fail_prints_any_text() -> None:
    proc = _engine("--max-model-len", "1024", pool=GIB, FAKE_ENGINE_FAIL="torch.OutOfMemoryError: CUDA out of memory.",
                   FAKE_ENGINE_EXIT_CODE="3")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3 and "CUDA out of memory" in err


def test_a_context_that_fits_serves_and_logs_the_pool() -> None:
    port = _free_port()
    proc = _engine("--max-model-len", "16384", "--served-model-name", "served", pool=3 * GIB, port=port)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            models = json.loads(r.read())
        assert models["data"][0]["id"] == "served" and models["data"][0]["max_model_len"] == 16384
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0  # SIGTERM ends it cleanly (PID 1 in its image)
    assert "Available KV cache memory: 3.00 GiB" in out and "GPU KV cache size: 24,576 tokens" in out


def test_hub_standin_serves_the_real_client(tmp_path: Path) -> None:
    from huggingface_hub import HfApi, snapshot_download

    shard = tiny_safetensors({"w": ("BF16", [8, 8])})
    repo = {"config.json": b"{}", "model.safetensors": shard, "README.md": b"x"}
    with HubStandIn({"org/model": repo}) as hub:
        info = HfApi(endpoint=hub.url).model_info("org/model", files_metadata=True)
        assert {s.rfilename: s.size for s in info.siblings or []} == {k: len(v) for k, v in repo.items()}
        path = Path(snapshot_download("org/model", endpoint=hub.url, cache_dir=tmp_path,
                                      allow_patterns=["*.safetensors", "config.json"]))
        assert (path / "model.safetensors").read_bytes() == shard and not (path / "README.md").exists()
        assert hub.served["model.safetensors"] == len(shard) and "README.md" not in hub.served
        # a second run finds everything and downloads no body again
        snapshot_download("org/model", endpoint=hub.url, cache_dir=tmp_path, allow_patterns=["*.safetensors"])
        assert hub.served["model.safetensors"] == len(shard)


def test_docker_archive_is_well_formed_and_deterministic(tmp_path: Path) -> None:
    files = {"pause": (b"\x7fELF...", 0o755)}
    a = images.write_docker_archive(tmp_path / "a.tar", "localhost/x:1", files, {"Entrypoint": ["/pause"]})
    b = images.write_docker_archive(tmp_path / "b.tar", "localhost/x:1", files, {"Entrypoint": ["/pause"]})
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        (entry,) = manifest
        assert entry["RepoTags"] == ["localhost/x:1"]
        config = json.load(tar.extractfile(entry["Config"]))  # type: ignore[arg-type]
        assert config["config"]["Entrypoint"] == ["/pause"] and len(config["rootfs"]["diff_ids"]) == 1
        with tarfile.open(fileobj=tar.extractfile(entry["Layers"][0])) as layer:
            member = layer.getmember("pause")
            assert member.mode == 0o755 and layer.extractfile(member).read() == b"\x7fELF..."  # type: ignore[union-attr]


def test_sglang_entry_point_fails_with_sglangs_text() -> None:
    environ = {**os.environ, "PYTHONPATH": f"{HACK}{os.pathsep}{HACK / 'fake-engine'}", "FAKE_ENGINE_LOAD_SECONDS": "0",
               "FAKE_ENGINE_KV_CACHE_BYTES": str(GIB)}
    proc = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--context-length",
                           "65536", "--mem-fraction-static", "0.8"], env=environ, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 1, proc.stderr
    failure = classify(Observation(reason="Error", exit_code=1, message=proc.stderr), EngineKind.SGLANG)
    assert failure.kind is FailureKind.STATIC_MEMORY_TOO_SMALL, failure
