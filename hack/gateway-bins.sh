#!/usr/bin/env bash
# The inference gateway's parts, pinned, from the Go module proxy into $OUT (the harness's binary cache):
#   $OUT/gateway/gateway-api-$GATEWAY_API_VERSION/*.yaml  Gateway API standard channel (sigs.k8s.io/gateway-api
#                                                        config/crd/standard: GatewayClass, Gateway, HTTPRoute, ...)
#   $OUT/gateway/gie-$GIE_VERSION/*.yaml                  Gateway API Inference Extension: the InferencePool CRD
#                                                        (inference.networking.k8s.io/v1, config/crd/bases)
#   $OUT/lwepp-$GIE_VERSION                               GIE's lightweight endpoint picker (./cmd/lwepp)
#   $OUT/extproc-gateway-$GIE_VERSION                     hack/extproc-gateway: a gateway's data plane for the picker
#                                                        (ext_proc client + forwarding; no Envoy builds here)
# Called by hack/k8s-bins.sh (so CI fetches them too); a no-op when everything is there. Alone:
#   OUT=~/.cache/ctxfit/k8s/<key> bash hack/gateway-bins.sh
# Both modules are read from the module cache (`go mod download -json` gives their Dir). The proxy does not
# list the GIE's versions (the `@v/list` route answers 403), so the version is named exactly. lwepp is built
# in a copy of the module's own tree with its own go.mod/go.sum (GOWORK=off: the zip's go.work names
# ./conformance, a separate module the zip does not hold). GIE v1.6.0's go.mod says `go 1.26.0`.
# extproc-gateway is built in the same tree (its one file copied to cmd/extproc-gateway), so GIE's go.mod pins
# the go-control-plane and grpc it speaks ext_proc with, and it reuses lwepp's compiled dependencies.
# Cost: fully cold (empty GOMODCACHE and GOCACHE, downloads from the proxy included) 252 s user + 62 s sys CPU
# for everything here (measured 2026-12-02 with /usr/bin/time; 18 min wall at nice 19 on a machine at load ~10),
# so ~3-5 min on 2 free cores; lwepp is nearly all of it (controller-runtime, client-go v0.36, grpc, envoy
# go-control-plane); warm Go build cache ~5 s; extproc-gateway 3-6 s after lwepp.
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.6.3}
GIE_VERSION=${GIE_VERSION:-v1.6.0}
log() { printf '[gateway-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export CGO_ENABLED=0
GW_DIR="$OUT/gateway/gateway-api-$GATEWAY_API_VERSION"
GIE_DIR="$OUT/gateway/gie-$GIE_VERSION"
LWEPP="$OUT/lwepp-$GIE_VERSION"
ROUTE="$OUT/extproc-gateway-$GIE_VERSION"
HACK=$(cd "$(dirname "$0")" && pwd)

moddir() {  # module@version -> its directory in the module cache (downloaded if needed)
  (cd "$(mktemp -d)" && go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"])')
}
ready() {
  [ -f "$GW_DIR/gateway.networking.k8s.io_httproutes.yaml" ] \
    && [ -f "$GIE_DIR/inference.networking.k8s.io_inferencepools.yaml" ] && [ -x "$LWEPP" ] && [ -x "$ROUTE" ]
}
ready && exit 0
# one build at a time per cache dir (k8s-bins.sh runs may overlap); the other run finds it built
exec {LOCK}>"$OUT/.gateway.lock"
flock -n "$LOCK" || { log "waiting for another build of gateway"; flock "$LOCK"; }
ready && exit 0
mkdir -p "$OUT/gateway"
TMP=$(mktemp -d "$OUT/.gateway.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$GW_DIR/gateway.networking.k8s.io_httproutes.yaml" ]; then
  log "fetching the Gateway API CRDs $GATEWAY_API_VERSION (standard channel)"
  src=$(moddir "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
  mkdir "$TMP/gw"
  cp "$src"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$TMP/gw/"
  # the ValidatingAdmissionPolicy that guards upgrades is not a CRD; keep only CustomResourceDefinitions
  rm -f "$TMP/gw/gateway.networking.k8s.io_vap_safeupgrades.yaml"
  chmod -R u+w "$TMP/gw"; chmod 755 "$TMP/gw"
  rm -rf "$GW_DIR"; mv -T "$TMP/gw" "$GW_DIR"
fi

src=$(moddir "sigs.k8s.io/gateway-api-inference-extension@$GIE_VERSION")
if [ ! -f "$GIE_DIR/inference.networking.k8s.io_inferencepools.yaml" ]; then
  log "copying the InferencePool CRD (GIE $GIE_VERSION)"
  mkdir "$TMP/gie"
  cp "$src/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$TMP/gie/"
  chmod -R u+w "$TMP/gie"; chmod 755 "$TMP/gie"
  rm -rf "$GIE_DIR"; mv -T "$TMP/gie" "$GIE_DIR"
fi
if [ ! -x "$LWEPP" ] || [ ! -x "$ROUTE" ]; then
  cp -r "$src" "$TMP/src"; chmod -R u+w "$TMP/src"
  mkdir "$TMP/src/cmd/extproc-gateway"; cp "$HACK/extproc-gateway/main.go" "$TMP/src/cmd/extproc-gateway/"
fi
if [ ! -x "$LWEPP" ]; then
  log "building the lightweight endpoint picker (GIE $GIE_VERSION ./cmd/lwepp; ~5 min cold on 2 cores)"
  start=$(date +%s)
  (
    cd "$TMP/src"
    GOWORK=off go build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/gateway-api-inference-extension/version.BuildRef=$GIE_VERSION" \
      -o "$TMP/lwepp" ./cmd/lwepp
  )
  chmod +x "$TMP/lwepp"; mv -f "$TMP/lwepp" "$LWEPP"
  log "lwepp built in $(( $(date +%s) - start )) s"
fi
if [ ! -x "$ROUTE" ]; then
  log "building extproc-gateway (hack/extproc-gateway, in GIE $GIE_VERSION's module)"
  start=$(date +%s)
  (cd "$TMP/src" && GOWORK=off go build -trimpath -ldflags "-s -w" -o "$TMP/extproc-gateway" ./cmd/extproc-gateway)
  chmod +x "$TMP/extproc-gateway"; mv -f "$TMP/extproc-gateway" "$ROUTE"
  log "extproc-gateway built in $(( $(date +%s) - start )) s"
fi
