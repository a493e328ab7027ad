"""Add-on: one real node beside the kwok GPU nodes: a kubelet whose pods really run.

kubelet and kube-proxy (k8s.io/kubernetes, built by hack/node-bins.sh beside the control plane) with
Debian's containerd, runc and CNI plugins (.ci/run installs them). ``start_real_node(cluster)`` brings it up
on a running harness; ``Cluster.stop`` (and so ``hack/cluster.py down``, the pytest session's end, a stale-dir
sweep) takes it down through ``cleanup_recorded``. Needs root on Linux.

Isolation, so several harnesses on one machine (each engineer's e2e run) never meet:

- network: its own network namespace ``ctxfit-rnN`` (slot N claimed by creating it), joined to the host by a
  veth pair 10.251.N.1 (host) / 10.251.N.2 (node: its InternalIP, kubelet :10250); pods on a CNI bridge in
  10.252.N.0/24 (host-local IPAM), masqueraded out of the bridge; the host routes 10.252.N.0/24 to the node,
  so a test (and the apiserver) reaches pod IPs. No default route in the namespace: pods reach the node,
  the host end of the veth and nothing else. kube-proxy (iptables) runs in that namespace only;
- the apiserver (127.0.0.1 on the host) is reached at 10.251.N.1:<apiserver port> through hack/tcp_forward.py,
  and pods reach it as in any cluster, at the ``kubernetes`` Service (10.96.0.1:443): the harness runs the
  apiserver with ``--endpoint-reconciler-type=none``, so this module writes that Service's EndpointSlice;
- cgroups: the kubelet's ``cgroupRoot`` is ``/ctxfit-rnN`` (cgroupfs driver) and containerd, the kubelet and
  kube-proxy run in ``/ctxfit-rnN/runtime``: the shims and every container stay under /ctxfit-rnN, which
  cleanup kills and removes as a whole;
- files: configs under the cluster's work dir (``realnode/``, logs in ``logs/realnode-*.log``); containerd's root
  (images, snapshots) and state (sockets, pod netns mounts) and the kubelet's root dir (pod volumes) on a tmpfs
  mounted at /run/ctxfit/rnN (gone at once on cleanup; deleting the files from disk took ~40 s).

Facts of this machine that shape the config (each found by running it): the process has no
CAP_SYS_RESOURCE, so no oom_score_adj below 0: containerd's CRI runs with ``restrict_oom_score_adj``
(otherwise every sandbox fails "can't get final child's PID from pipe"); cgroup v1 (hybrid): the kubelet
runs with ``failCgroupV1: false`` (Kubernetes 1.34 still supports v1 in maintenance mode). No registry:
the sandbox image is hack/pause (built by node-bins.sh) written as a docker archive here, and every image
reaches containerd by ``ctr images import`` (``RealNode.import_image``); pods use ``imagePullPolicy: Never``
or IfNotPresent. Pods get no DNS server (the kubelet's resolv.conf is empty): they use IPs.

The node is tainted ``ctxfit.io/real-node=true:NoSchedule`` and labelled ``ctxfit.io/real-node=true``, so
only pods that ask for it land there; with ``gpus`` it also carries GPU Feature Discovery labels and
``nvidia.com/gpu`` capacity (a status patch, as for any extended resource no device plugin reports), so an
InferenceServer can be planned for it and scheduled on it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import images
from cluster_nodes import NodeSpec
from cluster_procs import HACK_DIR, HarnessError, _set_pdeathsig, log, pid_alive, wait_until

REAL_NODE_LABEL = "ctxfit.io/real-node"
TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
PAUSE_IMAGE = "localhost/ctxfit-pause:1"
RUN_DIR = Path("/run/ctxfit")
SLOTS = 64
TMPFS_SIZE = "8g"  # the run dir's limit (pages are used only as files are written: ~1 GiB with the operator image)
CGROUP_FS = Path("/sys/fs/cgroup")
CNI_BIN_DIR = Path("/usr/lib/cni")
SYSTEM_TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip", "iptables")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
COMPONENTS = ("realnode-forward", "realnode-containerd", "realnode-kubelet", "realnode-kube-proxy")
# An A10G-like 24 GB GPU: a product no kwok node of the default pool has, so a server pinned to it lands here
DEFAULT_GPUS = NodeSpec(name="", product="NVIDIA-A10G", gpu_memory_mib=23028, gpu_count=1, compute=(8, 6),
                        family="ampere")


@dataclass
class RealNode:
    """A running real node (also recorded as ``cluster.state["realnode"]``)."""

    name: str
    slot: int
    netns: str
    host_ip: str  # the host end of the veth: what pods reach the host (and test servers) at
    node_ip: str  # the node's InternalIP (kubelet :10250)
    pod_cidr: str
    work_dir: str  # containerd root, kubelet root dir, configs
    run_dir: str  # containerd state and sockets, pod netns mounts
    cgroup: str  # /ctxfit-rnN
    kubelet_port: int = 10250

    @property
    def containerd_socket(self) -> str:
        return f"{self.run_dir}/containerd.sock"

    def ctr(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["ctr", "--address", self.containerd_socket, "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise HarnessError(f"ctr {' '.join(args)}: {proc.stderr.strip()[-2000:]}")
        return proc

    def import_image(self, archive: Path) -> None:
        """Load a docker-archive/OCI tarball into the node's containerd (what a registry pull would give it)."""
        self.ctr("images", "import", str(archive))

    def images(self) -> list[str]:
        return self.ctr("images", "list", "--quiet").stdout.split()

    def netns_exec(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command in the node's network namespace (e.g. curl a pod)."""
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.netns}", "--", *cmd], capture_output=True,
                              text=True, timeout=timeout, check=False)


