"""Add-on: the inference gateway's APIs on the local control plane, and GIE's lightweight endpoint picker.

hack/gateway-bins.sh (called by hack/k8s-bins.sh) keeps, pinned, in the binary cache:
``gateway/gateway-api-<v>/`` (the Gateway API standard-channel CRDs: GatewayClass, Gateway, HTTPRoute, ...),
``gateway/gie-<v>/`` (the InferencePool CRD, ``inference.networking.k8s.io/v1``) and ``lwepp-<v>`` (the
Gateway API Inference Extension's lightweight endpoint picker, ``cmd/lwepp``).

- ``install_gateway_crds`` applies them server-side and waits until they are Established;
  ``remove_inference_pool_crd`` deletes the InferencePool CRD (and with it every pool) and waits until the API
  is gone, for the "CRDs absent" case.
- ``start_lwepp`` runs lwepp as one more harness process for one pool (``--pool-name``/``--pool-namespace``,
  plain-text gRPC on a free port, JSON logs at ``--zap-log-level=4`` in ``logs/lwepp-<v>.log``). lwepp
  watches the pool and its pods as the full endpoint picker does (``pkg/lwepp/controller``): a pod enters its
  datastore when it matches the pool's ``selector``, is Ready and has a pod IP, once per ``targetPorts`` entry
  (endpoint ``<pod>-rank-<i>``); ``Lwepp.pods()`` reads the pods it added from its log.
- ``start_extproc_gateway`` runs ``extproc-gateway-<v>`` (hack/extproc-gateway) in front of a running lwepp: the
  data-plane half of an InferencePool-capable gateway (what Envoy's ext_proc filter and an original-destination
  cluster do): each HTTP request's headers and body go to the picker over ext_proc, and the request goes to the
  ``<ip>:<port>`` it picks, named in the answer's ``x-gateway-destination-endpoint-served`` header. Envoy itself
  is C++ built with Bazel: neither the Go module proxy nor Debian has it, so no Envoy runs here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from addons_proc import stop_component
from ctxfit_cluster import Cluster, HarnessError, free_ports, log, port_listening, wait_until

GATEWAY_API_VERSION = "v1.6.3"
GIE_VERSION = "v1.6.0"
"""Defaults of hack/gateway-bins.sh (tests/unit/test_gateway_harness.py keeps the two in step)."""
LWEPP_BINARY = f"lwepp-{GIE_VERSION}"
EXTPROC_GATEWAY_BINARY = f"extproc-gateway-{GIE_VERSION}"
SERVED_ENDPOINT_HEADER = "x-gateway-destination-endpoint-served"
INFERENCE_POOL_CRD = "inferencepools.inference.networking.k8s.io"
HTTPROUTE_CRD = "httproutes.gateway.networking.k8s.io"


def gateway_api_dir(cluster: Cluster) -> Path:
    return cluster.bin_dir / "gateway" / f"gateway-api-{GATEWAY_API_VERSION}"


def gie_dir(cluster: Cluster) -> Path:
    return cluster.bin_dir / "gateway" / f"gie-{GIE_VERSION}"


def gateway_available(cluster: Cluster) -> bool:
    """The CRDs are in the binary cache (hack/gateway-bins.sh ran)."""
    return ((gateway_api_dir(cluster) / "gateway.networking.k8s.io_httproutes.yaml").exists()
            and (gie_dir(cluster) / "inference.networking.k8s.io_inferencepools.yaml").exists())


def lwepp_available(cluster: Cluster) -> bool:
    return (cluster.bin_dir / LWEPP_BINARY).exists()


def extproc_gateway_available(cluster: Cluster) -> bool:
    return (cluster.bin_dir / EXTPROC_GATEWAY_BINARY).exists()


def _crd_names(files: list[Path]) -> list[str]:
    names = []
    for f in files:  # controller-gen file names: <group>_<plural>.yaml
        group, plural = f.stem.split("_", 1)
        names.append(f"{plural}.{group}")
    return names


def crd_files(cluster: Cluster) -> list[Path]:
    """Every CRD file the add-on installs: the Gateway API's standard channel, then the InferencePool."""
    return sorted(gateway_api_dir(cluster).glob("*.yaml")) + sorted(gie_dir(cluster).glob("*.yaml"))


def install_gateway_crds(cluster: Cluster, timeout: float = 60) -> list[str]:
    """Apply the Gateway API and InferencePool CRDs (server-side) and wait until all are Established.

    Returns the CRD names. Raises HarnessError when hack/gateway-bins.sh has not run.
    """
    if not gateway_available(cluster):
        raise HarnessError(f"{gateway_api_dir(cluster)} or {gie_dir(cluster)} missing; run hack/k8s-bins.sh")
    files = crd_files(cluster)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *[arg for f in files for arg in ("-f", str(f))])
    names = _crd_names(files)
    cluster.wait_established(*names, timeout=timeout)
    _wait_discovery(cluster, present=True, timeout=timeout)
    return names


def _pool_api_served(cluster: Cluster) -> bool:
    proc = cluster.kubectl_proc("api-resources", "--api-group=inference.networking.k8s.io", "-o", "name")
    return proc.returncode == 0 and INFERENCE_POOL_CRD in proc.stdout.split()


def _wait_discovery(cluster: Cluster, present: bool, timeout: float) -> None:
    wait_until(lambda: _pool_api_served(cluster) == present, timeout,
               f"inference.networking.k8s.io {'served' if present else 'gone'} in discovery")


