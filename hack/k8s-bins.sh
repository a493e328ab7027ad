#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, into a cache outside the repo.
#
#   usage: hack/k8s-bins.sh [COMPONENT...]      (no argument: all of them)
#
#   kubernetes  kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes $K8S_VERSION)
#   etcd        etcd                                                             (go.etcd.io/etcd/server/v3 $ETCD_VERSION)
#   kwok        kwok, its stock stages and CRDs                                  (sigs.k8s.io/kwok $KWOK_VERSION)
#   helm        helm                                                             (helm.sh/helm/v3 $HELM_VERSION)
#   lws         lws-controller, lws/ (CRD + webhook manifests)                   (sigs.k8s.io/lws $LWS_VERSION)
#   keda        keda-operator, keda/crd/ (KEDA's CRDs)                           (github.com/kedacore/keda/v2 $KEDA_VERSION)
#   gateway     gateway/ (Gateway API + InferencePool CRDs), lwepp-<v>           (hack/gateway-bins.sh: sigs.k8s.io/gateway-api,
#                                                                                 sigs.k8s.io/gateway-api-inference-extension)
#   node        kubelet, kube-proxy, pause (the harness's real node)             (hack/node-bins.sh)
#   kind        kind (the CLI)                                                   (hack/kind-bins.sh cli)
#   kind-node   kind, kind-node/ (kubeadm, crictl, etcd, coredns, local-path-provisioner: the offline
#               kind node image's parts, hack/kind-node-image.sh)                (hack/kind-bins.sh node)
#   (kind and kind-node are not in the default set: only `make kind-demo` / `make kind-node-image` need them)
#   cluster     = kubernetes etcd kwok (what hack/ctxfit_cluster.py and `make demo` need)
#
# Output: $CTXFIT_BIN_DIR (default ~/.cache/ctxfit/k8s/<k8s>-<etcd>-<kwok>-<helm>/), printed on the
# last line of stdout. A no-op when the requested binaries are already there. Safe when several runs
# share the cache: each component is built under its own lock ($OUT/.<component>.lock, flock), rechecked
# once the lock is held, and written through a unique temp name then renamed. Recipe: a wrapper module that
# replaces k8s.io/* with k8s.io/kubernetes' staging modules (https://github.com/kubernetes/kubernetes/tree/master/staging),
# etcd's server module, kwok (https://kwok.sigs.k8s.io) and helm with its version ldflags (helm's Makefile).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
HELM_VERSION=${HELM_VERSION:-v3.19.0}
LWS_VERSION=${LWS_VERSION:-v0.7.0}
KEDA_VERSION=${KEDA_VERSION:-v2.20.2}

K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
KEY="${K8S_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}-helm${HELM_VERSION}"
OUT=${CTXFIT_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxfit/k8s/$KEY}
mkdir -p "$OUT"
HACK=$(cd "$(dirname "$0")" && pwd)

log() { printf '[k8s-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib/bins.sh
. "$HACK/lib/bins.sh"  # bins_lock, k8s_module, k8s_ldflags
have() { [ -x "$OUT/$1" ]; }
# install_tmp FILE NAME: move a finished build into place (rename on the same filesystem: atomic)
install_tmp() { chmod +x "$1"; mv -f "$1" "$OUT/$2"; }

export CGO_ENABLED=0
export GOFLAGS=${GOFLAGS:-}
start=$(date +%s)

ALL=(kubernetes etcd kwok helm lws keda gateway node)
WANT=()
for arg in "${@:-${ALL[@]}}"; do
  case "$arg" in
    cluster) WANT+=(kubernetes etcd kwok) ;;
    all) WANT+=("${ALL[@]}") ;;
    kubernetes|etcd|kwok|helm|lws|keda|gateway|node|kind|kind-node) WANT+=("$arg") ;;
    *) echo "unknown component: $arg (one of: ${ALL[*]} kind kind-node cluster all)" >&2; exit 2 ;;
  esac