# --------------------------------------------------------------------------------------------
# checks


def missing_requirements(bin_dir: Path) -> list[str]:
    """What this machine lacks for a real node (empty: it can run one)."""
    missing = []
    if sys.platform != "linux" or os.geteuid() != 0:
        missing.append("root on Linux")
    missing += [str(bin_dir / b) for b in ("kubelet", "kube-proxy", "pause") if not (bin_dir / b).exists()]
    missing += [t for t in SYSTEM_TOOLS if shutil.which(t) is None]
    missing += [str(CNI_BIN_DIR / p) for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).exists()]
    return missing


# --------------------------------------------------------------------------------------------
# small system helpers


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise HarnessError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc


def _cgroup_dirs(cgroup: str) -> list[Path]:
    """The cgroup's directory in every mounted hierarchy (v1: one per controller; v2: the unified one)."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # pure v2
        return [CGROUP_FS / cgroup.lstrip("/")]
    return [h / cgroup.lstrip("/") for h in sorted(CGROUP_FS.iterdir())
            if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]


def _make_cgroup(cgroup: str) -> None:
    for d in _cgroup_dirs(cgroup):
        d.mkdir(parents=True, exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset child starts empty: no task may join it
            f = d / knob
            if f.exists() and not f.read_text().strip():
                f.write_text((d.parent / knob).read_text())


def _cgroup_pids(cgroup: str) -> set[int]:
    pids: set[int] = set()
    for d in _cgroup_dirs(cgroup):
        if d.exists():
            for procs in d.rglob("cgroup.procs"):
                try:
                    pids |= {int(p) for p in procs.read_text().split()}
                except OSError:
                    pass
    return pids


def _kill_cgroup(cgroup: str, timeout: float = 15) -> None:
    """SIGKILL every process under the cgroup (shims, containers, anything left), then remove it."""
    deadline = time.monotonic() + timeout
    while (pids := _cgroup_pids(cgroup)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    for d in _cgroup_dirs(cgroup):
        if d.exists():
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    sub.rmdir()
                except OSError:
                    pass
            try:
                d.rmdir()
            except OSError:
                pass


def _unmount_under(*roots: str) -> None:
    """Lazily unmount the given dirs and every mount point under them (deepest first): volumes, rootfs, netns,
    the tmpfs."""
    bases = [r.rstrip("/") for r in roots if r]
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if any(point == b or point.startswith(b + "/") for b in bases):
                points.append(point)
    for point in sorted(set(points), key=lambda p: -p.count("/")):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


# --------------------------------------------------------------------------------------------
# slots: one network namespace, veth pair, subnets and cgroup per running real node on this machine


def _slot_file(slot: int) -> Path:
    return RUN_DIR / f"rn{slot}.json"


def _sweep_stale_slots() -> None:
    """Tear down real nodes whose owning process is gone (a killed test run)."""
    for claim in RUN_DIR.glob("rn*.json"):
        try:
            info = json.loads(claim.read_text())
        except (OSError, ValueError):
            continue
        if not pid_alive(int(info.get("owner_pid", 0))):
            log(f"removing the stale real node of slot {info.get('slot')} (owner {info.get('owner_pid')} is gone)")
            cleanup(info)


def _claim_slot(work_dir: Path) -> int:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    _sweep_stale_slots()
    for slot in range(SLOTS):
        if _run("ip", "netns", "add", f"ctxfit-rn{slot}", check=False).returncode == 0:  # atomic claim
            _slot_file(slot).write_text(json.dumps({"slot": slot, "owner_pid": os.getpid(),
                                                    "work_dir": str(work_dir)}))
            return slot
    raise HarnessError(f"all {SLOTS} real-node slots (network namespaces ctxfit-rnN) are in use")


def _node_for_slot(name: str, slot: int, work_dir: Path) -> RealNode:
    return RealNode(name=name, slot=slot, netns=f"ctxfit-rn{slot}", host_ip=f"10.251.{slot}.1",
                    node_ip=f"10.251.{slot}.2", pod_cidr=f"10.252.{slot}.0/24", work_dir=str(work_dir),
                    run_dir=str(RUN_DIR / f"rn{slot}"), cgroup=f"/ctxfit-rn{slot}")


def _network(node: RealNode) -> None:
    host_if, node_if = f"cxrn{node.slot}h", f"cxrn{node.slot}n"
    _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if, "netns", node.netns)
    _run("ip", "addr", "add", f"{node.host_ip}/30", "dev", host_if)
    _run("ip", "link", "set", host_if, "up")
    inside = ("ip", "-n", node.netns)
    _run(*inside, "addr", "add", f"{node.node_ip}/30", "dev", node_if)
    _run(*inside, "link", "set", node_if, "up")
    _run(*inside, "link", "set", "lo", "up")
    _run("ip", "route", "replace", node.pod_cidr, "via", node.node_ip)


# --------------------------------------------------------------------------------------------
# config files


def _containerd_config(node: RealNode, cni_conf_dir: Path) -> str:
    r = node.run_dir
    return f"""version = 2
