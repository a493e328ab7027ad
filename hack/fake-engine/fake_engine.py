"""A stand-in inference engine for the harness's real node (standard library only): started as vLLM is
(``vllm serve MODEL --port P --max-model-len L ...``, the command ctxfit renders) or as SGLang
(``python3 -m sglang.launch_server --model-path M --port P --context-length L ...``), it

- prints a real-format start-up log (hack/sim_startup.py: vLLM V1 / SGLang lines) for a KV pool of
  ``FAKE_ENGINE_KV_CACHE_BYTES`` at ``FAKE_ENGINE_KV_BYTES_PER_TOKEN`` bytes per token, after
  ``FAKE_ENGINE_LOAD_SECONDS`` of "loading" during which its port is closed (as an engine's is);
- then serves ``GET /health`` (200), ``GET /v1/models`` (the served model with ``max_model_len`` = the context it
  was given), ``GET /version`` and a few ``/metrics`` series;
- fails when the context does not fit its pool, in the engine's words: vLLM's ``_check_enough_kv_cache_memory``
  ValueError (tests/fixtures/failures.yaml), or SGLang's "Not enough memory. Please try to increase
  --mem-fraction-static." (``model_runner.py``), exit 1;
- or fails with any text: ``FAKE_ENGINE_FAIL`` (printed to stderr, exit ``FAKE_ENGINE_EXIT_CODE``, default 1).

Every start prints ``fake-engine: <argv>`` first, so a test can see the flags it was given.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sim_startup import GIB, sglang_startup_log, vllm_startup_log


def _flag(args: list[str], *names: str, default: str | None = None) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return default


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def main(kind: str, args: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as PID 1 nothing else would end it on SIGTERM
    print(f"fake-engine: {kind} {' '.join(args)}", flush=True)
    if kind == "vllm":
        if args[:1] == ["serve"]:
            args = args[1:]
        model = args[0] if args and not args[0].startswith("-") else _flag(args, "--model", default="model")
        context = int(_flag(args, "--max-model-len", default="4096") or 4096)
        served = _flag(args, "--served-model-name", default=model)
    else:
        model = _flag(args, "--model-path", "--model", default="model")
        context = int(_flag(args, "--context-length", default="4096") or 4096)
        served = _flag(args, "--served-model-name", default=model)
    host = _flag(args, "--host", default="0.0.0.0") or "0.0.0.0"
    port = int(_flag(args, "--port", default="8000") or 8000)
    per_token = _env_int("FAKE_ENGINE_KV_BYTES_PER_TOKEN", 131072)
    pool = _env_int("FAKE_ENGINE_KV_CACHE_BYTES", 4 * GIB)
    time.sleep(float(os.environ.get("FAKE_ENGINE_LOAD_SECONDS", "3")))

    failure = os.environ.get("FAKE_ENGINE_FAIL", "")
    if failure:
        print(failure, file=sys.stderr, flush=True)
        return _env_int("FAKE_ENGINE_EXIT_CODE", 1)
    tokens = pool // per_token // 16 * 16
    if context * per_token > pool:
        if kind == "vllm":  # vLLM V1 0.19 v1/core/kv_cache_utils.py _check_enough_kv_cache_memory
            print("(EngineCore_DP0 pid=212) ERROR [core.py:708] EngineCore failed to start.", file=sys.stderr)
            print(f"ValueError: To serve at least one request with the models's max seq len ({context}), "
                  f"({context * per_token / GIB:.2f} GiB KV cache is needed, which is larger than the available KV "
                  f"cache memory ({pool / GIB:.2f} GiB). Based on the available memory, the estimated maximum model "
                  f"length is {tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                  "initializing the engine.", file=sys.stderr)
            print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                  file=sys.stderr, flush=True)
        else:  # SGLang 0.2.7-0.5.23 model_runner.py's wording (its pool-too-small error; here: below one request)
            fraction = _flag(args, "--mem-fraction-static", default="0.88")
            print("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                  f"Current value: mem_fraction_static={fraction}", file=sys.stderr, flush=True)
        return 1
    if kind == "vllm":
        print(vllm_startup_log(kv_cache_bytes=pool, kv_bytes_per_token=per_token, max_model_len=context), end="")
    else:
        print(sglang_startup_log(max_total_num_tokens=tokens, context_len=context, kv_bytes_per_token=per_token),
              end="")
    sys.stdout.flush()
    _serve(host, port, kind, str(served), context)
    return 0


def _serve(host: str, port: int, kind: str, served: str, context: int) -> None:
    models = {"object": "list", "data": [{"id": served, "object": "model", "created": int(time.time()),
                                          "owned_by": kind, "root": served, "parent": None,
                                          "max_model_len": context}]}
    metrics = (f'vllm:num_requests_running{{model_name="{served}"}} 0\n'
               f'vllm:num_requests_waiting{{model_name="{served}"}} 0\n'
               f'vllm:kv_cache_usage_perc{{model_name="{served}"}} 0.0\n')

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"", "text/plain")
            elif path == "/v1/models":
                self._send(200, json.dumps(models).encode(), "application/json")
            elif path == "/version":
                self._send(200, json.dumps({"version": "fake"}).encode(), "application/json")
            elif path == "/metrics":
                self._send(200, metrics.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            status = args[1] if len(args) > 1 else ""
            print(f'INFO:     {self.client_address[0]} - "{self.command} {self.path}" {status}', flush=True)

    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
