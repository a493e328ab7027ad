"""A local HTTP server that speaks the Hugging Face Hub routes huggingface_hub uses, serving the fixture repos.

Routes (as the Hub answers them; huggingface_hub ``hf_api.py``, ``file_download.py``, ``utils/_http.py``):
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: model info (``sha``, ``siblings`` with
  ``size``/``lfs``, ``gated``, ``private``).
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag``/``X-Linked-Etag``, ``Content-Length``/
  ``X-Linked-Size``; ``Range: bytes=a-b`` answered 206 with ``Content-Range``.
- Errors carry ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``, ``EntryNotFound``) as the Hub
  sends them, so huggingface_hub raises its own typed errors.

``extra`` repos (``tests/hubfixtures/broken.py``) are served besides them. Gated repos need
``Authorization: Bearer <token>`` with ``token``; ``down`` answers every request 503. Every response's
body bytes are counted per path (``served``) so tests can check that no tensor data is read.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .repos import FixtureRepo, fixture_repos

TOKEN = "hf_ctxfit_fixture_token"


class HubStandIn:
    """Start with ``start()``; ``url`` is the HF_ENDPOINT (``host``: the address to listen on, e.g. the host end of
    the harness's real node, so its pods reach it)."""

    def __init__(self, token: str = TOKEN, host: str = "127.0.0.1",
                 extra: dict[str, FixtureRepo] | None = None) -> None:
        self.repos: dict[str, FixtureRepo] = fixture_repos()
        self.extra: dict[str, FixtureRepo] = dict(extra or {})  # served besides the fixtures (tests/hubfixtures/broken)
        self.token = token
        self.down = False
        self.served: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def weight_bytes_served(self) -> int:
        """Body bytes of ``*.safetensors`` files sent."""
        return sum(n for path, n in self.served.items() if path.endswith(".safetensors"))

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

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                      head: bool = False, count: str | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)) if "Content-Length" not in (headers or {})
                                 else headers["Content-Length"])  # type: ignore[index]
                self.end_headers()
                if not head:
                    self.wfile.write(body)
                    if count:
                        with hub.lock:
                            hub.served[count] += len(body)

            def _error(self, status: int, code: str, head: bool) -> None:
                body = json.dumps({"error": code}).encode()
                self._send(status, body, {"X-Error-Code": code, "X-Error-Message": code,
                                          "Content-Type": "application/json"}, head)

            def _repo(self, repo_id: str, head: bool) -> FixtureRepo | None:
                repo = hub.extra.get(repo_id) or hub.repos.get(repo_id)
                if repo is None:
                    self._error(401, "RepoNotFound", head)
                    return None
                auth = self.headers.get("Authorization", "")
                if repo.gated and auth != f"Bearer {hub.token}":
                    self._error(401 if not auth else 403, "GatedRepo", head)
                    return None
                return repo

            def _sha(self, repo: FixtureRepo, rev: str) -> str | None:
                return repo.sha if rev in ("main", repo.sha) else None

            def _route(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                with hub.lock:
                    hub.requests.append((self.command, path))
                if hub.down:
                    self._send(503, b"down", {"Content-Type": "text/plain"}, head)
                    return
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                if m:
                    self._info(m.group(1), m.group(2) or "main", head)
                    return
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
                if m:
                    self._tree(m.group(1), m.group(2), head)
                    return
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m:
                    self._resolve(m.group(1), m.group(2), m.group(3), head)
                    return
                self._error(404, "NotFound", head)

            def _info(self, repo_id: str, rev: str, head: bool) -> None:
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                sha = self._sha(repo, rev)
                if sha is None:
                    self._error(404, "RevisionNotFound", head)
                    return
                siblings = [{"rfilename": f.path, "size": f.size, "blobId": _oid(repo, f.path),
                             **({"lfs": {"sha256": hashlib.sha256(f"{repo.sha}{f.path}".encode()).hexdigest(),
                                         "size": f.size, "pointerSize": 134}} if f.header else {})}
                            for f in repo.files.values()]
                body = json.dumps({"_id": repo.sha[:24], "id": repo.repo, "modelId": repo.repo, "sha": sha,
                                   "private": False, "gated": "manual" if repo.gated else False, "disabled": False,
                                   "tags": [], "siblings": siblings}).encode()
                self._send(200, body, {"Content-Type": "application/json"}, head)

            def _tree(self, repo_id: str, rev: str, head: bool) -> None:
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                if self._sha(repo, rev) is None:
                    self._error(404, "RevisionNotFound", head)
                    return
                entries = [{"type": "file", "path": f.path, "size": f.size, "oid": _oid(repo, f.path),
                            **({"lfs": {"oid": hashlib.sha256(f"{repo.sha}{f.path}".encode()).hexdigest(),
                                        "size": f.size, "pointerSize": 134}} if f.header else {})}
                           for f in repo.files.values()]
                self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, head)

            def _resolve(self, repo_id: str, rev: str, name: str, head: bool) -> None:
                repo = self._repo(repo_id, head)
                if repo is None:
                    return
                sha = self._sha(repo, rev)
                if sha is None:
                    self._error(404, "RevisionNotFound", head)
                    return
                f = repo.files.get(name)
                if f is None:
                    self._error(404, "EntryNotFound", head)
                    return
                etag = f'"{_oid(repo, name)}"'
                headers = {"X-Repo-Commit": sha, "ETag": etag, "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if f.header:
                    headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(f.size)}
                rng = self.headers.get("Range")
                if rng:
                    m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                    if not m:
                        self._error(416, "BadRange", head)
                        return
                    start = int(m.group(1))
                    end = min(int(m.group(2)) + 1 if m.group(2) else f.size, f.size)
                    body = f.read(start, end) if not head else b""
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
                    if head:
                        headers["Content-Length"] = str(end - start)
                    self._send(206, body, headers, head, count=name)
                    return
                if head:
                    headers["Content-Length"] = str(f.size)
                    self._send(200, b"", headers, True)
                    return
                self._send(200, f.read(0, f.size), headers, False, count=name)

        return Handler


def _oid(repo: FixtureRepo, name: str) -> str:
    return hashlib.sha1(f"{repo.sha}:{name}".encode()).hexdigest()


_SHARED: HubStandIn | None = None


def shared_hub() -> HubStandIn:
    """One stand-in per test process (started on first use; a daemon thread ends with the process)."""
    global _SHARED
    if _SHARED is None:
        from .broken import broken_repos

        _SHARED = HubStandIn(extra=broken_repos()).start()
    return _SHARED


def hub_env(tmp: str | None = None) -> dict[str, str]:
    """``os.environ`` pointed at the shared stand-in: HF_ENDPOINT, an empty HF cache and ctxfit cache of this process,
    no HF token, no telemetry."""
    import os
    import tempfile

    base = tmp or tempfile.mkdtemp(prefix="ctxfit-hub-")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE")}
    return env | {"HF_ENDPOINT": shared_hub().url, "HF_HOME": f"{base}/hf", "CTXFIT_CACHE": f"{base}/ctxfit",
                  "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
