#!/usr/bin/env bash
# An offline Python base image for the Dockerfile's PYTHON_IMAGE, for machines that reach Debian's packages
# and PyPI but no container registry (CI here): Debian bookworm minbase by debootstrap, with Debian's
# Python 3.11 (python3, venv, pip; `python` -> python3 as in the official image) and this machine's CA
# bundle (so pip inside the image build trusts the same roots as the host, proxies included).
#
#   bash hack/base-image.sh            # prints the image name on its last line; a no-op when it exists
#   BASE_IMAGE=... DEBIAN_MIRROR=...   # overrides (default localhost/ctxfit-python:3.11-bookworm, the
#                                      # host's first Debian URI or deb.debian.org)
# ~2 min cold (debootstrap), needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/container-engine.sh
source "$HACK/container-engine.sh"
BASE_IMAGE=${BASE_IMAGE:-localhost/ctxfit-python:3.11-bookworm}
log() { printf '[base-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

exists() {
  case $ENGINE in
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    *) $ENGINE image inspect "$1" >/dev/null 2>&1 ;;
  esac
}
if exists "$BASE_IMAGE"; then
  echo "$BASE_IMAGE"; exit 0
fi
command -v debootstrap >/dev/null || { log "debootstrap is required (apt-get install debootstrap)"; exit 1; }
[ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 1; }
if [ -z "${DEBIAN_MIRROR:-}" ]; then
  DEBIAN_MIRROR=$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
fi
start=$(date +%s)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
log "debootstrap --variant=minbase bookworm from $DEBIAN_MIRROR (~2 min)"
nice -n 10 debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
  bookworm "$W/rootfs" "$DEBIAN_MIRROR" > "$W/debootstrap.log" 2>&1 || { tail -20 "$W/debootstrap.log" >&2; exit 1; }
# the host's CA bundle (Debian's plus the machine's own roots) replaces the image's
cp /etc/ssl/certs/ca-certificates.crt "$W/rootfs/etc/ssl/certs/ca-certificates.crt"
rm -rf "$W/rootfs/var/cache/apt/archives/"*.deb "$W/rootfs/var/lib/apt/lists/"* "$W/rootfs/var/log/"*
tar -C "$W/rootfs" --numeric-owner -cf "$W/rootfs.tar" .
rm -rf "$W/rootfs"
cat > "$W/Containerfile" <<'CF'
FROM scratch
ADD rootfs.tar /
ENV LANG=C.UTF-8
CMD ["python3"]
CF
$BUILD -q -t "$BASE_IMAGE" -f "$W/Containerfile" "$W" >&2
log "$BASE_IMAGE ready ($(( $(date +%s) - start )) s)"
echo "$BASE_IMAGE"
