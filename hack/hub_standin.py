"""A minimal Hugging Face Hub stand-in for pods on the harness's real node: the routes huggingface_hub's
``model_info`` and ``snapshot_download`` use (huggingface_hub ``hf_api.py``, ``file_download.py``), serving
repos given as {repo: {path: bytes}} on an address the pods reach (``RealNode.host_ip``).

- ``GET /api/models/{repo}[/revision/{rev}]``: ``sha``, ``siblings`` (``rfilename``, ``size``, ``lfs`` for
  ``*.safetensors``);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag``/``X-Linked-Etag``,
  ``Content-Length``/``X-Linked-Size``, ``Range`` answered 206;
- errors with ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), as the Hub sends them.

``requests`` records (method, path) of every request, ``served`` the body bytes per file. (tests/hubfixtures, from
issue 23, is the full stand-in for in-process tests: fixture repos with generated tensors, gated repos; this one
only needs to be reachable from a pod.) Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HubStandIn:
    """``HubStandIn(repos, host).start()``; ``url`` is the HF_ENDPOINT to give the pods; ``stop()``."""

    def __init__(self, repos: dict[str, dict[str, bytes]], host: str = "127.0.0.1", port: int = 0) -> None:
        self.repos = repos
        self.shas = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.requests: list[tuple[str, str]] = []
        self.served: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="hub-standin")

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> HubStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HubStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:  # noqa: C901 - the Hub's routes, one class
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_HEAD(self) -> None:
                self._route(head=True)

            def do_GET(self) -> None:
                self._route(head=False)

            def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool, length: int | None = None,
                      count: str | None = None) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                if not head:
                    self.wfile.write(body)
                    if count:
                        with hub.lock:
                            hub.served[count] += len(body)

            def _error(self, status: int, code: str, head: bool) -> None:
                self._send(status, json.dumps({"error": code}).encode(),
                           {"X-Error-Code": code, "X-Error-Message": code, "Content-Type": "application/json"}, head)

            def _json(self, obj: Any, head: bool) -> None:
                self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"}, head)

            def _route(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                with hub.lock:
                    hub.requests.append((self.command, path))
                for pattern, action in ((r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", self._info),
                                        (r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/.*)?", self._tree),
                                        (r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self._resolve)):
                    m = re.fullmatch(pattern, path)
                    if m:
                        action(head, *m.groups())
                        return
                self._error(404, "NotFound", head)

            def _repo(self, repo: str, rev: str | None, head: bool) -> dict[str, bytes] | None:
                if repo not in hub.repos:
                    self._error(401, "RepoNotFound", head)  # the Hub answers 401 for an unknown repo
                    return None
                if rev not in (None, "main", hub.shas[repo]):
                    self._error(404, "RevisionNotFound", head)
                    return None
                return hub.repos[repo]

            def _entries(self, repo: str, files: dict[str, bytes], key: str) -> list[dict[str, Any]]:
                out = []
                for name, data in sorted(files.items()):
                    entry: dict[str, Any] = {key: name, "size": len(data), "oid" if key == "path" else "blobId":
                                             hashlib.sha1(data).hexdigest()}
                    if key == "path":
                        entry["type"] = "file"
                    if name.endswith(".safetensors"):
                        entry["lfs"] = {"sha256" if key == "rfilename" else "oid": hashlib.sha256(data).hexdigest(),
                                        "size": len(data), "pointerSize": 134}
                    out.append(entry)
                return out

            def _info(self, head: bool, repo: str, rev: str | None) -> None:
                files = self._repo(repo, rev, head)
                if files is not None:
                    self._json({"_id": hub.shas[repo][:24], "id": repo, "modelId": repo, "sha": hub.shas[repo],
                                "private": False, "gated": False, "disabled": False, "tags": [],
                                "siblings": self._entries(repo, files, "rfilename")}, head)

            def _tree(self, head: bool, repo: str, rev: str) -> None:
                files = self._repo(repo, rev, head)
                if files is not None:
                    self._json(self._entries(repo, files, "path"), head)

            def _resolve(self, head: bool, repo: str, rev: str, name: str) -> None:
                files = self._repo(repo, rev, head)
                if files is None:
                    return
                if name not in files:
                    self._error(404, "EntryNotFound", head)
                    return
                data = files[name]
                etag = f'"{hashlib.sha256(data).hexdigest()}"'
                headers = {"X-Repo-Commit": hub.shas[repo], "ETag": etag, "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if name.endswith(".safetensors"):
                    headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(len(data))}
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", (self.headers.get("Range") or "").strip())
                if m:
                    start = int(m.group(1))
                    end = min(int(m.group(2)) + 1 if m.group(2) else len(data), len(data))
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
                    self._send(206, data[start:end], headers, head, count=name)
                else:
                    self._send(200, data, headers, head, length=len(data), count=name)

        return Handler


def tiny_safetensors(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A valid safetensors file of zero-filled tensors {name: (dtype e.g. "BF16", shape)}."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "U8": 1}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + bytes(offset)


def demo_repo() -> dict[str, bytes]:
    """A tiny repo for any model name: a config, a tokenizer, one small safetensors shard (what `make kind-demo`'s
    download fetches instead of hundreds of GB)."""
    return {
        "config.json": json.dumps({"architectures": ["DemoForCausalLM"], "model_type": "demo"}).encode(),
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}',
        "model-00001-of-00001.safetensors": tiny_safetensors({"lm_head.weight": ("BF16", [64, 64])}),
    }


if __name__ == "__main__":  # python3 hub_standin.py --port 8080 REPO [REPO...]: serve demo_repo() for each
    import argparse

    parser = argparse.ArgumentParser(description="a minimal Hugging Face Hub stand-in")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("repos", nargs="+")
    opts = parser.parse_args()
    hub = HubStandIn({repo: demo_repo() for repo in opts.repos}, opts.host, opts.port)
    print(f"hub stand-in on {hub.url}: {', '.join(opts.repos)}", flush=True)
    hub.server.serve_forever()
