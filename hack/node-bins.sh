#!/usr/bin/env bash
# The real node's binaries (hack/cluster_realnode.py): kubelet and kube-proxy from k8s.io/kubernetes $K8S_VERSION
# (the same wrapper module recipe as hack/k8s-bins.sh), and `pause` (hack/pause, the pod sandbox's process), into
# $OUT (k8s-bins.sh's cache dir). Called by `hack/k8s-bins.sh [node]` (so CI builds them too); a no-op when all
# three are there. Locks $OUT/.node.lock and writes through unique temp names, like the other builds.
# The container runtime (containerd, runc) and the CNI plugins are Debian's packages (.ci/run installs them).
# ~1-2 min cold on 2 cores once kube-apiserver & co. are built (shared packages in Go's build cache).
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
K8S_VERSION=${K8S_VERSION:-v1.34.4}
STAGING_VERSION=v0.${K8S_VERSION#v1.}
K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
PAUSE_SRC=$(cd "$(dirname "$0")/pause" && pwd)
mkdir -p "$OUT"
log() { printf '[node-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
have() { [ -x "$OUT/$1" ]; }
ready() { have kubelet && have kube-proxy && have pause && [ ! "$PAUSE_SRC/main.go" -nt "$OUT/pause" ]; }
ready && exit 0
exec {LOCK}>"$OUT/.node.lock"
flock -n "$LOCK" || { log "waiting for another build of node"; flock "$LOCK"; }
ready && exit 0

export CGO_ENABLED=0
start=$(date +%s)
W=$(mktemp -d)
TMP=$(mktemp -d "$OUT/.node.XXXXXX")
trap 'rm -rf "$W" "$TMP"' EXIT
if ! have pause || [ "$PAUSE_SRC/main.go" -nt "$OUT/pause" ]; then
  log "go build pause (hack/pause)"
  (cd "$PAUSE_SRC" && go build -trimpath -ldflags "-s -w" -o "$TMP/pause" .)
  mv -f "$TMP/pause" "$OUT/pause"
fi
if ! (have kubelet && have kube-proxy); then
  cd "$W"
  cat > go.mod <<GOMOD
module local.test/nodebins

go 1.24.0

godebug default=go1.24

require k8s.io/kubernetes $K8S_VERSION
GOMOD
  for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api \
    cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
    kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics \
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller; do
    echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION" >> go.mod
  done
  log "resolving modules (kubelet, kube-proxy $K8S_VERSION)"
  go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION" 2>&1 | tail -3 >&2
  LDF="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDF+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR -X $p.gitTreeState=clean"
    LDF+=" -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  for c in kubelet kube-proxy; do
    have "$c" && continue
    log "go build $c"
    nice -n 10 go build -trimpath -ldflags "$LDF" -o "$TMP/$c" "k8s.io/kubernetes/cmd/$c"
    mv -f "$TMP/$c" "$OUT/$c"
  done
fi
log "kubelet, kube-proxy, pause ready in $OUT ($(( $(date +%s) - start )) s)"