done
wants() { local c; for c in "${WANT[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }

k8s_ready() { have kube-apiserver && have kube-controller-manager && have kube-scheduler && have kubectl; }
build_kubernetes() {
  k8s_ready && return 0
  log "building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl); 10-25 min cold on 2 cores"
  local W; W=$(mktemp -d); trap "rm -rf '$W'" EXIT
  cd "$W"
  k8s_module k8sbins
  log "resolving modules"
  go get -tool k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION \
    k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION \
    k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION \
    k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION
  local LDF c tmp
  LDF=$(k8s_ldflags)
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    have "$c" && continue
    log "go build $c"
    tmp=$(mktemp "$OUT/.$c.XXXXXX")
    go build -trimpath -ldflags "$LDF" -o "$tmp" "k8s.io/kubernetes/cmd/$c"
    install_tmp "$tmp" "$c"
  done
}

build_etcd() {
  have etcd && return 0
  log "building etcd $ETCD_VERSION"
  local W tmp; W=$(mktemp -d); trap "rm -rf '$W'" EXIT
  cd "$W"; go mod init local.test/etcdbin >/dev/null 2>&1
  go get -tool go.etcd.io/etcd/server/v3@$ETCD_VERSION
  tmp=$(mktemp "$OUT/.etcd.XXXXXX")
  go build -trimpath -ldflags "-s -w" -o "$tmp" go.etcd.io/etcd/server/v3
  install_tmp "$tmp" etcd
}

# kwok's stock stage files and CRDs (Logs/ClusterLogs/...), from the module cache, kept beside the binaries
kwok_moddir() {
  local d
  d=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION
  if [ ! -d "$d" ]; then
    (cd "$(mktemp -d)" && go mod download sigs.k8s.io/kwok@$KWOK_VERSION >/dev/null)
  fi
  echo "$d"
}
build_kwok() {
  local bin pair dst src tmp
  if ! have kwok; then
    log "building kwok $KWOK_VERSION"
    bin=$(mktemp -d "$OUT/.kwok.XXXXXX"); trap "rm -rf '$bin'" EXIT
    GOBIN="$bin" go install -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION
    install_tmp "$bin/kwok" kwok
  fi
  for pair in "kwok-stages:kustomize/stage" "kwok-crds:kustomize/crd/bases"; do
    dst=${pair%%:*}; src=${pair#*:}
    [ -d "$OUT/$dst" ] && continue
    tmp=$(mktemp -d "$OUT/.$dst.XXXXXX")
    cp -r "$(kwok_moddir)/$src/." "$tmp/"
    chmod -R u+w "$tmp"; chmod 755 "$tmp"
    mv -T "$tmp" "$OUT/$dst"
  done
}

build_helm() {
  have helm && return 0
  log "building helm $HELM_VERSION"
  local bin; bin=$(mktemp -d "$OUT/.helm.XXXXXX"); trap "rm -rf '$bin'" EXIT
  local HELM_LDF="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  HELM_LDF+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
  GOBIN="$bin" go install -ldflags "$HELM_LDF" helm.sh/helm/v3/cmd/helm@$HELM_VERSION
  install_tmp "$bin/helm" helm
}

# LeaderWorkerSet controller (multi-node InferenceServers) and KEDA operator (autoscaling e2e): their own
# scripts, same cache dir (they lock and use unique temp names the same way)
build_lws() { OUT="$OUT" LWS_VERSION="$LWS_VERSION" bash "$HACK/lws-bins.sh"; }
build_keda() { OUT="$OUT" KEDA_VERSION="$KEDA_VERSION" bash "$HACK/keda-bins.sh"; }
# Gateway API and InferencePool CRDs, GIE's lightweight endpoint picker: hack/gateway-bins.sh, same cache dir
build_gateway() { OUT="$OUT" bash "$HACK/gateway-bins.sh"; }
# the real node's kubelet, kube-proxy and pause (hack/cluster_realnode.py): hack/node-bins.sh, same cache dir
build_node() { OUT="$OUT" K8S_VERSION="$K8S_VERSION" bash "$HACK/node-bins.sh"; }
# kind and the offline kind node image's binaries (hack/kind-node-image.sh): hack/kind-bins.sh, same cache dir
build_kind() { OUT="$OUT" bash "$HACK/kind-bins.sh" cli; }
build_kind-node() { OUT="$OUT" K8S_VERSION="$K8S_VERSION" bash "$HACK/kind-bins.sh" node; }

for component in "${ALL[@]}" kind kind-node; do
  wants "$component" || continue
  case "$component" in
    lws|keda|gateway|node|kind|kind-node) "build_$component" ;;  # these lock themselves
    *) ( bins_lock "$component"; "build_$component" ) ;;
  esac
done

log "binaries ready in $OUT ($(( $(date +%s) - start )) s)"
echo "$OUT"
