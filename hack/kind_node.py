"""The data of the offline kind node image (hack/kind-node-image.sh): the image archives its containerd holds and the
manifests kind applies from it. Only the standard library (and hack/images.py).

kind's own builder (``kind build node-image``, sigs.k8s.io/kind pkg/build/nodeimage/buildcontext.go) loads the
images it built from Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy) and *pulls*
every other image ``kubeadm config images list`` names (etcd, CoreDNS), the sandbox image of its containerd config,
kindnetd and local-path-provisioner: no registry answers here, so hack/kind-node-image.sh does its steps itself and
this module makes every one of those images from binaries built from the Go module proxy (hack/kind-bins.sh,
hack/node-bins.sh, hack/k8s-bins.sh), each checked to be the version its name says:

- ``registry.k8s.io/kube-{apiserver,controller-manager,scheduler,proxy}:<k8s>``: the binary in /usr/local/bin (the
  path kubeadm's manifests run); kube-proxy with Debian's iptables/nftables/conntrack staged by hack/kind-node/stage.sh;
- ``registry.k8s.io/etcd:<etcd>-0``, ``registry.k8s.io/coredns/coredns:<v>``: the versions kubeadm names, built;
- the sandbox image: hack/pause (as on the harness's real node);
- storage: kind's own local-path-provisioner manifest (read from kind's source, pkg/build/nodeimage/const_storage.go)
  with images built from local-path-provisioner at the version kind builds its image from, and a helper image of
  sh/rm/mkdir as kind's local-path-helper is;
- networking: kindnetd's source is not on the module proxy, so the node has no CNI daemon: containerd writes each
  node's CNI config from ``CNI_TEMPLATE`` (ptp + host-local on the node's podCIDR + portmap, the plugins kindnet
  configures) once the kubelet reports the podCIDR; ``cni_manifest`` is what kind applies in kindnet's place (a
  ConfigMap saying so). Pods on one node reach each other, the node, Services and the outside (masqueraded); pods
  on different nodes of a multi-node cluster do not (no routes between nodes: that is kindnetd's job).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import images
from realnode_config import PAUSE_IMAGE

PROVISIONER_IMAGE = "localhost/ctxfit-kind-local-path-provisioner:{version}"
HELPER_IMAGE = "localhost/ctxfit-kind-local-path-helper:{version}"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")

# containerd's CRI renders this (Go template: .PodCIDR) into /etc/cni/net.d once the kubelet has a podCIDR
CNI_TEMPLATE = json.dumps({
    "cniVersion": "0.4.0",
    "name": "kindnet",
    "plugins": [
        {"type": "ptp", "ipMasq": True, "mtu": 1500,
         "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
                  "ranges": [[{"subnet": "{{.PodCIDR}}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}, indent=2) + "\n"


def cni_manifest() -> str:
    """/kind/manifests/default-cni.yaml: kind templates it ({{ .PodSubnet }}) and applies it in place of kindnetd."""
    return """\
# ctxfit's offline kind node image (hack/kind-node-image.sh): no kindnetd (its source is not on the Go module
# proxy); containerd writes each node's CNI config (ptp + host-local on the node's podCIDR + portmap) from
# /etc/containerd/cni.conflist.tmpl. One-node clusters only: nothing routes pod traffic between nodes.
apiVersion: v1
kind: ConfigMap
metadata:
  name: kind-cni
  namespace: kube-system
data:
  podSubnet: "{{ .PodSubnet }}"
  cni: containerd conf_template /etc/containerd/cni.conflist.tmpl (ptp, host-local, portmap)