root = "{r}/containerd"
state = "{r}/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{r}/containerd.sock"
[ttrpc]
  address = "{r}/containerd.sock.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def _cni_config(node: RealNode) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "ctxfit", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                  "dataDir": f"{node.run_dir}/ipam"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def _kubeconfig(node: RealNode, pki: Path, apiserver_port: int) -> dict[str, Any]:
    """The admin credentials (as kwok uses them), at the host end of the veth; the serving certificate names
    localhost, not that address, so the client checks that name."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "harness",
            "clusters": [{"name": "harness", "cluster": {"server": f"https://{node.host_ip}:{apiserver_port}",
                                                         "certificate-authority": str(pki / "ca.crt"),
                                                         "tls-server-name": "localhost"}}],
            "users": [{"name": "admin", "user": {"client-certificate": str(pki / "admin.crt"),
                                                 "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "harness", "context": {"cluster": "harness", "user": "admin"}}]}


def _kubelet_config(node: RealNode, pki: Path, resolv_conf: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.node_ip, "port": node.kubelet_port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        # the apiserver calls the kubelet (logs, exec) with the admin certificate; the kubelet asks the
        # apiserver whether a caller may (SubjectAccessReview), as on any cluster
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup, "cgroupsPerQOS": True,
        "failSwapOn": False, "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "resolvConf": str(resolv_conf), "clusterDomain": "cluster.local",
        # this machine's disk is shared with everything else: evict for memory only, never GC images
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "maxPods": 30,
        "registerWithTaints": [TAINT],
        "nodeStatusReportFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "5s", "fileCheckFrequency": "5s",
    }


def _kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name, "bindAddress": node.node_ip,
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables", "clusterCIDR": node.pod_cidr, "nodePortAddresses": [f"{node.node_ip}/32"],
        # conntrack sysctls are machine-wide: leave them alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def pause_archive(bin_dir: Path) -> Path:
    """The sandbox image (hack/pause as /pause, uid 65535) as a docker archive, cached beside the binary."""
    archive = bin_dir / "images" / "pause.tar"
    binary = bin_dir / "pause"
    if not archive.exists() or archive.stat().st_mtime < binary.stat().st_mtime:
        images.write_docker_archive(archive, PAUSE_IMAGE, {"pause": (binary.read_bytes(), 0o755)},
                                    {"Entrypoint": ["/pause"], "User": "65535:65535"})
    return archive


# --------------------------------------------------------------------------------------------
# start and stop


def _spawn_in_node(cluster: Any, name: str, node: RealNode, exe: str, args: list[str],
                   env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `exe` in the node's network namespace and its runtime cgroup (recorded like every component)."""
    procs_files = " ".join(str(d / "cgroup.procs") for d in _cgroup_dirs(f"{node.cgroup}/runtime"))
    script = f'for f in {procs_files}; do echo $$ > "$f"; done; exec nsenter --net=/run/netns/{node.netns} -- "$@"'
    logf = open(cluster.logs_dir / f"{name}.log", "ab")
    proc = subprocess.Popen(["sh", "-c", script, "sh", exe, *args], stdin=subprocess.DEVNULL, stdout=logf,
                            stderr=subprocess.STDOUT, cwd=node.work_dir, env={**os.environ, **(env or {})},
                            start_new_session=True,
                            preexec_fn=_set_pdeathsig if cluster._die_with_parent else None)
    logf.close()
    _record(cluster, name, proc, exe)
    return proc


