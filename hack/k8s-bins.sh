#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, into a cache outside the repo.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes $K8S_VERSION)
#   etcd                                                             (go.etcd.io/etcd/server/v3 $ETCD_VERSION)
#   kwok                                                             (sigs.k8s.io/kwok $KWOK_VERSION)
#   helm                                                             (helm.sh/helm/v3 $HELM_VERSION)
#   lws-controller, lws/ (CRD + webhook manifests)                   (sigs.k8s.io/lws $LWS_VERSION)
#   keda-operator, keda/crd/ (KEDA's CRDs)                           (github.com/kedacore/keda/v2 $KEDA_VERSION)
#   gateway/ (Gateway API + InferencePool CRDs), lwepp-<v>           (hack/gateway-bins.sh: sigs.k8s.io/gateway-api,
#                                                                     sigs.k8s.io/gateway-api-inference-extension)
#
# Output: $CTXFIT_BIN_DIR (default ~/.cache/ctxfit/k8s/<k8s>-<etcd>-<kwok>-<helm>/), printed on the
# last line of stdout. A no-op when every binary is already there. Recipe: a wrapper module that
# replaces k8s.io/* with k8s.io/kubernetes' staging modules (https://github.com/kubernetes/kubernetes/tree/master/staging),
# etcd's server module, kwok (https://kwok.sigs.k8s.io) and helm with its version ldflags (helm's Makefile).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
HELM_VERSION=${HELM_VERSION:-v3.19.0}
LWS_VERSION=${LWS_VERSION:-v0.7.0}
KEDA_VERSION=${KEDA_VERSION:-v2.20.2}

STAGING_VERSION=v0.${K8S_VERSION#v1.}
K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
KEY="${K8S_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}-helm${HELM_VERSION}"
OUT=${CTXFIT_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxfit/k8s/$KEY}
mkdir -p "$OUT"

log() { printf '[k8s-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
have() { [ -x "$OUT/$1" ]; }

export CGO_ENABLED=0
export GOFLAGS=${GOFLAGS:-}
start=$(date +%s)

if ! (have kube-apiserver && have kube-controller-manager && have kube-scheduler && have kubectl); then
  log "building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl); 10-25 min cold on 2 cores"
  W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
  (
    cd "$W"
    cat > go.mod <<GOMOD
module local.test/k8sbins

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
    log "resolving modules"
    go get -tool k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION \
      k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION \
      k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION \
      k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION
    LDF="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      LDF+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR -X $p.gitTreeState=clean"
      LDF+=" -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    done
    for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
      have "$c" && continue
      log "go build $c"
      go build -trimpath -ldflags "$LDF" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c"
      mv "$OUT/$c.tmp" "$OUT/$c"
    done
  )
fi

if ! have etcd; then
  log "building etcd $ETCD_VERSION"
  W2=$(mktemp -d)
  (
    cd "$W2"; go mod init local.test/etcdbin >/dev/null 2>&1
    go get -tool go.etcd.io/etcd/server/v3@$ETCD_VERSION
    go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$OUT/etcd.tmp" "$OUT/etcd"
  )
  rm -rf "$W2"
fi

if ! have kwok; then
  log "building kwok $KWOK_VERSION"
  GOBIN="$OUT/.kwok" go install -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION
  mv "$OUT/.kwok/kwok" "$OUT/kwok"; rmdir "$OUT/.kwok"
fi
# kwok's stock stage files and CRDs (Logs/ClusterLogs/...), from the module cache, kept beside the binaries
kwok_moddir() {
  local d
  d=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION
  if [ ! -d "$d" ]; then
    (cd "$(mktemp -d)" && go mod download sigs.k8s.io/kwok@$KWOK_VERSION >/dev/null)
  fi
  echo "$d"
}
for pair in "kwok-stages:kustomize/stage" "kwok-crds:kustomize/crd/bases"; do
  dst=${pair%%:*}; src=${pair#*:}
  [ -d "$OUT/$dst" ] && continue
  MODDIR=$(kwok_moddir)
  rm -rf "$OUT/$dst.tmp"; mkdir -p "$OUT/$dst.tmp"
  cp -r "$MODDIR/$src/." "$OUT/$dst.tmp/"
  chmod -R u+w "$OUT/$dst.tmp"
  mv "$OUT/$dst.tmp" "$OUT/$dst"
done

if ! have helm; then
  log "building helm $HELM_VERSION"
  HELM_LDF="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  HELM_LDF+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
  GOBIN="$OUT/.helm" go install -ldflags "$HELM_LDF" helm.sh/helm/v3/cmd/helm@$HELM_VERSION
  mv "$OUT/.helm/helm" "$OUT/helm"; rmdir "$OUT/.helm"
fi

# LeaderWorkerSet controller (multi-node InferenceServers): built by hack/lws-bins.sh, same cache dir
OUT="$OUT" LWS_VERSION="$LWS_VERSION" bash "$(dirname "$0")/lws-bins.sh"
# KEDA operator (autoscaling e2e): built by hack/keda-bins.sh, same cache dir
OUT="$OUT" KEDA_VERSION="$KEDA_VERSION" bash "$(dirname "$0")/keda-bins.sh"
# Gateway API and InferencePool CRDs, GIE's lightweight endpoint picker: hack/gateway-bins.sh, same cache dir
OUT="$OUT" bash "$(dirname "$0")/gateway-bins.sh"

log "binaries ready in $OUT ($(( $(date +%s) - start )) s)"
echo "$OUT"
