# shellcheck shell=bash
# Sourced by hack/k8s-bins.sh, hack/node-bins.sh and hack/kind-bins.sh: what their builds of k8s.io/kubernetes
# commands share. The caller defines log() (its own prefix) and sets OUT (the binary cache dir) and K8S_VERSION.
#
#   bins_lock NAME        hold $OUT/.NAME.lock (flock) until the calling (sub)shell exits; another run waits here
#   k8s_module NAME       write ./go.mod: module local.test/NAME requiring k8s.io/kubernetes $K8S_VERSION, with
#                         every k8s.io staging module replaced by its tag v0.<minor>.<patch> (staging modules are
#                         required at v0.0.0 by k8s.io/kubernetes' go.mod; go install refuses replace directives,
#                         hence a throwaway wrapper module: https://github.com/kubernetes/kubernetes/tree/master/staging)
#   k8s_ldflags           print the -ldflags that stamp $K8S_VERSION into the binaries (kubectl version, /version)
#                         as Kubernetes' own build does (hack/lib/version.sh there), stripped (-s -w)

bins_lock() {
  local fd
  exec {fd}>"$OUT/.$1.lock"
  flock -n "$fd" || { log "waiting for another build of $1"; flock "$fd"; }
}

K8S_STAGING_MODULES=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)

k8s_module() {
  local m staging=v0.${K8S_VERSION#v1.}
  cat > go.mod <<GOMOD
module local.test/$1

go 1.24.0

godebug default=go1.24

require k8s.io/kubernetes $K8S_VERSION
GOMOD
  for m in "${K8S_STAGING_MODULES[@]}"; do
    echo "replace k8s.io/$m => k8s.io/$m $staging" >> go.mod
  done
}

k8s_ldflags() {
  local p minor ldf="-s -w"
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldf+=" -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$ldf"
}
