#!/usr/bin/env bash
# Build the LeaderWorkerSet controller (sigs.k8s.io/lws $LWS_VERSION) from the Go module proxy into $OUT,
# and keep its CRD and webhook manifests from the same module beside it:
#   $OUT/lws-controller, $OUT/lws/crd/*.yaml, $OUT/lws/webhook/manifests.yaml
# Called by hack/k8s-bins.sh (so CI builds it too); a no-op when everything is there.
# The proxy does not list sigs.k8s.io/lws versions (so `go install ...@version` fails on its deprecation
# check); a throwaway module that requires the exact version and imports its main package builds it.
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
LWS_VERSION=${LWS_VERSION:-v0.7.0}
log() { printf '[lws-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export CGO_ENABLED=0

if [ ! -x "$OUT/lws-controller" ] || [ ! -f "$OUT/lws/webhook/manifests.yaml" ]; then
  log "building the LeaderWorkerSet controller $LWS_VERSION (~5-10 min cold on 2 cores)"
  W=$(mktemp -d)
  (
    cd "$W"
    go mod init local.test/lwsbin >/dev/null 2>&1
    go get "sigs.k8s.io/lws@$LWS_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/lws/cmd"\n' > tools.go
    go mod tidy
    go build -trimpath -ldflags "-s -w" -o "$OUT/lws-controller.tmp" sigs.k8s.io/lws/cmd
    MODDIR=$(go list -m -f '{{.Dir}}' sigs.k8s.io/lws)
    rm -rf "$OUT/lws.tmp"; mkdir -p "$OUT/lws.tmp/crd" "$OUT/lws.tmp/webhook"
    cp "$MODDIR"/config/crd/bases/*.yaml "$OUT/lws.tmp/crd/"
    cp "$MODDIR/config/webhook/manifests.yaml" "$OUT/lws.tmp/webhook/"
    chmod -R u+w "$OUT/lws.tmp"
    rm -rf "$OUT/lws"; mv "$OUT/lws.tmp" "$OUT/lws"
    mv "$OUT/lws-controller.tmp" "$OUT/lws-controller"
  )
  rm -rf "$W"
fi
