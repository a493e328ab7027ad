#!/usr/bin/env bash
# `make kind-node-image`: a kind node image built offline (for machines that cannot pull docker.io/kindest/node),
# from the Kubernetes binaries hack/k8s-bins.sh builds (kubelet, kubectl, kube-apiserver & co., kubeadm) on the
# base hack/kind-base-image.sh makes. kind's own `kind build node-image` cannot run offline (it pulls etcd,
# CoreDNS, pause, kindnetd and local-path-provisioner), so this script does its steps itself, in its order
# (sigs.k8s.io/kind pkg/build/nodeimage/buildcontext.go buildImage): a build container of the base image, the
# binaries into /usr/bin, /kind/version, `kubeadm config images list` for the images the node needs, the CNI and
# storage manifests into /kind/manifests, containerd started in the container and every image imported
# (`ctr images import --no-unpack`, pinned), containerd stopped, the container committed with kind's entrypoint.
# What differs and why: hack/kind_node.py (the images, the manifests). Prints the image on its last line; a no-op
# when it exists.
#
#   KIND_NODE_IMAGE=localhost/ctxfit-kind-node:<k8s version>   the image to build
#   CTXFIT_CONTAINER_ENGINE=docker|podman                     as hack/image.sh (kind runs on either)
# ~3-5 min cold once the binaries are built (hack/kind-bins.sh: ~10 min cold), 0 warm.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/container-engine.sh
source "$HACK/container-engine.sh"
K8S_VERSION=${K8S_VERSION:-v1.34.4}
KIND_VERSION=${KIND_VERSION:-v0.30.0}
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-v0.0.30}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-localhost/ctxfit-kind-node:$K8S_VERSION}
log() { printf '[kind-node-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ "$ENGINE" != buildah ] || { log "needs docker or podman (a running build container)"; exit 1; }

# the image carries a digest of what made it (these scripts, the versions); a change rebuilds it
INPUTS=$( (cat "$0" "$HACK/kind-base-image.sh" "$HACK/kind_node.py" "$HACK/kind-node/"* "$HACK/images.py";
           echo "$K8S_VERSION $KIND_VERSION $LOCAL_PATH_VERSION") | sha256sum | cut -c1-16)
label() { $ENGINE image inspect --format '{{ index .Config.Labels "io.ctxfit.inputs" }}' "$1" 2>/dev/null || true; }
current() { [ "$(label "$KIND_NODE_IMAGE")" = "$INPUTS" ]; }
current && { echo "$KIND_NODE_IMAGE"; exit 0; }
# one build at a time on this machine (the base image too); the one that waited finds it built
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/ctxfit"
exec {LOCK}>"${XDG_CACHE_HOME:-$HOME/.cache}/ctxfit/.kind-node-image.lock"
flock -n "$LOCK" || { log "waiting for another build of the kind node image"; flock "$LOCK"; }
current && { echo "$KIND_NODE_IMAGE"; exit 0; }
OLD_ID=""
if $ENGINE image inspect "$KIND_NODE_IMAGE" >/dev/null 2>&1; then
  OLD_ID=$($ENGINE image inspect --format '{{.Id}}' "$KIND_NODE_IMAGE")
  log "$KIND_NODE_IMAGE was built from other inputs: rebuilding"
fi
start=$(date +%s)
BIN=$(bash "$HACK/k8s-bins.sh" kubernetes node kind-node | tail -1)
BASE=$(BIN="$BIN" KIND_VERSION="$KIND_VERSION" bash "$HACK/kind-base-image.sh" | tail -1)
KIND_SRC=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
W=$(mktemp -d)
ID=ctxfit-kind-build-$$-$(date +%s)
cleanup() { $ENGINE rm -f -v "$ID" >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
in_node() { $ENGINE exec "$ID" "$@"; }

log "build container $ID from $BASE"
$ENGINE run -d --entrypoint=sleep --name="$ID" --security-opt seccomp=unconfined "$BASE" infinity >/dev/null
for b in "$BIN/kind-node/kubeadm" "$BIN/kubelet" "$BIN/kubectl"; do
  $ENGINE cp "$b" "$ID:/usr/bin/$(basename "$b")"
  in_node chmod +x "/usr/bin/$(basename "$b")"
  in_node chown root:root "/usr/bin/$(basename "$b")"
done
printf '%s' "$K8S_VERSION" > "$W/version"
$ENGINE cp "$W/version" "$ID:/kind/version"

# the images: kubeadm's list for this version, the sandbox image of the containerd config in place of its pause
in_node kubeadm config images list --kubernetes-version "$K8S_VERSION" | grep -v pause > "$W/required"
in_node sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' /etc/containerd/config.toml >> "$W/required"
log "images: $(tr '\n' ' ' < "$W/required")"

# manifests (kind's storage manifest with our images; a CNI note in kindnet's place) and containerd's CNI template
python3 "$HACK/kind_node.py" manifests --kind-src "$KIND_SRC" --local-path-version "$LOCAL_PATH_VERSION" --out "$W/manifests"
in_node mkdir -p /kind/manifests
$ENGINE cp "$W/manifests/default-cni.yaml" "$ID:/kind/manifests/default-cni.yaml"
$ENGINE cp "$W/manifests/default-storage.yaml" "$ID:/kind/manifests/default-storage.yaml"
$ENGINE cp "$W/manifests/cni.conflist.tmpl" "$ID:/etc/containerd/cni.conflist.tmpl"
in_node bash -c 'cat >> /etc/containerd/config.toml <<EOF

# ctxfit (hack/kind-node-image.sh): no kindnetd; the CNI config of each node comes from this template
[plugins."io.containerd.grpc.v1.cri".cni]
  conf_template = "/etc/containerd/cni.conflist.tmpl"
EOF'

# Debian binaries for the kube-proxy and local-path helper images, staged in the build container (it has dpkg)
in_node mkdir -p /kind/stage-tools
for f in "$HACK/kind-node/stage.sh" "$HACK/kind-node/iptables-wrapper"; do
  $ENGINE cp "$f" "$ID:/kind/stage-tools/$(basename "$f")"
done
in_node bash /kind/stage-tools/stage.sh
in_node rm -rf /kind/stage-tools
mkdir -p "$W/stage"
$ENGINE cp "$ID:/stage/kube-proxy" "$W/stage/kube-proxy"
$ENGINE cp "$ID:/stage/helper" "$W/stage/helper"
in_node rm -rf /stage
log "writing the image archives"
python3 "$HACK/kind_node.py" images --bin "$BIN" --stage "$W/stage" --required "$W/required" \
  --k8s-version "$K8S_VERSION" --local-path-version "$LOCAL_PATH_VERSION" --out "$W/images" > "$W/archives"

log "importing $(wc -l < "$W/archives") images into the node's containerd"
in_node bash -c 'nohup containerd > /dev/null 2>&1 &'
in_node bash -c 'for i in 0 1 2 3 4 5; do [ -S /run/containerd/containerd.sock ] && break; sleep "$i"; done; ctr version >/dev/null'
while read -r archive; do
  $ENGINE exec -i "$ID" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack \
    --digests - < "$archive" >/dev/null
  rm -f "$archive"
done < "$W/archives"
in_node ctr --namespace=k8s.io images list -q | grep -v -e '^sha256:' -e '^import-' >&2
in_node pkill containerd || true
sleep 1

$ENGINE commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' --change "LABEL io.ctxfit.inputs=$INPUTS" \
  "$ID" "$KIND_NODE_IMAGE" >/dev/null
# the image this one replaces (kept while a kind cluster still runs on it)
[ -z "$OLD_ID" ] || $ENGINE rmi "$OLD_ID" >/dev/null 2>&1 || true
log "$KIND_NODE_IMAGE built ($(( $(date +%s) - start )) s)"
echo "$KIND_NODE_IMAGE"
