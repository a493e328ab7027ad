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
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import images
from cluster_nodes import NodeSpec, advertise_gpus
from cluster_procs import HACK_DIR, HarnessError, _set_pdeathsig, log, pid_alive, wait_until
from realnode_config import (
    CNI_BIN_DIR,
    CNI_PLUGINS,
    COMPONENTS,
    DEFAULT_GPUS,
    PAUSE_IMAGE,
    REAL_NODE_LABEL,
    RUN_DIR,
    SLOTS,
    SYSTEM_TOOLS,
    TAINT,
    TMPFS_SIZE,
    TOLERATION,
    RealNode,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    node_kubeconfig,
)
from realnode_host import cgroup_dirs, kill_cgroup, make_cgroup, run, unmount_under

__all__ = ["COMPONENTS", "DEFAULT_GPUS", "PAUSE_IMAGE", "REAL_NODE_LABEL", "RUN_DIR", "TAINT", "TOLERATION",
           "RealNode", "cgroup_dirs", "cleanup", "cleanup_recorded", "missing_requirements",
           "pause_archive", "start_real_node", "stop_real_node"]

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
        if run("ip", "netns", "add", f"ctxfit-rn{slot}", check=False).returncode == 0:  # atomic claim
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
    run("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if, "netns", node.netns)
    run("ip", "addr", "add", f"{node.host_ip}/30", "dev", host_if)
    run("ip", "link", "set", host_if, "up")
    inside = ("ip", "-n", node.netns)
    run(*inside, "addr", "add", f"{node.node_ip}/30", "dev", node_if)
    run(*inside, "link", "set", node_if, "up")
    run(*inside, "link", "set", "lo", "up")
    run("ip", "route", "replace", node.pod_cidr, "via", node.node_ip)


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
    procs_files = " ".join(str(d / "cgroup.procs") for d in cgroup_dirs(f"{node.cgroup}/runtime"))
    script = f'for f in {procs_files}; do echo $$ > "$f"; done; exec nsenter --net=/run/netns/{node.netns} -- "$@"'
    logf = open(cluster.logs_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child's output, as in cluster_procs
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
    work, run_dir = Path(node.work_dir), Path(node.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    # images, snapshots, pod volumes: on a tmpfs of their own (deleting ~20,000 image files from this disk took
    # ~40 s; unmounting takes none)
    run("mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", f"ctxfit-rn{node.slot}", str(run_dir))
    _network(node)
    make_cgroup(node.cgroup)
    make_cgroup(f"{node.cgroup}/runtime")
    apiserver_port = cluster.ports["apiserver"]

    fwd_log = open(cluster.logs_dir / "realnode-forward.log", "ab")  # noqa: SIM115 - the child's output
    forward = subprocess.Popen(
        [sys.executable, str(HACK_DIR / "tcp_forward.py"), node.host_ip, str(apiserver_port), "127.0.0.1",
         str(apiserver_port)], stdin=subprocess.DEVNULL, stdout=fwd_log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_set_pdeathsig if cluster._die_with_parent else None)
    fwd_log.close()
    _record(cluster, "realnode-forward", forward, sys.executable)

    cni_dir = work / "cni"
    cni_dir.mkdir()
    (cni_dir / "10-ctxfit.conflist").write_text(json.dumps(cni_config(node), indent=1))
    (work / "containerd.toml").write_text(containerd_config(node, cni_dir))
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
    kubeconfig.write_text(json.dumps(node_kubeconfig(node, cluster.pki, apiserver_port)))
    resolv = work / "resolv.conf"
    resolv.write_text("")
    (work / "kubelet.yaml").write_text(json.dumps(kubelet_config(node, cluster.pki, resolv)))
    kubelet = _spawn_in_node(cluster, "realnode-kubelet", node, str(cluster.bin_dir / "kubelet"), [
        f"--config={work / 'kubelet.yaml'}", f"--kubeconfig={kubeconfig}", f"--root-dir={run_dir / 'kubelet'}",
        f"--cert-dir={work / 'kubelet-pki'}", f"--node-ip={node.node_ip}", f"--hostname-override={node.name}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1"])
    (work / "kube-proxy.yaml").write_text(json.dumps(kube_proxy_config(node, kubeconfig)))
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
        advertise_gpus(cluster.kubectl, node.name, gpus)


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
    kill_cgroup(cgroup)
    t1 = time.monotonic()
    unmount_under(run_dir, info.get("work_dir", ""))
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
