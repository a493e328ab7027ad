# Sourced by hack/image.sh, hack/base-image.sh, hack/kind-demo.sh: picks the container engine and sets
# ENGINE (docker | podman | buildah) and BUILD (the build command).
#   CTXFIT_CONTAINER_ENGINE=docker|podman|buildah forces one; otherwise docker when its daemon answers,
#   else podman, else buildah.
# podman as root gives containers RLIMIT_NOFILE=1048576 unless containers.conf says otherwise; where the
# hard limit is lower (this CI machine: 20000) runc cannot set it, so CONTAINERS_CONF points at
# hack/containers.conf (no default ulimits: containers inherit ours) unless the caller set one.
_hack_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${CTXFIT_CONTAINER_ENGINE:-}" ]; then
  ENGINE=$CTXFIT_CONTAINER_ENGINE
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ENGINE=docker
elif command -v podman >/dev/null 2>&1; then
  ENGINE=podman
elif command -v buildah >/dev/null 2>&1; then
  ENGINE=buildah
else
  echo "no container engine: install podman (apt-get install podman) or docker" >&2
  return 1 2>/dev/null || exit 1
fi
case $ENGINE in
  docker|podman) BUILD="$ENGINE build" ;;
  buildah) BUILD="buildah bud" ;;
  *) echo "unknown container engine $ENGINE" >&2; return 1 2>/dev/null || exit 1 ;;
esac
if [ "$ENGINE" != docker ] && [ -z "${CONTAINERS_CONF:-}" ] && [ "$(id -u)" = 0 ]; then
  _nofile=$(ulimit -Hn)
  if [ "$_nofile" != unlimited ] && [ "$_nofile" -lt 1048576 ]; then
    export CONTAINERS_CONF="$_hack_dir/containers.conf"
  fi
fi
export ENGINE BUILD
