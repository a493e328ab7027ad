"""The Hugging Face Hub stand-in: a local HTTP server that speaks the routes huggingface_hub uses (``model_info``,
``list_repo_tree``, ``hf_hub_download`` / ``snapshot_download``: huggingface_hub ``hf_api.py``, ``file_download.py``,
``utils/_http.py``). One implementation for every use: the kind / in-cluster demo's Hub (this file in the fake
engine's image, ``python3 hub_standin.py REPO``), the e2e tests' Hub for pods on the harness's real node
(``HubStandIn({repo: {path: bytes}}, host=RealNode.host_ip)``), and, through ``tests/hubfixtures/server.py`` (a
subclass serving the fixture repos: generated tensor headers, gated repos), the unit tests' and benches' Hub.

- ``GET /api/models/{repo}[/revision/{rev}]``: model info (``sha``, ``siblings`` with ``size``/``lfs``, ``gated``,
  ``private``);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag``/``X-Linked-Etag``,
  ``Content-Length``/``X-Linked-Size``; ``Range: bytes=a-b`` answered 206 with ``Content-Range`` (416 when
  malformed);
- errors with ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``, ``EntryNotFound``), as the
  Hub sends them, so huggingface_hub raises its own typed errors.

A gated repo needs ``Authorization: Bearer <token>``; ``down`` answers every request 503. ``requests`` records
(method, path) of every request, ``served`` the body bytes sent per file. Standard library only (it runs in the fake
engine's image).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


class HubFile(Protocol):
    """One file of a repo: its size and its bytes [start, end)."""

    @property
    def size(self) -> int: ...

    def read(self, start: int, end: int) -> bytes: ...


class HubRepo(Protocol):
    """What the routes read of a repo: its commit, whether it is gated, its files by path."""

    sha: str
    gated: bool

    @property
    def files(self) -> Mapping[str, HubFile]: ...


@dataclass(frozen=True)
class BytesFile:
    """A file held in memory."""

    content: bytes

    @property
    def size(self) -> int:
        return len(self.content)

    def read(self, start: int, end: int) -> bytes:
        return self.content[start:end]


@dataclass
class BytesRepo:
    """A repo of files held in memory; its commit is derived from its name."""

    name: str
    contents: Mapping[str, bytes]
    gated: bool = False
    sha: str = ""
    files: dict[str, BytesFile] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sha = self.sha or hashlib.sha1(self.name.encode()).hexdigest()
        self.files = {path: BytesFile(data) for path, data in sorted(self.contents.items())}


class HubStandIn:
    """``HubStandIn(repos, host).start()`` (or ``with``); ``url`` is the HF_ENDPOINT to give clients; ``stop()``.

    ``repos``: {repo id: {path: bytes}}. A subclass serves other repos by overriding ``find`` and the hashes a file
    is listed with (``oid``, ``lfs_oid``, ``etag``, ``is_lfs``): by default those of its content, ``*.safetensors``
    being the LFS files.
    """

    def __init__(self, repos: Mapping[str, Mapping[str, bytes]] | None = None, host: str = "127.0.0.1",
                 port: int = 0, *, token: str | None = None) -> None:
        self.repos: Mapping[str, HubRepo] = {name: BytesRepo(name, files) for name, files in (repos or {}).items()}
        self.token = token
        self.down = False
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

    def weight_bytes_served(self) -> int:
        """Body bytes of ``*.safetensors`` files sent."""
        return sum(n for path, n in self.served.items() if path.endswith(".safetensors"))

    # what a subclass may serve differently
    def find(self, repo_id: str) -> HubRepo | None:
        """The repo ``repo_id``, None when there is none."""
        return self.repos.get(repo_id)

    def is_lfs(self, repo: HubRepo, name: str, file: HubFile) -> bool:
        """The file is stored in LFS (listed with ``lfs``, resolved with ``X-Linked-*``)."""
        return name.endswith(".safetensors")

    def oid(self, repo: HubRepo, name: str, file: HubFile) -> str:
        """The git blob id of the file (``blobId`` / tree ``oid``)."""
        return hashlib.sha1(file.read(0, file.size)).hexdigest()

    def lfs_oid(self, repo: HubRepo, name: str, file: HubFile) -> str:
        """The LFS object id (sha256) of the file."""
        return hashlib.sha256(file.read(0, file.size)).hexdigest()

    def etag(self, repo: HubRepo, name: str, file: HubFile) -> str:
        """The ``ETag`` (and ``X-Linked-Etag``) the file is resolved with, unquoted."""
        return self.lfs_oid(repo, name, file)

    def _entry(self, repo: HubRepo, name: str, file: HubFile, key: str) -> dict[str, Any]:
        """A sibling (``key`` ``rfilename``) or a tree entry (``path``)."""
        entry: dict[str, Any] = {key: name, "size": file.size}
        if key == "path":
            entry |= {"type": "file", "oid": self.oid(repo, name, file)}
        else:
            entry["blobId"] = self.oid(repo, name, file)
        if self.is_lfs(repo, name, file):
            entry["lfs"] = {"sha256" if key == "rfilename" else "oid": self.lfs_oid(repo, name, file),
                            "size": file.size, "pointerSize": 134}
        return entry

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
                if hub.down:
                    self._send(503, b"down", {"Content-Type": "text/plain"}, head)
                    return
                for pattern, action in ((r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", self._info),
                                        (r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/.*)?", self._tree),
                                        (r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self._resolve)):
                    m = re.fullmatch(pattern, path)
                    if m:
                        action(head, *m.groups())
                        return
                self._error(404, "NotFound", head)

            def _repo(self, repo_id: str, rev: str | None, head: bool) -> HubRepo | None:
                repo = hub.find(repo_id)
                if repo is None:
                    self._error(401, "RepoNotFound", head)  # the Hub answers 401 for an unknown repo
                    return None
                auth = self.headers.get("Authorization", "")
                if repo.gated and auth != f"Bearer {hub.token}":
                    self._error(401 if not auth else 403, "GatedRepo", head)
                    return None
                if rev not in (None, "main", repo.sha):
                    self._error(404, "RevisionNotFound", head)
                    return None
                return repo

            def _info(self, head: bool, repo_id: str, rev: str | None) -> None:
                repo = self._repo(repo_id, rev, head)
                if repo is not None:
                    self._json({"_id": repo.sha[:24], "id": repo_id, "modelId": repo_id, "sha": repo.sha,
                                "private": False, "gated": "manual" if repo.gated else False, "disabled": False,
                                "tags": [], "siblings": [hub._entry(repo, name, f, "rfilename")
                                                         for name, f in repo.files.items()]}, head)

            def _tree(self, head: bool, repo_id: str, rev: str) -> None:
                repo = self._repo(repo_id, rev, head)
                if repo is not None:
                    self._json([hub._entry(repo, name, f, "path") for name, f in repo.files.items()], head)

            def _resolve(self, head: bool, repo_id: str, rev: str, name: str) -> None:
                repo = self._repo(repo_id, rev, head)
                if repo is None:
                    return
                f = repo.files.get(name)
                if f is None:
                    self._error(404, "EntryNotFound", head)
                    return
                etag = f'"{hub.etag(repo, name, f)}"'
                headers = {"X-Repo-Commit": repo.sha, "ETag": etag, "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if hub.is_lfs(repo, name, f):
                    headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(f.size)}
                wanted = self.headers.get("Range")
                if wanted:
                    m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
                    if not m:
                        self._error(416, "BadRange", head)
                        return
                    start = int(m.group(1))
                    end = min(int(m.group(2)) + 1 if m.group(2) else f.size, f.size)
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
                    self._send(206, b"" if head else f.read(start, end), headers, head, length=max(0, end - start),
                               count=name)
                else:
                    self._send(200, b"" if head else f.read(0, f.size), headers, head, length=f.size, count=name)

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
