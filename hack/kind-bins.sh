#!/usr/bin/env bash
# kind and what an offline kind node image needs, from the Go module proxy into $OUT (k8s-bins.sh's cache dir):
#   $OUT/kind                          sigs.k8s.io/kind $KIND_VERSION (the CLI users run)
#   $OUT/kind-node/kubeadm             k8s.io/kubernetes $K8S_VERSION cmd/kubeadm (the node image runs it)
#   $OUT/kind-node/crictl              sigs.k8s.io/cri-tools $CRICTL_VERSION (`kind load` calls it on the node)
#   $OUT/kind-node/etcd                go.etcd.io/etcd/server/v3 $KIND_ETCD_VERSION (the etcd kubeadm deploys)
#   $OUT/kind-node/coredns             github.com/coredns/coredns $COREDNS_VERSION (the CoreDNS kubeadm deploys)
#   $OUT/kind-node/local-path-provisioner  github.com/rancher/local-path-provisioner $LOCAL_PATH_VERSION
# The versions are the ones kind's and kubeadm's own defaults name: kubeadm v1.34.4 lists etcd 3.6.5-0 and
# CoreDNS v1.12.1 (cmd/kubeadm/app/constants/constants.go), kind v0.30.0 builds its local-path-provisioner
# image from v0.0.30 (images/local-path-provisioner/Makefile) and its base image with crictl v1.33.0 (the proxy
# here serves v1.34.0, the release of our Kubernetes minor). hack/kind-node-image.sh turns them into images.
#   usage: OUT=... hack/kind-bins.sh [cli|node]   cli: kind alone (`hack/k8s-bins.sh kind`, ~1 min cold: what a
#   machine that pulls kind's node image needs); node: all of the above (`hack/k8s-bins.sh kind-node`, ~6-10 min cold
#   on 2 cores, CoreDNS is most of it). A no-op when they are there. Locks $OUT/.kind.lock and writes through
#   unique temp names, like the other builds.
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
K8S_VERSION=${K8S_VERSION:-v1.34.4}
KIND_VERSION=${KIND_VERSION:-v0.30.0}
CRICTL_VERSION=${CRICTL_VERSION:-v1.34.0}
KIND_ETCD_VERSION=${KIND_ETCD_VERSION:-v3.6.5}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.1}
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-v0.0.30}
NODE=$OUT/kind-node
mkdir -p "$NODE"
log() { printf '[kind-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib/bins.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/bins.sh"
WHAT=${1:-node}
case $WHAT in cli|node) ;; *) echo "usage: kind-bins.sh [cli|node]" >&2; exit 2 ;; esac
NODE_BINS=(kubeadm crictl etcd coredns local-path-provisioner)
ready() {
  [ -x "$OUT/kind" ] || return 1
  [ "$WHAT" = cli ] && return 0
  local b; for b in "${NODE_BINS[@]}"; do [ -x "$NODE/$b" ] || return 1; done
}
ready && exit 0
bins_lock kind
ready && exit 0

export CGO_ENABLED=0
start=$(date +%s)
TMP=$(mktemp -d "$OUT/.kind.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# go_install DEST PKG@VERSION [LDFLAGS]: `go install` into a temp GOBIN, then renamed into place
go_install() {
  local dest=$1 pkg=$2 ldf=${3:-} bin
  [ -x "$dest" ] && return 0
  log "go install $pkg"
  bin=$(mktemp -d "$TMP/bin.XXXXXX")
  GOBIN="$bin" nice -n 10 go install -trimpath -ldflags "-s -w $ldf" "$pkg"
  mv -f "$bin"/* "$dest"
}

go_install "$OUT/kind" "sigs.k8s.io/kind@$KIND_VERSION"
if [ "$WHAT" = cli ]; then log "kind $KIND_VERSION ready in $OUT ($(( $(date +%s) - start )) s)"; exit 0; fi
go_install "$NODE/crictl" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
  "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"
go_install "$NODE/coredns" "github.com/coredns/coredns@$COREDNS_VERSION" \
  "-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
go_install "$NODE/local-path-provisioner" "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION" \
  "-X main.VERSION=$LOCAL_PATH_VERSION"

# etcd's server module has `replace` directives (go install refuses them) and kubeadm is part of k8s.io/kubernetes,
# whose staging modules need replaces too: both through a throwaway wrapper module (kubeadm: hack/lib/bins.sh)
if [ ! -x "$NODE/etcd" ]; then
  log "building etcd $KIND_ETCD_VERSION"
  (
    cd "$(mktemp -d "$TMP/etcd.XXXXXX")"
    go mod init local.test/kindetcd >/dev/null 2>&1
    go get -tool "go.etcd.io/etcd/server/v3@$KIND_ETCD_VERSION" 2>&1 | tail -3 >&2
    nice -n 10 go build -trimpath -ldflags "-s -w" -o "$TMP/etcd" go.etcd.io/etcd/server/v3
  )
  mv -f "$TMP/etcd" "$NODE/etcd"
fi
if [ ! -x "$NODE/kubeadm" ]; then
  log "building kubeadm $K8S_VERSION"
  (
    cd "$(mktemp -d "$TMP/kubeadm.XXXXXX")"
    k8s_module kubeadmbin
    go get -tool "k8s.io/kubernetes/cmd/kubeadm@$K8S_VERSION" 2>&1 | tail -3 >&2
    nice -n 10 go build -trimpath -ldflags "$(k8s_ldflags)" -o "$TMP/kubeadm" k8s.io/kubernetes/cmd/kubeadm
  )
  mv -f "$TMP/kubeadm" "$NODE/kubeadm"
fi
log "kind $KIND_VERSION and the kind node's binaries ready in $OUT ($(( $(date +%s) - start )) s)"
