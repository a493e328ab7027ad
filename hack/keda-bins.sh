#!/usr/bin/env bash
# Build the KEDA operator (github.com/kedacore/keda/v2 $KEDA_VERSION, ./cmd/operator) from the Go module
# proxy into $OUT, and keep its CRDs from the same module beside it:
#   $OUT/keda-operator, $OUT/keda/crd/*.yaml (keda.sh ScaledObject, ScaledJob, TriggerAuthentication, ...)
# Called by hack/k8s-bins.sh (so CI builds it too); a no-op when everything is there.
# KEDA's go.mod has `replace` directives, which `go install pkg@version` refuses and a throwaway module
# that requires KEDA would ignore; so the module's own tree is built: `go mod download -json` gives its
# Dir in the module cache (read-only), copied to a temp dir and built there with its own go.mod/go.sum.
# KEDA v2.20.2's go.mod says `go 1.26.0`.
# Cost, measured: cold (first build on the dev machine: KEDA's ~2,270 packages neither downloaded nor
# compiled before) 1,640 s = 27 min on 2 cores shared with other jobs (load average 12-16), downloads included;
# expect less on an idle 2-core machine. Warm Go build cache: 10 s. The operator binary is ~160 MB.
set -euo pipefail
: "${OUT:?OUT (the binary cache dir) must be set}"
KEDA_VERSION=${KEDA_VERSION:-v2.20.2}
log() { printf '[keda-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export CGO_ENABLED=0

ready() { [ -x "$OUT/keda-operator" ] && [ -f "$OUT/keda/crd/keda.sh_scaledobjects.yaml" ]; }
ready && exit 0
# one build at a time per cache dir (k8s-bins.sh runs may overlap); the other run finds it built
exec {LOCK}>"$OUT/.keda.lock"
flock -n "$LOCK" || { log "waiting for another build of keda"; flock "$LOCK"; }
ready && exit 0

log "building the KEDA operator $KEDA_VERSION (up to ~25 min cold on 2 cores)"
start=$(date +%s)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
BIN=$(mktemp "$OUT/.keda-operator.XXXXXX")
CRDS=$(mktemp -d "$OUT/.keda.XXXXXX")
trap 'rm -rf "$W" "$BIN" "$CRDS"' EXIT
(
  cd "$W"
  MODDIR=$(go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$MODDIR" src
  chmod -R u+w src
  cd src
  go build -trimpath -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}" \
    -o "$BIN" ./cmd/operator
  mkdir -p "$CRDS/crd"
  cp config/crd/bases/*.yaml "$CRDS/crd/"
)
chmod 755 "$CRDS"
rm -rf "$OUT/keda"; mv -T "$CRDS" "$OUT/keda"
chmod +x "$BIN"; mv -f "$BIN" "$OUT/keda-operator"
log "KEDA operator built in $(( $(date +%s) - start )) s"
