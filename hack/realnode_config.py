"""The real node's configuration (hack/cluster_realnode.py): its addresses (``RealNode``) and the files its
components read: containerd's config.toml, the CNI network, the kubeconfig, KubeletConfiguration and
KubeProxyConfiguration. Data only, but for the node's `ctr` helpers on RealNode."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_nodes import NodeSpec
from cluster_procs import HarnessError

REAL_NODE_LABEL = "ctxfit.io/real-node"
TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
PAUSE_IMAGE = "localhost/ctxfit-pause:1"
RUN_DIR = Path("/run/ctxfit")
SLOTS = 64
TMPFS_SIZE = "8g"  # the run dir's limit (pages are used only as files are written: ~1 GiB with the operator image)
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
# config files


def containerd_config(node: RealNode, cni_conf_dir: Path) -> str:
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


def cni_config(node: RealNode) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "ctxfit", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                  "dataDir": f"{node.run_dir}/ipam"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def node_kubeconfig(node: RealNode, pki: Path, apiserver_port: int) -> dict[str, Any]:
    """The admin credentials (as kwok uses them), at the host end of the veth; the serving certificate names
    localhost, not that address, so the client checks that name."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "harness",
            "clusters": [{"name": "harness", "cluster": {"server": f"https://{node.host_ip}:{apiserver_port}",
                                                         "certificate-authority": str(pki / "ca.crt"),
                                                         "tls-server-name": "localhost"}}],
            "users": [{"name": "admin", "user": {"client-certificate": str(pki / "admin.crt"),
                                                 "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "harness", "context": {"cluster": "harness", "user": "admin"}}]}


def kubelet_config(node: RealNode, pki: Path, resolv_conf: Path) -> dict[str, Any]:
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


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name, "bindAddress": node.node_ip,
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables", "clusterCIDR": node.pod_cidr, "nodePortAddresses": [f"{node.node_ip}/32"],
        # conntrack sysctls are machine-wide: leave them alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


