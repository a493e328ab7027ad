"""Talking to the local control plane: the cluster's own kubectl and plain HTTPS, as the harness admin.

``KubectlClient`` is the base of ``ctxfit_cluster.Cluster`` (and of the node and pod-log mixins, which
only need kubectl): it says what it needs from the cluster as abstract properties (where kubectl and the
kubeconfig are, the PKI directory, the apiserver URL) and gives ``kubectl``, ``kubectl_json``,
``kubectl_proc``, ``apply``, ``wait_established`` and ``create_namespace``.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import yaml
from cluster_pki import admin_ssl_context
from cluster_procs import HarnessError, wait_until


class KubectlError(HarnessError):
    """kubectl exited non-zero; `proc` holds its exit code, stdout and stderr."""

    def __init__(self, args: list[str], proc: subprocess.CompletedProcess[str]):
        self.proc = proc
        super().__init__(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")


class KubectlClient(ABC):
    """kubectl (bin_dir/kubectl with the cluster's kubeconfig) and HTTPS GETs to the apiserver."""

    @property
    @abstractmethod
    def bin_dir(self) -> Path:
        """The directory holding kubectl (the harness's binaries)."""

    @property
    @abstractmethod
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""

    @property
    @abstractmethod
    def pki(self) -> Path:
        """The PKI directory (cluster_pki.py): ca.crt, admin.crt, admin.key."""

    @property
    @abstractmethod
    def server(self) -> str:
        """The apiserver URL, https://127.0.0.1:PORT."""

    # ---- HTTP to the apiserver (stdlib)
    def _ssl_context(self) -> ssl.SSLContext:
        return admin_ssl_context(self.pki)

    def _get(self, path: str, timeout: float = 3) -> str:
        """GET `path` (e.g. /readyz) from the apiserver; the body as text. Raises urllib.error.URLError."""
        with urllib.request.urlopen(self.server + path, context=self._ssl_context(), timeout=timeout) as r:
            return str(r.read().decode())

    # ---- kubectl
    def kubectl_proc(
        self, *args: str, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the cluster's kubectl and return the finished process, whatever its exit code."""
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *map(str, args)]
        return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Wait until every CRD (``name.group``) is Established. Not ``kubectl wait``: right after a create the
        CRD's status has no conditions yet, and kubectl then fails at once (".status.conditions accessor
        error: <nil>") instead of waiting."""
        deadline = time.monotonic() + timeout
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        pending = list(crds)
        while pending:
            pending = [c for c in pending if self.kubectl_proc("get", "crd", c, "-o", f"jsonpath={jsonpath}")
                       .stdout.strip() != "True"]
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not Established after {timeout:.0f} s: {', '.join(pending)}")
            if pending:
                time.sleep(0.25)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        """Run the cluster's kubectl; returns stdout, raises KubectlError on failure if check."""
        proc = self.kubectl_proc(*args, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(list(map(str, args)), proc)
        return str(proc.stdout)

    def kubectl_json(self, *args: str) -> Any:
        """kubectl `args` -o json, parsed; raises KubectlError on failure."""
        return json.loads(self.kubectl(*args, "-o", "json"))

    def apply(self, objs: dict[str, Any] | list[dict[str, Any]] | str, namespace: str | None = None) -> str:
        """kubectl apply -f - of a manifest (YAML text, a dict or a list of dicts), in `namespace`."""
        if not isinstance(objs, str):
            objs = yaml.safe_dump_all(objs if isinstance(objs, list) else [objs], sort_keys=False)
        ns = ["-n", namespace] if namespace else []
        return self.kubectl(*ns, "apply", "-f", "-", input=objs)

    # ---- namespaces
    def create_namespace(self, name: str, wait_service_account: bool = True, timeout: float = 30) -> None:
        """Create namespace `name` and (by default) wait until the controller-manager gave it its default
        ServiceAccount (pods cannot be created before). Raises KubectlError, HarnessError on timeout."""
        self.kubectl("create", "namespace", name)
        if wait_service_account:
            wait_until(
                lambda: self.kubectl_proc("-n", name, "get", "serviceaccount", "default").returncode == 0,
                timeout,
                f"serviceaccount {name}/default",
            )