"""


def storage_manifest(kind_src: Path, provisioner_image: str, helper_image: str) -> str:
    """kind's default-storage.yaml (its Go constant ``defaultStorageManifest``, images spliced in as kind does) with
    our images in place of docker.io/kindest/local-path-{provisioner,helper}."""
    source = (kind_src / "pkg/build/nodeimage/const_storage.go").read_text()
    # the raw string ends with a backtick alone on its line (the pieces between end in "` + name + `" lines)
    match = re.search(r"const defaultStorageManifest = `(.*?\n)`\n", source, re.S)
    if match is None:
        raise SystemExit(f"defaultStorageManifest not found in {kind_src}/pkg/build/nodeimage/const_storage.go")
    names = {"storageProvisionerImage": provisioner_image, "storageHelperImage": helper_image}
    # the constant is `...` + name + `...`: the concatenation's pieces are split at "` + name + `"
    pieces = re.split(r"` \+ (\w+) \+ `", match.group(1))
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            out.append(piece)
        elif piece in names:
            out.append(names[piece])
        else:
            raise SystemExit(f"unknown constant {piece} in kind's defaultStorageManifest")
    return "".join(out)


def _version_of(binary: Path, *args: str) -> str:
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout + proc.stderr


def _check_version(binary: Path, args: tuple[str, ...], want: str) -> None:
    text = _version_of(binary, *args)
    if want not in text:
        raise SystemExit(f"{binary} {' '.join(args)} does not say {want!r}: {text.strip()[:200]}")


def write_images(bin_dir: Path, stage_dir: Path, required: list[str], k8s_version: str, local_path_version: str,
                 out_dir: Path) -> list[Path]:
    """One docker archive per image ``required`` names (kubeadm's list, the sandbox image) plus the storage images,
    into ``out_dir``; raises SystemExit for an image this module cannot make or a binary of the wrong version."""
    node = bin_dir / "kind-node"
    made: list[Path] = []

    def write(tag: str, files: dict[str, tuple[bytes, int]], config: dict[str, object],
              tree: Path | None = None) -> None:
        name = re.sub(r"[^A-Za-z0-9.-]", "_", tag) + ".tar"
        made.append(images.write_docker_archive(out_dir / name, tag, files, config, tree))

    def binary(path: Path, at: str) -> dict[str, tuple[bytes, int]]:
        return {at: (path.read_bytes(), 0o755)}

    for tag in required:
        repo, _, version = tag.rpartition(":")
        base = repo.rsplit("/", 1)[-1]
        if tag == PAUSE_IMAGE:
            write(tag, binary(bin_dir / "pause", "pause"), {"Entrypoint": ["/pause"], "User": "65535:65535"})
        elif repo.startswith("registry.k8s.io/") and base in KUBE_BINARIES:
            if version != k8s_version:
                raise SystemExit(f"kubeadm wants {tag}, the binaries are {k8s_version}")
            _check_version(bin_dir / base, ("--version",), f"Kubernetes {k8s_version}")
            tree = stage_dir / "kube-proxy" if base == "kube-proxy" else None
            write(tag, binary(bin_dir / base, f"usr/local/bin/{base}"),
                  {"Entrypoint": [f"/usr/local/bin/{base}"], "Env": [PATH_ENV]}, tree)
        elif repo == "registry.k8s.io/etcd":
            _check_version(node / "etcd", ("--version",), f"etcd Version: {version.split('-')[0]}")
            write(tag, binary(node / "etcd", "usr/local/bin/etcd"),
                  {"Entrypoint": ["/usr/local/bin/etcd"], "Env": [PATH_ENV]})
        elif repo == "registry.k8s.io/coredns/coredns":
            _check_version(node / "coredns", ("-version",), f"CoreDNS-{version.lstrip('v')}")
            write(tag, binary(node / "coredns", "coredns"), {"Entrypoint": ["/coredns"], "ExposedPorts":
                                                             {"53/tcp": {}, "53/udp": {}}})
        else:
            raise SystemExit(f"no recipe for image {tag} (kubeadm or the containerd config names it)")
    provisioner = PROVISIONER_IMAGE.format(version=local_path_version)
    write(provisioner, binary(node / "local-path-provisioner", "usr/local/bin/local-path-provisioner"),
          {"Entrypoint": ["/usr/local/bin/local-path-provisioner"], "Env": [PATH_ENV]})
    write(HELPER_IMAGE.format(version=local_path_version), {}, {"Env": [PATH_ENV]}, stage_dir / "helper")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("manifests", help="write default-cni.yaml, default-storage.yaml, cni.conflist.tmpl")
    m.add_argument("--kind-src", type=Path, required=True)
    m.add_argument("--local-path-version", required=True)
    m.add_argument("--out", type=Path, required=True)
    i = sub.add_parser("images", help="write the image archives; prints their paths")
    i.add_argument("--bin", type=Path, required=True)
    i.add_argument("--stage", type=Path, required=True)
    i.add_argument("--required", type=Path, required=True, help="file: one image per line (kubeadm's list, pause)")
    i.add_argument("--k8s-version", required=True)
    i.add_argument("--local-path-version", required=True)
    i.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "manifests":
        args.out.mkdir(parents=True, exist_ok=True)
        version = args.local_path_version
        (args.out / "default-cni.yaml").write_text(cni_manifest())
        (args.out / "default-storage.yaml").write_text(storage_manifest(
            args.kind_src, PROVISIONER_IMAGE.format(version=version), HELPER_IMAGE.format(version=version)))
        (args.out / "cni.conflist.tmpl").write_text(CNI_TEMPLATE)
        return 0
    required = [line.strip() for line in args.required.read_text().splitlines() if line.strip()]
    for path in write_images(args.bin, args.stage, required, args.k8s_version, args.local_path_version, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
