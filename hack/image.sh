#!/usr/bin/env bash
# Build the operator image from the Dockerfile (`make image`); prints the image name on its last line.
#
#   IMAGE=localhost/ctxfit:dev     the tag to build (default)
#   DOCKERFILE=Dockerfile CONTEXT=.  what to build (repo-relative; the fake engine: hack/fake-engine/Containerfile, hack)
#   PYTHON_IMAGE=...               the base for both stages; by default the Dockerfile's official
#                                  python:3.11-slim image when it is present or can be pulled, else the
#                                  offline Debian base from hack/base-image.sh (machines without a registry)
#   CTXFIT_CONTAINER_ENGINE=...    docker | podman | buildah (default: docker with a daemon, else podman)
# Layers are cached by the engine: an unchanged tree rebuilds in seconds.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HACK")
# shellcheck source=hack/container-engine.sh
source "$HACK/container-engine.sh"
IMAGE=${IMAGE:-localhost/ctxfit:dev}
DOCKERFILE=${DOCKERFILE:-Dockerfile}
CONTEXT=${CONTEXT:-.}
log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -z "${PYTHON_IMAGE:-}" ]; then
  official=$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$REPO/Dockerfile")
  present() {
    case $ENGINE in
      buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
      *) $ENGINE image inspect "$1" >/dev/null 2>&1 ;;
    esac
  }
  if present "$official" || $ENGINE pull -q "$official" >/dev/null 2>&1; then
    PYTHON_IMAGE=$official
  else
    log "$official cannot be pulled here: using the offline Debian base (hack/base-image.sh)"
    PYTHON_IMAGE=$(bash "$HACK/base-image.sh" | tail -1)
  fi
fi
start=$(date +%s)
log "$BUILD $IMAGE on $PYTHON_IMAGE"
( cd "$REPO" && nice -n 10 $BUILD --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" -t "$IMAGE" -f "$DOCKERFILE" "$CONTEXT" ) >&2
# Each rebuild after a source change leaves the previous build stage (~460 MB) and image untagged. Tag the newest
# build stage (all layers cached: instant) so its cache stays, then prune only untagged images of ours (by label).
if grep -q '^FROM .* AS build$' "$REPO/$DOCKERFILE"; then
  ( cd "$REPO" && $BUILD -q --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --target build -t "${IMAGE%:*}-build:${IMAGE##*:}" \
      -f "$DOCKERFILE" "$CONTEXT" ) >/dev/null
fi
if [ "$ENGINE" != buildah ]; then
  $ENGINE image prune -f --filter label=io.ctxfit.image >/dev/null 2>&1 || true
fi
log "$IMAGE built ($(( $(date +%s) - start )) s)"
echo "$IMAGE"
