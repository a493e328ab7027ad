#!/usr/bin/env bash
# `make kind-demo`: ctxfit in a kind cluster on a laptop with Docker (or podman): kind creates a one-node cluster,
# the operator image (make image) and the fake engine (make fake-engine-image) are loaded into it (no registry),
# then hack/incluster_demo.py gives the node fake GPUs (GFD labels + nvidia.com/gpu), installs the chart, a Hub
# stand-in and manifests/kimi-128k.yaml, and waits for Ready. The same scripts the tests run (tests/e2e/
# test_image.py, test_fake_engine.py, test_kind_demo.py); only `kind create cluster` and `kind load` are kind's
# own, and they need kind's node image (kindest/node) from Docker Hub: CI here cannot pull it.
#
#   KIND_CLUSTER=ctxfit   cluster name (reused when it exists; `kind delete cluster --name ctxfit` removes it)
#   KIND_VERSION=v0.30.0  built from the Go module proxy into the binary cache when `kind` is not on PATH
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

# tools: kind, helm, kubectl from PATH, else built from the Go module proxy into the binary cache
BIN=""
need_bin() { [ -n "$BIN" ] || BIN=$(bash "$HACK/k8s-bins.sh" "$@" | tail -1); }
KIND=$(command -v kind || true)
if [ -z "$KIND" ]; then
  need_bin helm
  if [ ! -x "$BIN/kind" ]; then
    log "building kind $KIND_VERSION"
    GOBIN="$BIN" CGO_ENABLED=0 go install "sigs.k8s.io/kind@$KIND_VERSION"
  fi
  KIND=$BIN/kind
fi
HELM=$(command -v helm || { need_bin helm; echo "$BIN/helm"; })
KUBECTL=$(command -v kubectl || { BIN=""; need_bin kubernetes; echo "$BIN/kubectl"; })
[ "$ENGINE" = podman ] && export KIND_EXPERIMENTAL_PROVIDER=podman

KUBECONFIG_FILE=$DIR/kubeconfig
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "kind create cluster --name $CLUSTER (pulls kind's node image on first use)"
  "$KIND" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" --wait 180s
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
  --image "$OPERATOR_IMAGE" --engine-image "$ENGINE_IMAGE"
log "done: KUBECONFIG=$KUBECONFIG_FILE kubectl get infsrv -A; kind delete cluster --name $CLUSTER to remove it"