def _record(cluster: Any, name: str, proc: subprocess.Popen[bytes], exe: str) -> None:
    cluster._procs[name] = proc
    cluster.state["processes"][name] = {"pid": proc.pid, "pgid": proc.pid, "exe": exe}
    cluster._save_state()


def start_real_node(cluster: Any, name: str = "real-0", gpus: NodeSpec | None = DEFAULT_GPUS,
                    timeout: float = 120) -> RealNode:
    """Start a real node on the running harness and wait until it is Ready; returns it.

    ``gpus``: GFD labels and ``nvidia.com/gpu`` capacity to advertise (None: a plain CPU node).
    Raises HarnessError: a requirement is missing (``missing_requirements``), or a component exited or was not
    ready within ``timeout`` seconds (the log tail is in the message).
    """
    missing = missing_requirements(cluster.bin_dir)
    if missing:
        raise HarnessError("cannot run a real node here, missing: " + ", ".join(missing)
                           + " (hack/k8s-bins.sh builds the binaries; .ci/run installs the packages)")
    if cluster.state.get("realnode"):
        raise HarnessError(f"this harness already runs real node {cluster.state['realnode']['name']}")
    work = cluster.work_dir / "realnode"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    slot = _claim_slot(work)
    node = _node_for_slot(name, slot, work)
    cluster.state["realnode"] = asdict(node)
    cluster._save_state()
    t0 = time.monotonic()
    try:
        _start(cluster, node, gpus, timeout)
    except BaseException:
        log(f"real node start failed; logs in {cluster.logs_dir}/realnode-*.log")
        stop_real_node(cluster)
        raise
    log(f"real node {name} Ready in {time.monotonic() - t0:.1f} s (slot {slot}, {node.node_ip}, pods {node.pod_cidr})")
    return node


