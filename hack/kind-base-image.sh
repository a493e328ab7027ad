#!/usr/bin/env bash
# An offline kind base image (the role of docker.io/kindest/base, which this machine cannot pull): kind's own
# images/base recipe (sigs.k8s.io/kind $KIND_VERSION, read from the Go module cache: its Dockerfile, entrypoint,
# systemd units, containerd config) applied to Debian bookworm made by debootstrap, with Debian's packages in
# place of the ones kind builds from source: systemd, containerd 1.6, runc, containernetworking-plugins (ptp,
# host-local, portmap, loopback, ...), iptables/nftables, conntrack, ...; crictl from hack/kind-bins.sh; the
# machine's CA bundle (as hack/base-image.sh does). hack/kind-node-image.sh adds Kubernetes on top.
#
#   bash hack/kind-base-image.sh     # prints the image on its last line; a no-op when it exists
#   KIND_BASE_IMAGE=... DEBIAN_MIRROR=... BIN=<k8s-bins.sh dir with kind-node/crictl>
# Differences from kindest/base, each for a reason:
#   - containerd 1.6 (Debian) instead of 2.1: kind's config.toml is config version 2, which 1.6 reads;
#   - restrict_oom_score_adj = true: without CAP_SYS_RESOURCE (this sandbox) containerd cannot give a container an
#     oom_score_adj below its own (every sandbox would fail); with it, nothing changes where containerd runs at
#     -999 (its unit's OOMScoreAdjust);
#   - sandbox_image = the pause image hack/kind-node-image.sh imports (no registry.k8s.io here);
#   - no fuse-overlayfs snapshotter (rootless only; not packaged by Debian).
# ~4-6 min cold (debootstrap), needs root and debootstrap.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/container-engine.sh
source "$HACK/container-engine.sh"
KIND_VERSION=${KIND_VERSION:-v0.30.0}
KIND_BASE_IMAGE=${KIND_BASE_IMAGE:-localhost/ctxfit-kind-base:$KIND_VERSION-bookworm}
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/ctxfit-pause:1}
log() { printf '[kind-base %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# the image carries a digest of this script and kind's version; a change rebuilds it
INPUTS=$( (cat "$0"; echo "$KIND_VERSION $PAUSE_IMAGE") | sha256sum | cut -c1-16)
OLD_ID=""
if $ENGINE image inspect "$KIND_BASE_IMAGE" >/dev/null 2>&1; then
  label=$($ENGINE image inspect --format '{{ index .Config.Labels "io.ctxfit.inputs" }}' "$KIND_BASE_IMAGE" 2>/dev/null || true)
  [ "$label" = "$INPUTS" ] && { echo "$KIND_BASE_IMAGE"; exit 0; }
  OLD_ID=$($ENGINE image inspect --format '{{.Id}}' "$KIND_BASE_IMAGE")
  log "$KIND_BASE_IMAGE was built from other inputs: rebuilding"
fi
command -v debootstrap >/dev/null || { log "debootstrap is required (apt-get install debootstrap)"; exit 1; }
[ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 1; }
BIN=${BIN:-$(bash "$HACK/k8s-bins.sh" kind-node | tail -1)}
KIND_SRC=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
FILES=$KIND_SRC/images/base/files
if [ -z "${DEBIAN_MIRROR:-}" ]; then
  DEBIAN_MIRROR=$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
fi
start=$(date +%s)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
R=$W/rootfs
# kind's package list (images/base/Dockerfile) minus fuse-overlayfs, plus the runtime kind builds from source
PACKAGES=systemd,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz
PACKAGES+=,nfs-common,open-iscsi,bash,ca-certificates,curl,jq,procps,containerd,runc,containernetworking-plugins
log "debootstrap --variant=minbase bookworm from $DEBIAN_MIRROR (~3-6 min)"
nice -n 10 debootstrap --variant=minbase --include="$PACKAGES" bookworm "$R" "$DEBIAN_MIRROR" > "$W/debootstrap.log" 2>&1 \
  || { tail -20 "$W/debootstrap.log" >&2; exit 1; }

# kind's static files, with the modes its Dockerfile gives them (COPY --chmod)
install -m 0755 "$FILES"/usr/local/bin/* "$R/usr/local/bin/"
mkdir -p "$R/kind/bin" "$R/LICENSES" "$R/etc/containerd" "$R/etc/default" "$R/etc/sysctl.d" \
  "$R/etc/systemd/system/kubelet.service.d"
install -m 0644 "$FILES"/kind/README.txt "$R/kind/"
install -m 0755 "$FILES"/kind/bin/* "$R/kind/bin/"
install -m 0644 "$FILES"/LICENSES/* "$R/LICENSES/"
install -m 0644 "$FILES"/etc/crictl.yaml "$R/etc/"
install -m 0644 "$FILES"/etc/containerd/config.toml "$R/etc/containerd/"
install -m 0644 "$FILES"/etc/default/* "$R/etc/default/"
install -m 0644 "$FILES"/etc/sysctl.d/* "$R/etc/sysctl.d/"
install -m 0644 "$FILES"/etc/systemd/system/containerd.service "$FILES"/etc/systemd/system/kubelet.service \
  "$FILES"/etc/systemd/system/kubelet.slice "$FILES"/etc/systemd/system/undo-mount-hacks.service "$R/etc/systemd/system/"
install -m 0644 "$FILES"/etc/systemd/system/kubelet.service.d/* "$R/etc/systemd/system/kubelet.service.d/"

# the Dockerfile's first RUN: trim systemd's units, journald without kmsg, /sbin/init
find "$R/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$R"/lib/systemd/system/multi-user.target.wants/* "$R"/etc/systemd/system/*.wants/* \
  "$R"/lib/systemd/system/local-fs.target.wants/* "$R"/lib/systemd/system/sockets.target.wants/*udev* \
  "$R"/lib/systemd/system/sockets.target.wants/*initctl* "$R"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> "$R/etc/systemd/journald.conf"
ln -sf /lib/systemd/systemd "$R/sbin/init"
# ... its second and third: the services, /etc/kubernetes/manifests
systemctl --root="$R" enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
systemctl --root="$R" mask systemd-binfmt.service >/dev/null 2>&1
mkdir -p "$R/etc/kubernetes/manifests"

# the runtime where kind's units and config expect it: containerd at /usr/local/bin (containerd.service),
# the CNI plugins at /opt/cni/bin (containerd's default bin_dir), crictl at /usr/local/bin
ln -sf /usr/bin/containerd "$R/usr/local/bin/containerd"
mkdir -p "$R/opt/cni/bin"
for p in "$R"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/$(basename "$p")" "$R/opt/cni/bin/"; done
install -m 0755 "$BIN/kind-node/crictl" "$R/usr/local/bin/crictl"
# the OCI spec containerd's CRI starts from: ctr's default plus kind's product-files hook, without rlimits
chroot "$R" /usr/bin/ctr oci spec \
  | chroot "$R" jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | chroot "$R" jq 'del(.process.rlimits)' > "$R/etc/containerd/cri-base.json"
# containerd config: kind's, with the changes listed above
sed -i -e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
  -e "s#sandbox_image = .*#sandbox_image = \"$PAUSE_IMAGE\"#" "$R/etc/containerd/config.toml"
python3 - "$R/etc/containerd/config.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text = re.sub(r'\[proxy_plugins\]\n# fuse-overlayfs[^\n]*\n\[proxy_plugins\."fuse-overlayfs"\]\n(  [^\n]*\n)+', '', text)
open(path, "w").write(text)
PY
grep -q 'restrict_oom_score_adj = true' "$R/etc/containerd/config.toml"
cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
rm -rf "$R/var/cache/apt/archives/"*.deb "$R/var/lib/apt/lists/"* "$R/var/log/"*
tar -C "$R" --numeric-owner -cf "$W/rootfs.tar" .
rm -rf "$R"
cat > "$W/Containerfile" <<CF
FROM scratch
ADD rootfs.tar /
LABEL io.ctxfit.inputs=$INPUTS
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
CF
$BUILD -q -t "$KIND_BASE_IMAGE" -f "$W/Containerfile" "$W" >&2
[ -z "$OLD_ID" ] || $ENGINE rmi "$OLD_ID" >/dev/null 2>&1 || true
log "$KIND_BASE_IMAGE ready ($(( $(date +%s) - start )) s)"
echo "$KIND_BASE_IMAGE"
