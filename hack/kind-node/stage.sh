#!/bin/bash
# Runs inside the kind node image's build container (the kind base: Debian bookworm with dpkg and the packages):
# stages the Debian binaries two of the node's images need, with their libraries, the way kind's
# images/local-path-helper/stage-binary-and-deps.sh does (the binary, the targets of its symlinks, the libraries
# ldd lists, its package's copyright); that script itself looks packages up by the files' real paths, which dpkg
# does not know on a merged-/usr system such as bookworm (/lib -> /usr/lib), so this is its own:
#   /stage/kube-proxy  iptables/ip6tables (legacy and nft, their xtables extensions), nft, conntrack, sh, ln,
#                      and iptables-wrapper as iptables, ip6tables, ...-save, ...-restore
#   /stage/helper      sh, rm, mkdir (local-path-provisioner's helper pods: kind's local-path-helper image)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# stage_file FILE DIR: FILE at its path under DIR, and what its symlinks point to
stage_file() {
  cp -a --parents "$1" "$2"
  if [ -L "$1" ]; then stage_file "$(cd "$(dirname "$1")" && realpath -s "$(readlink "$1")")" "$2"; fi
}
# stage_libs FILE DIR: the shared libraries FILE links (ldd)
stage_libs() {
  local lib
  while read -r lib; do stage_file "$lib" "$2"; done < <(ldd "$1" | sed -E 's#.* => /#/#' | awk '{print $1}' | grep -v linux-vdso)
}
# stage DIR NAME...: each binary (from PATH), its libraries and its package's copyright
stage() {
  local dir=$1 name path pkg; shift
  for name in "$@"; do
    path=$(command -v "$name")
    stage_file "$path" "$dir"
    stage_libs "$path" "$dir"
    # dpkg knows a file by its path before the /usr merge (/bin/sh) or after (/usr/sbin/nft)
    pkg=$( (dpkg-query --search "$path" || dpkg-query --search "${path#/usr}") 2>/dev/null | cut -d: -f1 | head -1 || true)
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then cp -a --parents "/usr/share/doc/$pkg/copyright" "$dir"; fi
  done
}
# merged /usr (bookworm): /bin, /sbin and /lib are symlinks into /usr, as in the images that run these binaries
usrmerge() { local d; for d in bin sbin lib lib64; do mkdir -p "$1/usr/$d"; [ -e "$1/$d" ] || ln -s "usr/$d" "$1/$d"; done; }
rm -rf /stage && mkdir -p /stage/kube-proxy /stage/helper
usrmerge /stage/kube-proxy
stage /stage/kube-proxy xtables-legacy-multi xtables-nft-multi nft conntrack sh ln
# iptables' extensions (dlopen'ed, so not in ldd's list) and what they link (libm for `statistic`, ...)
cp -a --parents /usr/lib/x86_64-linux-gnu/xtables /stage/kube-proxy/
for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do stage_libs "$so" /stage/kube-proxy; done
install -m 0755 "$HERE/iptables-wrapper" /stage/kube-proxy/usr/sbin/iptables-wrapper
for t in iptables ip6tables; do
  for op in "" -save -restore; do
    ln -sf xtables-legacy-multi "/stage/kube-proxy/usr/sbin/$t-legacy$op"
    ln -sf xtables-nft-multi "/stage/kube-proxy/usr/sbin/$t-nft$op"
    ln -sf iptables-wrapper "/stage/kube-proxy/usr/sbin/$t$op"
  done
done
mkdir -p /stage/kube-proxy/run /stage/kube-proxy/tmp
usrmerge /stage/helper
stage /stage/helper sh rm mkdir
mkdir -p /stage/helper/tmp