def remove_inference_pool_crd(cluster: Cluster, timeout: float = 60) -> None:
    """Delete the InferencePool CRD (every pool goes with it) and wait until discovery no longer serves it."""
    cluster.kubectl("delete", "crd", INFERENCE_POOL_CRD, "--ignore-not-found", "--wait=true",
                    f"--timeout={int(timeout)}s")
    _wait_discovery(cluster, present=False, timeout=timeout)


class Lwepp:
    """A running lightweight endpoint picker for one pool: ``grpc_address``, ``log_path``, ``pods()``."""

    def __init__(self, cluster: Cluster, namespace: str, pool: str, grpc_port: int, health_port: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.pool = pool
        self.grpc_address = f"127.0.0.1:{grpc_port}"
        self.health_port = health_port
        self.log_path = cluster.logs_dir / f"{LWEPP_BINARY}.log"
        self._start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0

    def records(self) -> list[dict[str, object]]:
        """This run's JSON log records (zap JSON encoder; other lines skipped)."""
        with open(self.log_path, "rb") as f:
            f.seek(self._start_offset)
            text = f.read().decode(errors="replace")
        out = []
        for line in text.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def pool_synced(self) -> bool:
        """lwepp read the pool (its InferencePool reconciler logged "Updating endpoints" with the selector)."""
        return any(r.get("msg") == "Updating endpoints" for r in self.records())

    def pods(self) -> set[str]:
        """Names of the pods lwepp added to its datastore (``Pod added``, from its pod reconciler or a resync)."""
        names: set[str] = set()
        for r in self.records():
            if r.get("msg") not in ("Pod added", "Pod already exists"):
                continue
            ref = r.get("Pod") or r.get("name")
            if isinstance(ref, dict) and ref.get("name"):
                names.add(str(ref["name"]))
        return names

    def selector(self) -> dict[str, str] | None:
        """The selector lwepp last read from the pool."""
        found = None
        for r in self.records():
            if r.get("msg") == "Updating endpoints" and isinstance(r.get("selector"), dict):
                found = {str(k): str(v) for k, v in r["selector"].items()}  # type: ignore[union-attr]
        return found


def start_lwepp(cluster: Cluster, namespace: str, pool: str, timeout: float = 60) -> Lwepp:
    """Run lwepp for ``namespace/pool`` against the harness (admin kubeconfig); wait for its gRPC ports.

    Raises HarnessError: binary missing (run hack/k8s-bins.sh) or lwepp exited / did not listen in time.
    """
    if not lwepp_available(cluster):
        raise HarnessError(f"{cluster.bin_dir / LWEPP_BINARY} missing; run hack/k8s-bins.sh")
    stop_component(cluster, LWEPP_BINARY)
    grpc_port, health_port, metrics_port = free_ports(3)
    lwepp = Lwepp(cluster, namespace, pool, grpc_port, health_port)
    cluster._spawn(LWEPP_BINARY, [
        f"--pool-name={pool}", f"--pool-namespace={namespace}", f"--grpc-port={grpc_port}",
        f"--grpc-health-port={health_port}", f"--metrics-port={metrics_port}", "--secure-serving=false",
        "--zap-encoder=json", "--zap-log-level=4", "--zap-devel=false",
    ], env={"KUBECONFIG": str(cluster.kubeconfig)})

    def serving() -> bool:
        cluster._check_alive(LWEPP_BINARY)
        return port_listening(grpc_port) and port_listening(health_port)

    wait_until(serving, timeout, "lwepp gRPC and health ports")
    log(f"lwepp up for {namespace}/{pool} (ext-proc on {lwepp.grpc_address})")
    return lwepp


def stop_lwepp(cluster: Cluster) -> None:
    stop_component(cluster, LWEPP_BINARY)


def wait_lwepp_pods(lwepp: Lwepp, expected: set[str], timeout: float = 30) -> set[str]:
    """Until lwepp has added exactly ``expected`` (pods it added stay in the set: check removals elsewhere)."""
    deadline = time.monotonic() + timeout
    while True:
        got = lwepp.pods()
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def start_extproc_gateway(cluster: Cluster, lwepp: Lwepp, timeout: float = 30) -> str:
    """Run hack/extproc-gateway in front of ``lwepp`` on a free loopback port; returns its base URL.

    Raises HarnessError: binary missing (run hack/k8s-bins.sh) or it exited / did not listen in time.
    """
    binary = cluster.bin_dir / EXTPROC_GATEWAY_BINARY
    if not binary.exists():
        raise HarnessError(f"{binary} missing; run hack/k8s-bins.sh")
    stop_component(cluster, EXTPROC_GATEWAY_BINARY)
    (port,) = free_ports(1)
    cluster._spawn(EXTPROC_GATEWAY_BINARY, [f"--listen=127.0.0.1:{port}", f"--epp={lwepp.grpc_address}"])

    def serving() -> bool:
        cluster._check_alive(EXTPROC_GATEWAY_BINARY)
        return port_listening(port)

    wait_until(serving, timeout, "extproc-gateway's HTTP port")
    log(f"extproc-gateway on 127.0.0.1:{port} -> lwepp {lwepp.grpc_address}")
    return f"http://127.0.0.1:{port}"


def stop_extproc_gateway(cluster: Cluster) -> None:
    stop_component(cluster, EXTPROC_GATEWAY_BINARY)