def _start(cluster: Any, node: RealNode, gpus: NodeSpec | None, timeout: float) -> None:
    work, run = Path(node.work_dir), Path(node.run_dir)
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    # images, snapshots, pod volumes: on a tmpfs of their own (deleting ~20,000 image files from this disk took
    # ~40 s; unmounting takes none)
    _run("mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", f"ctxfit-rn{node.slot}", str(run))
    _network(node)
    _make_cgroup(node.cgroup)
    _make_cgroup(f"{node.cgroup}/runtime")
    apiserver_port = cluster.ports["apiserver"]

    fwd_log = open(cluster.logs_dir / "realnode-forward.log", "ab")
    forward = subprocess.Popen(
        [sys.executable, str(HACK_DIR / "tcp_forward.py"), node.host_ip, str(apiserver_port), "127.0.0.1",
         str(apiserver_port)], stdin=subprocess.DEVNULL, stdout=fwd_log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_set_pdeathsig if cluster._die_with_parent else None)
    fwd_log.close()
    _record(cluster, "realnode-forward", forward, sys.executable)

    cni_dir = work / "cni"
    cni_dir.mkdir()
    (cni_dir / "10-ctxfit.conflist").write_text(json.dumps(_cni_config(node), indent=1))
    (work / "containerd.toml").write_text(_containerd_config(node, cni_dir))
    containerd = _spawn_in_node(cluster, "realnode-containerd", node, shutil.which("containerd") or "containerd",
                                ["--config", str(work / "containerd.toml")])

    def containerd_up() -> bool:
        if containerd.poll() is not None:
            raise HarnessError(f"containerd exited {containerd.returncode}:\n{_tail(cluster, 'realnode-containerd')}")
        return Path(node.containerd_socket).exists() and subprocess.run(
            ["ctr", "--address", node.containerd_socket, "version"], capture_output=True, check=False).returncode == 0

    _wait(containerd_up, 30, "containerd")
    node.import_image(pause_archive(cluster.bin_dir))

    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(json.dumps(_kubeconfig(node, cluster.pki, apiserver_port)))
    resolv = work / "resolv.conf"
    resolv.write_text("")
    (work / "kubelet.yaml").write_text(json.dumps(_kubelet_config(node, cluster.pki, resolv)))
    kubelet = _spawn_in_node(cluster, "realnode-kubelet", node, str(cluster.bin_dir / "kubelet"), [
        f"--config={work / 'kubelet.yaml'}", f"--kubeconfig={kubeconfig}", f"--root-dir={run / 'kubelet'}",
        f"--cert-dir={work / 'kubelet-pki'}", f"--node-ip={node.node_ip}", f"--hostname-override={node.name}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1"])
    (work / "kube-proxy.yaml").write_text(json.dumps(_kube_proxy_config(node, kubeconfig)))
    proxy = _spawn_in_node(cluster, "realnode-kube-proxy", node, str(cluster.bin_dir / "kube-proxy"),
                           [f"--config={work / 'kube-proxy.yaml'}", "--v=1"])
    _write_kubernetes_endpoints(cluster, node, apiserver_port)

    def ready() -> bool:
        for name, proc in (("realnode-kubelet", kubelet), ("realnode-kube-proxy", proxy),
                           ("realnode-containerd", containerd), ("realnode-forward", forward)):
            if proc.poll() is not None:
                raise HarnessError(f"{name} exited {proc.returncode}:\n{_tail(cluster, name)}")
        obj = json.loads(cluster.kubectl("get", "node", node.name, "-o", "json", check=False) or "{}")
        conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True"

    _wait(ready, timeout, f"node {node.name} Ready")
    if gpus is not None:
        advertise_gpus(cluster, node.name, gpus)


