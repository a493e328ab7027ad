"""hack/kind_node.py (the offline kind node image's images and manifests) and hack/kind-node/iptables-wrapper, without
an engine or a cluster:

- kind's storage manifest is read from kind's Go source, its image constants replaced by ours (never kindest's);
- every image kubeadm lists gets an archive whose tag is that name and whose binary says that version; a binary of
  another version, or an image with no recipe, stops the build with a message naming it;
- a directory tree (staged Debian binaries) lands in the layer with its symlinks, owned by root;
- the iptables wrapper picks the backend holding the kubelet's hint chain, else the one with more rules.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
import kind_node  # noqa: E402

GO_SOURCE = '''package nodeimage

const storageProvisionerImage = "docker.io/kindest/local-path-provisioner:v1"
const storageHelperImage = "docker.io/kindest/local-path-helper:v2"

const defaultStorageManifest = `
apiVersion: apps/v1
kind: Deployment
spec:
  containers:
    - image: ` + storageProvisionerImage + `
      command: [local-path-provisioner, --helper-image, ` + storageHelperImage + `]
`
'''


def kind_src(tmp_path: Path, source: str = GO_SOURCE) -> Path:
    src = tmp_path / "kind"
    (src / "pkg/build/nodeimage").mkdir(parents=True)
    (src / "pkg/build/nodeimage/const_storage.go").write_text(source)
    return src


def test_storage_manifest_uses_our_images(tmp_path: Path) -> None:
    text = kind_node.storage_manifest(kind_src(tmp_path), "localhost/p:v0.0.30", "localhost/h:v0.0.30")
    assert "image: localhost/p:v0.0.30" in text
    assert "--helper-image, localhost/h:v0.0.30]" in text
    assert "kindest" not in text and "` +" not in text


def test_storage_manifest_unknown_constant_is_an_error(tmp_path: Path) -> None:
    src = kind_src(tmp_path, GO_SOURCE.replace("` + storageHelperImage + `", "` + someOtherImage + `"))
    with pytest.raises(SystemExit, match="someOtherImage"):
        kind_node.storage_manifest(src, "p", "h")


def test_cni_template_is_containerd_conf_template() -> None:
    conf = json.loads(kind_node.CNI_TEMPLATE)
    ptp, portmap = conf["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipMasq"] is True
    assert ptp["ipam"]["ranges"] == [[{"subnet": "{{.PodCIDR}}"}]]  # containerd renders the node's podCIDR
    assert portmap["capabilities"] == {"portMappings": True}
    assert "{{ .PodSubnet }}" in kind_node.cni_manifest()  # kind's template variable


def fake_bin(path: Path, says: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)


def bin_dir(tmp_path: Path, k8s: str = "v1.34.4", etcd: str = "3.6.5") -> Path:
    b = tmp_path / "bin"
    for name in kind_node.KUBE_BINARIES:
        fake_bin(b / name, f"Kubernetes {k8s}")
    fake_bin(b / "kind-node/etcd", f"etcd Version: {etcd}\nGit SHA: x")
    fake_bin(b / "kind-node/coredns", "CoreDNS-1.12.1\nlinux/amd64, go1.26")
    fake_bin(b / "kind-node/local-path-provisioner", "v0.0.30")
    fake_bin(b / "pause", "")
    return b


def stage_dir(tmp_path: Path) -> Path:
    s = tmp_path / "stage"
    if s.exists():
        return s
    for tree in ("kube-proxy", "helper"):
        (s / tree / "usr/bin").mkdir(parents=True)
        (s / tree / "usr/bin/dash").write_bytes(b"\x7fELF")
        (s / tree / "usr/bin/sh").symlink_to("dash")
        (s / tree / "bin").symlink_to("usr/bin")
    return s


REQUIRED = ["registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/kube-controller-manager:v1.34.4",
            "registry.k8s.io/kube-scheduler:v1.34.4", "registry.k8s.io/kube-proxy:v1.34.4",
            "registry.k8s.io/coredns/coredns:v1.12.1", "registry.k8s.io/etcd:3.6.5-0", kind_node.PAUSE_IMAGE]


def archive_tag_and_layer(path: Path) -> tuple[str, tarfile.TarFile]:
    with tarfile.open(path) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        data = outer.extractfile(manifest[0]["Layers"][0]).read()  # type: ignore[union-attr]
    layer = tarfile.open(fileobj=io.BytesIO(data))  # noqa: SIM115 - the caller reads it (in memory)
    return manifest[0]["RepoTags"][0], layer


def test_every_listed_image_is_made_with_its_binary(tmp_path: Path) -> None:
    made = kind_node.write_images(bin_dir(tmp_path), stage_dir(tmp_path), REQUIRED, "v1.34.4", "v0.0.30",
                                  tmp_path / "out")
    tags = {archive_tag_and_layer(p)[0]: p for p in made}
    assert set(tags) == {*REQUIRED, "localhost/ctxfit-kind-local-path-provisioner:v0.0.30",
                         "localhost/ctxfit-kind-local-path-helper:v0.0.30"}
    _, apiserver = archive_tag_and_layer(tags["registry.k8s.io/kube-apiserver:v1.34.4"])
    assert apiserver.getnames() == ["usr/local/bin/kube-apiserver"]
    _, proxy = archive_tag_and_layer(tags["registry.k8s.io/kube-proxy:v1.34.4"])
    members = {m.name: m for m in proxy.getmembers()}
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
    assert members["usr/bin/sh"].issym() and members["usr/bin/dash"].uid == 0
    assert "usr/local/bin/kube-proxy" in members
    _, coredns = archive_tag_and_layer(tags["registry.k8s.io/coredns/coredns:v1.12.1"])
    assert coredns.getnames() == ["coredns"]


def test_a_binary_of_another_version_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"etcd --version does not say 'etcd Version: 3.6.5'"):
        kind_node.write_images(bin_dir(tmp_path, etcd="3.6.16"), stage_dir(tmp_path), REQUIRED, "v1.34.4",
                               "v0.0.30", tmp_path / "out")
    with pytest.raises(SystemExit, match=re.escape("kubeadm wants registry.k8s.io/kube-apiserver:v1.35.0")):
        kind_node.write_images(bin_dir(tmp_path), stage_dir(tmp_path), ["registry.k8s.io/kube-apiserver:v1.35.0"],
                               "v1.34.4", "v0.0.30", tmp_path / "out")


def test_an_image_without_a_recipe_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=re.escape("no recipe for image docker.io/kindest/kindnetd:v1")):
        kind_node.write_images(bin_dir(tmp_path), stage_dir(tmp_path), ["docker.io/kindest/kindnetd:v1"],
                               "v1.34.4", "v0.0.30", tmp_path / "out")


def wrapper_root(tmp_path: Path, legacy_save: str, nft_save: str) -> Path:
    """A copy of the wrapper whose /usr/sbin is a temp dir, with stand-in xtables-{legacy,nft}-multi."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    script = (HACK / "kind-node" / "iptables-wrapper").read_text().replace("/usr/sbin/", f"{sbin}/")
    (sbin / "iptables-wrapper").write_text(script)
    for mode, save in (("legacy", legacy_save), ("nft", nft_save)):
        fake = sbin / f"xtables-{mode}-multi"
        fake.write_text("#!/bin/sh\n"  # a multi-call binary: the applet is argv[0], or argv[1] when called by name
                        'name=$(basename "$0"); case $name in xtables-*) name=$1; shift ;; esac\n'
                        f'case $name in *-save) printf \'%b\' "{save}" ;; *) echo "{mode} $name $*" ;; esac\n')
    for f in sbin.iterdir():
        f.chmod(0o755)
    for name in ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"):
        (sbin / name).symlink_to("iptables-wrapper")
    return sbin


@pytest.mark.parametrize(("legacy", "nft", "mode"), [
    ("", ":KUBE-IPTABLES-HINT - [0:0]\\n", "nft"),     # the kubelet's hint chain decides
    ("-A INPUT -j ACCEPT\\n-A X\\n", "-A Y\\n", "legacy"),  # no hint: more rules
    ("", "", "legacy"),                                 # nothing anywhere: legacy, as kind's entrypoint decides
])
def test_iptables_wrapper_follows_the_node(tmp_path: Path, legacy: str, nft: str, mode: str) -> None:
    sbin = wrapper_root(tmp_path, legacy, nft)
    env = {**os.environ, "PATH": f"{sbin}:{os.environ['PATH']}"}
    out = subprocess.run([str(sbin / "iptables-restore"), "--noflush"], env=env, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert out.strip() == f"{mode} iptables-restore --noflush"
    assert os.readlink(sbin / "ip6tables-save") == f"xtables-{mode}-multi"
