#!/usr/bin/env bash
# The inference gateway's parts, pinned, from the Go module proxy into $OUT (the harness's binary cache):
#   $OUT/gateway/gateway-api-$GATEWAY_API_VERSION/*.yaml  Gateway API standard channel (sigs.k8s.io/gateway-api
#                                                        config/crd/standard: GatewayClass, Gateway, HTTPRoute, ...)
#   $OUT/gateway/gie-$GIE_VERSION/*.yaml                  Gateway API Inference Extension: the InferencePool CRD
#                                                        (inference.networking.k8s.io/v1, config/crd/bases)
#   $OUT/lwepp-$GIE_VERSION                               GIE's lightweight endpoint picker (./cmd/lwepp)
# Called by hack/k8s-bins.sh (so CI fetches them too); a no-op when everything is there. Alone:
#   OUT=~/.cache/ctxfit/k8s/<key> bash hack/gateway-bins.sh
# Both modules are read from the module cache (`go mod download -json` gives their Dir). The proxy does not
# list the GIE's versions (the `@v/list` route answers 403), so the version is named exactly. lwepp is built
# in a copy of the module's own tree with its own go.mod/go.sum (GOWORK=off: the zip's go.work names
# ./conformance, a separate module the zip does not hold). GIE v1.6.0's go.mod says `go 1.26.0`.
# Cost, measured on the dev machine (2 cores shared with other builds): CRDs < 10 s; lwepp cold ~4-6 min
# (controller-runtime, client-go, grpc, envoy go-control-plane), warm Go build cache ~5 s.
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.6.3}
GIE_VERSION=${GIE_VERSION:-v1.6.0}
log() { printf '[gateway-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export CGO_ENABLED=0
GW_DIR="$OUT/gateway/gateway-api-$GATEWAY_API_VERSION"
GIE_DIR="$OUT/gateway/gie-$GIE_VERSION"
LWEPP="$OUT/lwepp-$GIE_VERSION"

moddir() {  # module@version -> its directory in the module cache (downloaded if needed)
  (cd "$(mktemp -d)" && go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"])')
}

if [ ! -f "$GW_DIR/gateway.networking.k8s.io_httproutes.yaml" ]; then
  log "fetching the Gateway API CRDs $GATEWAY_API_VERSION (standard channel)"
  src=$(moddir "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
  rm -rf "$GW_DIR.tmp"; mkdir -p "$GW_DIR.tmp"
  cp "$src"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$GW_DIR.tmp/"
  # the ValidatingAdmissionPolicy that guards upgrades is not a CRD; keep only CustomResourceDefinitions
  rm -f "$GW_DIR.tmp/gateway.networking.k8s.io_vap_safeupgrades.yaml"
  chmod -R u+w "$GW_DIR.tmp"; rm -rf "$GW_DIR"; mv "$GW_DIR.tmp" "$GW_DIR"
fi

if [ ! -f "$GIE_DIR/inference.networking.k8s.io_inferencepools.yaml" ] || [ ! -x "$LWEPP" ]; then
  src=$(moddir "sigs.k8s.io/gateway-api-inference-extension@$GIE_VERSION")
  if [ ! -f "$GIE_DIR/inference.networking.k8s.io_inferencepools.yaml" ]; then
    log "copying the InferencePool CRD (GIE $GIE_VERSION)"
    rm -rf "$GIE_DIR.tmp"; mkdir -p "$GIE_DIR.tmp"
    cp "$src/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$GIE_DIR.tmp/"
    chmod -R u+w "$GIE_DIR.tmp"; rm -rf "$GIE_DIR"; mv "$GIE_DIR.tmp" "$GIE_DIR"
  fi
  if [ ! -x "$LWEPP" ]; then
    log "building the lightweight endpoint picker (GIE $GIE_VERSION ./cmd/lwepp; ~5 min cold on 2 cores)"
    start=$(date +%s)
    W=$(mktemp -d)
    (
      cp -r "$src" "$W/src"; chmod -R u+w "$W/src"; cd "$W/src"
      GOWORK=off go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/gateway-api-inference-extension/version.BuildRef=$GIE_VERSION" \
        -o "$LWEPP.tmp" ./cmd/lwepp
      mv "$LWEPP.tmp" "$LWEPP"
    )
    rm -rf "$W"
    log "lwepp built in $(( $(date +%s) - start )) s"
  fi
fi
