#!/usr/bin/env bash
# `make kind-demo`: ctxfit in a kind cluster on a laptop with Docker (or podman): kind creates a one-node cluster,
# the operator image (make image) and the fake engine (make fake-engine-image) are loaded into it (no registry),
# then hack/incluster_demo.py gives the node fake GPUs (GFD labels + nvidia.com/gpu), installs the chart, a Hub
# stand-in and manifests/kimi-128k.yaml, and waits for Ready. The same scripts the tests run (tests/e2e/
# test_kind_demo.py runs this script itself).
#
# The node image: kind's own (kindest/node, Docker Hub) where it can be pulled; otherwise one built here, offline,
# from the Kubernetes binaries the harness builds (`make kind-node-image`, hack/kind-node-image.sh: ~15 min cold).
#
#   KIND_CLUSTER=ctxfit   cluster name (reused when it exists; `kind delete cluster --name ctxfit` removes it)
#   KIND_VERSION=v0.30.0  built from the Go module proxy into the binary cache when `kind` is not on PATH
#   KIND_NODE_IMAGE=...   the node image to use (default: kind's, else the offline build)
#   KIND_DEMO_TIMEOUT=600 seconds to wait for the server to be Ready
#   hack/kind-demo.sh --delete   (`make kind-delete`): kind delete cluster --name $KIND_CLUSTER, with the same kind
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HACK")
# shellcheck source=hack/container-engine.sh
source "$HACK/container-engine.sh"
CLUSTER=${KIND_CLUSTER:-ctxfit}
KIND_VERSION=${KIND_VERSION:-v0.30.0}
DIR=${XDG_CACHE_HOME:-$HOME/.cache}/ctxfit/kind/$CLUSTER
mkdir -p "$DIR"
log() { printf '[kind-demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# tools: kind, helm, kubectl from PATH, else built from the Go module proxy into the binary cache (hack/k8s-bins.sh)
bins() { bash "$HACK/k8s-bins.sh" "$@" | tail -1; }
KIND=$(command -v kind || echo "$(bins kind)/kind")
[ "$ENGINE" = buildah ] && { log "kind needs docker or podman"; exit 1; }
[ "$ENGINE" = podman ] && export KIND_EXPERIMENTAL_PROVIDER=podman
if [ "${1:-}" = --delete ]; then
  "$KIND" delete cluster --name "$CLUSTER"
  rm -rf "$DIR"
  exit 0
fi
# kind mounts the host's /lib/modules into its node (read-only, for kube-proxy); a machine without one (some VMs
# and sandboxes, this CI) gets an empty directory, else the container cannot start
if [ ! -d /lib/modules ]; then
  log "/lib/modules does not exist: creating it empty (kind mounts it into the node)"
  mkdir -p /lib/modules
fi

# the node image: KIND_NODE_IMAGE, else kind's default where it can be pulled, else the offline build
node_image() {
  if [ -n "${KIND_NODE_IMAGE:-}" ]; then echo "$KIND_NODE_IMAGE"; return; fi
  local src kind_default
  src=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' 2>/dev/null || true)
  kind_default=$(sed -n 's/^const Image = "\(.*\)"$/\1/p' "$src/pkg/apis/config/defaults/image.go" 2>/dev/null || true)
  kind_default=${kind_default:-kindest/node:v1.34.0}
  # pinned by digest (kind's default names tag and digest; engines pull by the digest)
  local ref=docker.io/$kind_default
  case $ref in *@sha256:*) ref=${ref%%:*}@${ref#*@} ;; esac
  if $ENGINE image inspect "$ref" >/dev/null 2>&1 || $ENGINE pull -q "$ref" >/dev/null 2>&1; then
    echo "$ref"; return
  fi
  log "kind's node image ($kind_default) cannot be pulled here: building one offline (make kind-node-image)"
  bash "$HACK/kind-node-image.sh" | tail -1
}

HELM=$(command -v helm || echo "$(bins helm)/helm")
KUBECTL=$(command -v kubectl || echo "$(bins kubernetes)/kubectl")
KUBECONFIG_FILE=$DIR/kubeconfig
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  IMAGE=$(node_image)
  log "kind create cluster --name $CLUSTER --image $IMAGE"
  "$KIND" create cluster --name "$CLUSTER" --image "$IMAGE" --kubeconfig "$KUBECONFIG_FILE" --wait 300s
else
  "$KIND" get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
fi

OPERATOR_IMAGE=$(bash "$HACK/image.sh" | tail -1)
ENGINE_IMAGE=$(IMAGE=localhost/ctxfit-fake-engine:dev DOCKERFILE=hack/fake-engine/Containerfile CONTEXT=hack \
  bash "$HACK/image.sh" | tail -1)
for image in "$OPERATOR_IMAGE" "$ENGINE_IMAGE"; do
  archive=$DIR/$(echo "$image" | tr '/:' '__').tar
  rm -f "$archive"
  if [ "$ENGINE" = podman ]; then podman save --format docker-archive -o "$archive" "$image"; else $ENGINE save -o "$archive" "$image"; fi
  log "kind load image-archive $image"
  "$KIND" load image-archive "$archive" --name "$CLUSTER"
  rm -f "$archive"
done

cd "$REPO"
PYTHONPATH="$REPO/operator:$HACK${PYTHONPATH:+:$PYTHONPATH}" python3 "$HACK/incluster_demo.py" \
  --kubeconfig "$KUBECONFIG_FILE" --kubectl "$KUBECTL" --helm "$HELM" --node "$CLUSTER-control-plane" \
  --image "$OPERATOR_IMAGE" --engine-image "$ENGINE_IMAGE" --timeout "${KIND_DEMO_TIMEOUT:-600}"
log "done: KUBECONFIG=$KUBECONFIG_FILE kubectl get infsrv -A; make kind-delete (kind delete cluster --name $CLUSTER) removes it"
