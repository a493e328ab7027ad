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

ready() { [ -x "$OUT/lws-controller" ] && [ -f "$OUT/lws/webhook/manifests.yaml" ]; }
ready && exit 0
# one build at a time per cache dir (k8s-bins.sh runs may overlap); the other run finds it built
exec {LOCK}>"$OUT/.lws.lock"
flock -n "$LOCK" || { log "waiting for another build of lws"; flock "$LOCK"; }
ready && exit 0

log "building the LeaderWorkerSet controller $LWS_VERSION (~5-10 min cold on 2 cores)"
W=$(mktemp -d)
BIN=$(mktemp "$OUT/.lws-controller.XXXXXX")
FILES=$(mktemp -d "$OUT/.lws.XXXXXX")
trap 'rm -rf "$W" "$BIN" "$FILES"' EXIT
(
  cd "$W"
  go mod init local.test/lwsbin >/dev/null 2>&1
  go get "sigs.k8s.io/lws@$LWS_VERSION"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/lws/cmd"\n' > tools.go
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$BIN" sigs.k8s.io/lws/cmd
  MODDIR=$(go list -m -f '{{.Dir}}' sigs.k8s.io/lws)
  mkdir -p "$FILES/crd" "$FILES/webhook"
  cp "$MODDIR"/config/crd/bases/*.yaml "$FILES/crd/"
  cp "$MODDIR/config/webhook/manifests.yaml" "$FILES/webhook/"
  chmod -R u+w "$FILES"
)
chmod 755 "$FILES"
rm -rf "$OUT/lws"; mv -T "$FILES" "$OUT/lws"
chmod +x "$BIN"; mv -f "$BIN" "$OUT/lws-controller"
