#!/usr/bin/env bash
# The real node's binaries (hack/cluster_realnode.py): kubelet and kube-proxy from k8s.io/kubernetes $K8S_VERSION
# (the wrapper module of hack/lib/bins.sh, as hack/k8s-bins.sh), and `pause` (hack/pause, the pod sandbox's process),
# into $OUT (k8s-bins.sh's cache dir). Called by `hack/k8s-bins.sh [node]` (so CI builds them too); a no-op when all
# three are there. Locks $OUT/.node.lock and writes through unique temp names, like the other builds.
# The container runtime (containerd, runc) and the CNI plugins are Debian's packages (.ci/run installs them).
# ~1-2 min cold on 2 cores once kube-apiserver & co. are built (shared packages in Go's build cache).
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
K8S_VERSION=${K8S_VERSION:-v1.34.4}
HACK=$(cd "$(dirname "$0")" && pwd)
PAUSE_SRC=$HACK/pause
mkdir -p "$OUT"
log() { printf '[node-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib/bins.sh
. "$HACK/lib/bins.sh"
have() { [ -x "$OUT/$1" ]; }
ready() { have kubelet && have kube-proxy && have pause && [ ! "$PAUSE_SRC/main.go" -nt "$OUT/pause" ]; }
ready && exit 0
bins_lock node
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
  k8s_module nodebins
  log "resolving modules (kubelet, kube-proxy $K8S_VERSION)"
  go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION" 2>&1 | tail -3 >&2
  LDF=$(k8s_ldflags)
  for c in kubelet kube-proxy; do
    have "$c" && continue
    log "go build $c"
    nice -n 10 go build -trimpath -ldflags "$LDF" -o "$TMP/$c" "k8s.io/kubernetes/cmd/$c"
    mv -f "$TMP/$c" "$OUT/$c"
  done
fi
log "kubelet, kube-proxy, pause ready in $OUT ($(( $(date +%s) - start )) s)"