def _gfd_labels(gpus: NodeSpec) -> dict[str, str]:
    labels: dict[str, str] = gpus.manifest()["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def advertise_gpus(cluster: Any, node: str, gpus: NodeSpec) -> None:
    """GFD labels and ``nvidia.com/gpu`` capacity/allocatable on a node no device plugin serves (a status patch,
    as Kubernetes documents for extended resources); the kubelet keeps resources it does not manage."""
    cluster.kubectl("label", "node", node, "--overwrite", *[f"{k}={v}" for k, v in _gfd_labels(gpus).items()])
    count = str(gpus.gpu_count)
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": count},
             {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": count}]
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch))

    def advertised() -> bool:
        obj = json.loads(cluster.kubectl("get", "node", node, "-o", "json"))
        return bool(obj["status"].get("allocatable", {}).get("nvidia.com/gpu") == count)

    wait_until(advertised, 30, f"nvidia.com/gpu={count} on node {node}")


def _write_kubernetes_endpoints(cluster: Any, node: RealNode, apiserver_port: int) -> None:
    """The `kubernetes` Service's EndpointSlice (the harness apiserver runs without an endpoint reconciler):
    the forwarder at the host end of the veth."""
    cluster.apply({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes",
                                "endpointslice.kubernetes.io/managed-by": "harness.ctxfit.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [node.host_ip], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}],
    })


def _wait(pred: Any, timeout: float, what: str) -> None:
    try:
        wait_until(pred, timeout, what, interval=0.5)
    except HarnessError as exc:
        raise HarnessError(f"{exc}") from None


def _tail(cluster: Any, name: str) -> str:
    path = cluster.logs_dir / f"{name}.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def cleanup(info: dict[str, Any]) -> None:
    """Remove everything of a real node whose processes are stopped: what is left in its cgroup (shims,
    containers), mounts, network namespace (its veth and route go with it), run dir, slot claim."""
    slot = info.get("slot")
    if slot is None:
        return
    cgroup = info.get("cgroup") or f"/ctxfit-rn{slot}"
    run_dir = info.get("run_dir") or str(RUN_DIR / f"rn{slot}")
    t0 = time.monotonic()
    _kill_cgroup(cgroup)
    t1 = time.monotonic()
    _unmount_under(run_dir, info.get("work_dir", ""))
    t2 = time.monotonic()
    subprocess.run(["ip", "netns", "del", f"ctxfit-rn{slot}"], capture_output=True, check=False)
    log(f"real node cleanup: cgroup {t1 - t0:.1f} s, mounts {t2 - t1:.1f} s, netns {time.monotonic() - t2:.1f} s")
    shutil.rmtree(run_dir, ignore_errors=True)
    if info.get("work_dir"):
        shutil.rmtree(info["work_dir"], ignore_errors=True)
    _slot_file(int(slot)).unlink(missing_ok=True)


def cleanup_recorded(state: dict[str, Any]) -> None:
    """Called by Cluster.stop after the processes are stopped: clean up the recorded real node, if any."""
    info = state.get("realnode")
    if info:
        cleanup(info)


def stop_real_node(cluster: Any) -> None:
    """Stop the real node's processes and clean it up; the control plane keeps running."""
    from addons_proc import stop_component

    for name in reversed(COMPONENTS):
        stop_component(cluster, name)
    info = cluster.state.pop("realnode", None)
    if info:
        cleanup(info)
        cluster.kubectl("delete", "node", info["name"], "--ignore-not-found", "--wait=false", check=False)
    if cluster.state_file.exists():
        cluster._save_state()
