"""The Hub stand-in (hack/hub_standin.py: the routes huggingface_hub uses, as the Hub answers them) serving the
fixture repos (``tests/hubfixtures/repos.py``: real config.json files, safetensors headers whose data region is
never materialised, gated repos) and ``extra`` repos besides them (``tests/hubfixtures/broken.py``, or a test's own).

Gated repos need ``Authorization: Bearer <token>`` with ``token``; ``down`` answers every request 503. Every
response's body bytes are counted per path (``served``, ``weight_bytes_served``) so tests can check that no tensor
data is read. The hashes a file is listed with derive from the repo's commit and the path (a fixture's data region
is never read to hash it).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from .repos import FixtureRepo, RepoFile, fixture_repos

_HACK = str(Path(__file__).resolve().parents[2] / "hack")
if _HACK not in sys.path:
    sys.path.append(_HACK)  # appended: hack/'s modules never shadow an installed one

import hub_standin  # noqa: E402

TOKEN = "hf_ctxfit_fixture_token"


class HubStandIn(hub_standin.HubStandIn):
    """Start with ``start()``; ``url`` is the HF_ENDPOINT (``host``: the address to listen on, e.g. the host end of
    the harness's real node, so its pods reach it)."""

    def __init__(self, token: str = TOKEN, host: str = "127.0.0.1",
                 extra: dict[str, FixtureRepo] | None = None) -> None:
        super().__init__(host=host, token=token)
        self.repos: dict[str, FixtureRepo] = fixture_repos()
        self.extra: dict[str, FixtureRepo] = dict(extra or {})  # served besides the fixtures (tests/hubfixtures/broken)

    def find(self, repo_id: str) -> FixtureRepo | None:
        return self.extra.get(repo_id) or self.repos.get(repo_id)

    def is_lfs(self, repo: FixtureRepo, name: str, file: RepoFile) -> bool:
        return bool(file.header)

    def oid(self, repo: FixtureRepo, name: str, file: RepoFile) -> str:
        return _oid(repo, name)

    def lfs_oid(self, repo: FixtureRepo, name: str, file: RepoFile) -> str:
        return hashlib.sha256(f"{repo.sha}{name}".encode()).hexdigest()

    def etag(self, repo: FixtureRepo, name: str, file: RepoFile) -> str:
        return _oid(repo, name)


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
