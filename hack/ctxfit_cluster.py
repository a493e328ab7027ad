"""A local Kubernetes control plane for ctxfit's tests and demo: real binaries, fake kubelets.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by hack/k8s-bins.sh) run as
subprocesses on 127.0.0.1 with free ports; kwok plays the kubelets of fake GPU nodes and simulates
the inference engine's fate through pod labels/annotations (contract: hack/README.md).

This module is the facade: ``Cluster`` (paths, state.json, the start sequence, stop) and, re-exported,
every public name of the pieces it is built from, each readable alone:

  cluster_procs.py       errors, waits, free ports, PIDs; spawning, watching, stopping the processes
  cluster_pki.py         CA, admin certificate, service-account key, kubeconfig, TLS contexts
  cluster_components.py  command lines of etcd, kube-apiserver, kube-controller-manager, kube-scheduler
  cluster_kwok.py        kwok: stages (kwok.yaml), CRDs, command line, served pod logs (PodLogsMixin)
  cluster_kubectl.py     kubectl and HTTPS to the apiserver (KubectlClient, the base class of Cluster)
  cluster_nodes.py       fake GPU nodes: NodeSpec, GPU_TYPES, the default pool (NodesMixin)
  cluster_storage.py     the default StorageClass and the simulated model download
  addons_*.py            optional components started on a running cluster (addons_lws.py: LeaderWorkerSet)

Used by `hack/cluster.py up|down|status`, hack/demo.py, bench/ and the session fixture in
tests/e2e/conftest.py. Only the standard library, PyYAML and `cryptography` are needed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import cluster_storage
from cluster_components import (
    COMPONENTS,
    SERVICE_CIDR,
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
)
from cluster_kubectl import KubectlError
from cluster_kwok import (
    KWOK_POD_CIDR,
    KWOK_VERSION,
    NEVER_READY_IP,
    SIM_STAGES_FILE,
    PodLogsMixin,
    cri_log,
    kwok_args,
    kwok_config,
    kwok_crd,
    sim_stages,
    stock_stage,
)
from cluster_nodes import GPU_TYPES, NodesMixin, NodeSpec, default_nodes, gpu_node
from cluster_pki import generate_pki, unverified_ssl_context, write_kubeconfig
from cluster_procs import (
    HACK_DIR,
    K8S_BINS_SCRIPT,
    REPO_DIR,
    HarnessError,
    _set_pdeathsig,
    alive_processes,
    check_alive,
    find_bin_dir,
    free_ports,
    log,
    pid_alive,
    pid_exe,
    port_listening,
    spawn,
    stop_processes,
    wait_http,
    wait_until,
)

# The public names, wherever they are defined: importers (tests/, bench/, hack/) use `ctxfit_cluster.X`,
# so a name moved into a piece stays listed here.
__all__ = [
    # cluster_components
    "COMPONENTS",
    # this module
    "DEFAULT_WORK_DIR",
    # cluster_nodes
    "GPU_TYPES",
    # cluster_procs
    "HACK_DIR",
    "K8S_BINS_SCRIPT",
    # cluster_kwok
    "KWOK_POD_CIDR",
    "KWOK_VERSION",
    "NEVER_READY_IP",
    "REPO_DIR",
    "SERVICE_CIDR",
    "SIM_STAGES_FILE",
    "STATE_FILE",
    "Cluster",
    "HarnessError",
    # cluster_kubectl
    "KubectlError",
    "NodeSpec",
    "_set_pdeathsig",
    "cri_log",
    "default_nodes",
    "find_bin_dir",
    "free_ports",
    # cluster_pki
    "generate_pki",
    "gpu_node",
    "kwok_config",
    "kwok_crd",
    "log",
    "pid_alive",
    "pid_exe",
    "port_listening",
    "sim_stages",
    "stock_stage",
    "sweep_stale",
    "temp_cluster_dir",
    "wait_until",
]

DEFAULT_WORK_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxfit" / "cluster" / "default"
)
STATE_FILE = "state.json"


# --------------------------------------------------------------------------------------------
# the cluster


class Cluster(NodesMixin, PodLogsMixin):
    """One local control plane. Work dir layout: state.json, kubeconfig, pki/, data/ (etcd),
    logs/<component>.log, kwok.yaml, podlogs/ (files served by kwok for `kubectl logs`)."""

    def __init__(
        self, work_dir: str | os.PathLike[str] | None = None, bin_dir: str | os.PathLike[str] | None = None
    ):
        self.work_dir = Path(work_dir or DEFAULT_WORK_DIR).expanduser().resolve()
        self._bin_dir = Path(bin_dir) if bin_dir else None
        self.state: dict[str, Any] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._atexit_registered = False
        self._die_with_parent = False
        self.start_seconds: float | None = None
        self.load_state()

    # ---- paths and state
    @property
    def state_file(self) -> Path:
        return self.work_dir / STATE_FILE

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state.get("kubeconfig") or self.work_dir / "kubeconfig")

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            if self.state.get("bin_dir"):
                self._bin_dir = Path(self.state["bin_dir"])
            else:
                self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def pki(self) -> Path:
        return self.work_dir / "pki"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def pod_logs_dir(self) -> Path:
        return self.work_dir / "podlogs"

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.state.get("ports", {}))

    @property
    def pids(self) -> dict[str, int]:
        return {k: v["pid"] for k, v in self.state.get("processes", {}).items()}

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def load_state(self) -> None:
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())

    def _save_state(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.state_file)

    # ---- status
    def running_components(self) -> dict[str, int]:
        """Recorded processes that are still alive and still run our binary."""
        return alive_processes(self.state.get("processes", {}))

    def is_up(self) -> bool:
        """Every recorded process runs and the apiserver answers /readyz."""
        if not self.state.get("ports"):
            return False
        if set(self.running_components()) != set(self.state.get("processes", {})):
            return False
        try:
            return self._get("/readyz") == "ok"
        except Exception:  # noqa: BLE001
            return False

    # ---- lifecycle
    def start(
        self, nodes: list[NodeSpec] | None = None, die_with_parent: bool = False, timeout: float = 120
    ) -> float:
        """Start everything; returns the seconds taken. With die_with_parent the processes get
        PR_SET_PDEATHSIG(SIGKILL) and an atexit hook stops them, so nothing outlives this Python."""
        if self.is_up():
            raise HarnessError(f"a cluster is already running in {self.work_dir} (down it first)")
        if self.state.get("processes"):
            self.stop()  # stale state from a crashed run
        t0 = time.monotonic()
        bin_dir = self.bin_dir
        for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"):
            if not (bin_dir / b).exists():
                raise HarnessError(f"{bin_dir / b} missing; run hack/k8s-bins.sh")
        for d in (self.data_dir, self.pki, self.pod_logs_dir, self.work_dir / "home"):
            shutil.rmtree(d, ignore_errors=True)
        for d in (self.data_dir, self.logs_dir, self.pod_logs_dir, self.work_dir / "home"):
            d.mkdir(parents=True, exist_ok=True)
        self._die_with_parent = die_with_parent
        if die_with_parent and not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True

        names = ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok")
        self.state = {
            "work_dir": str(self.work_dir),
            "bin_dir": str(bin_dir),
            "kubeconfig": str(self.work_dir / "kubeconfig"),
            "data_dir": str(self.data_dir),
            "ports": dict(zip(names, free_ports(len(names)), strict=True)),
            "processes": {},
            "owner_pid": os.getpid(),
            "started_at": time.time(),
        }
        self._save_state()
        try:
            self._start(nodes if nodes is not None else default_nodes(), timeout)
        except BaseException:
            log(f"start failed; logs in {self.logs_dir}")
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        self.state["start_seconds"] = round(self.start_seconds, 2)
        self._save_state()
        return self.start_seconds

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """Start bin_dir/`name` (log: logs/`name`.log) and record it in state.json, to be stopped by stop()."""
        exe = str(self.bin_dir / name)
        proc = spawn(exe, args, self.logs_dir / f"{name}.log", self.work_dir, env, self._die_with_parent)
        self._procs[name] = proc
        self.state["processes"][name] = {"pid": proc.pid, "pgid": proc.pid, "exe": exe}
        self._save_state()

    def _check_alive(self, *names: str) -> None:
        """Raise HarnessError (with the log tail) if one of the named processes we started has exited."""
        for n in names:
            check_alive(n, self._procs.get(n), self.logs_dir / f"{n}.log")

    def _wait_http(self, name: str, url: str, timeout: float, ctx: ssl.SSLContext | None = None) -> None:
        """Until `url` answers 200; raises HarnessError at once if process `name` exits meanwhile."""
        wait_http(name, url, timeout, ctx, lambda: self._check_alive(name))

    def _start(self, nodes: list[NodeSpec], timeout: float) -> None:
        """The start sequence: PKI, etcd, apiserver, kwok's CRDs, controller-manager, scheduler, kwok,
        default pod logs and nodes, then wait for all of them, the default ServiceAccount and storage."""
        p = self.ports
        pki = self.pki
        generate_pki(pki)
        write_kubeconfig(self.kubeconfig, self.server, pki)

        self._spawn("etcd", etcd_args(p, self.data_dir))
        self._wait_http("etcd", f"http://127.0.0.1:{p['etcd']}/health", 30)

        self._spawn("kube-apiserver", apiserver_args(p, pki))
        self._wait_http("kube-apiserver", f"{self.server}/readyz", 60, self._ssl_context())

        # kwok's Logs/ClusterLogs CRDs (kwok watches them: `--enable-crds=Logs,ClusterLogs`)
        crds = [
            kwok_crd(self.bin_dir, f) for f in ("kwok.x-k8s.io_logs.yaml", "kwok.x-k8s.io_clusterlogs.yaml")
        ]
        self.kubectl("apply", *[arg for c in crds for arg in ("-f", str(c))])

        self._spawn("kube-controller-manager", controller_manager_args(p, self.kubeconfig, self.data_dir, pki))
        self._spawn("kube-scheduler", scheduler_args(p, self.kubeconfig, self.data_dir))
        (self.work_dir / "kwok.yaml").write_text(kwok_config(self.bin_dir))
        self.wait_established("logs.kwok.x-k8s.io", "clusterlogs.kwok.x-k8s.io", timeout=30)
        self._spawn(
            "kwok",
            kwok_args(p["kwok"], self.kubeconfig, self.work_dir / "kwok.yaml", pki),
            env={"HOME": str(self.work_dir / "home")},
        )

        # default pod logs: every pod serves podlogs/default.log (and default-previous.log for --previous)
        self.set_default_logs("simulated engine log\n", "simulated engine log (previous container)\n")
        self.add_nodes(nodes, wait=False)

        insecure = unverified_ssl_context()
        self._wait_http(
            "kube-controller-manager", f"https://127.0.0.1:{p['controller_manager']}/healthz", 60, insecure
        )
        self._wait_http("kube-scheduler", f"https://127.0.0.1:{p['scheduler']}/healthz", 60, insecure)
        self._wait_http("kwok", f"https://127.0.0.1:{p['kwok']}/healthz", 60, insecure)
        self.wait_nodes_ready([n.name for n in nodes], timeout=timeout)
        # the controller-manager is working once it has made the default ServiceAccount
        wait_until(
            lambda: self.kubectl_proc("-n", "default", "get", "serviceaccount", "default").returncode == 0,
            60,
            "serviceaccount default/default",
        )
        cluster_storage.install_storage(self)

    def stop(self, remove_data: bool = True, grace: float = 8.0) -> None:
        """Stop exactly the recorded processes (whole process groups): SIGTERM, then SIGKILL after
        `grace` seconds. Removes the data dir, PKI and state file (logs/ is kept)."""
        if not self.state:
            self.load_state()
        stop_processes(self.state.get("processes", {}), self._procs.values(), grace)
        self._procs.clear()
        if self.state.get("realnode"):  # what outlives its processes: cgroup, mounts, network namespace
            import cluster_realnode

            cluster_realnode.cleanup_recorded(self.state)
            self.state.pop("realnode", None)
        if remove_data:
            for d in (self.data_dir, self.pki, self.pod_logs_dir, self.work_dir / "home"):
                shutil.rmtree(d, ignore_errors=True)
            for f in (self.kubeconfig, self.work_dir / "kwok.yaml", self.state_file):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            self.state = {}
        else:
            self.state["processes"] = {}
            self._save_state()

    def env(self) -> dict[str, str]:
        """Environment for a subprocess using this cluster: KUBECONFIG, and the binaries first on PATH."""
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}


def temp_cluster_dir(prefix: str = "ctxfit-e2e-") -> Path:
    """A new temp work dir (after removing those of killed runs with the same prefix)."""
    sweep_stale(prefix)
    return Path(tempfile.mkdtemp(prefix=prefix))


def sweep_stale(prefix: str = "ctxfit-e2e-") -> None:
    """Remove temp cluster dirs left by a killed run (its owner process is gone)."""
    for d in Path(tempfile.gettempdir()).glob(prefix + "*"):
        try:
            state = json.loads((d / STATE_FILE).read_text())
        except (OSError, ValueError):
            continue
        owner = state.get("owner_pid")
        if owner and not pid_alive(owner):
            Cluster(d).stop()
            shutil.rmtree(d, ignore_errors=True)
