#!/usr/bin/env bash
# Builds kni's image as an OCI archive with no container engine and no registry:
#   hack/build-image.sh [OUT.tar] [NAME]     (defaults: dist/kni-image.tar, kni:dev)
# It loads with `ctr -n k8s.io images import OUT.tar` or `kind load image-archive OUT.tar`.
# The root filesystem is assembled from this machine (Debian 12): the node binary and the
# shared libraries it links, the compiled daemon (dist/plugin, dist/runtime-hooks), proto/,
# production node_modules, kni-cni, iptables (both backends) with its extensions and libraries, nft
# (masquerade and host-port rules), and Debian's CNI reference plugins (/usr/lib/cni). Containerfile builds the
# equivalent image where a container engine exists; test/image.test.ts checks this one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/dist/kni-image.tar}
name=${2:-kni:dev}
# Stored under the name CRI looks up (as `kind load` does): a name with no registry part is
# docker.io's, and one with no "/" at all is in docker.io/library.
first=${name%%/*}
if [ "$first" = "$name" ]; then
  name=docker.io/library/$name
elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
  name=docker.io/$name
fi
# shellcheck source=lib/oci-image.sh
. "$repo/hack/lib/oci-image.sh"
[ -x "$repo/dist/bin/kni-cni" ] && [ -f "$repo/dist/plugin/main.js" ] && [ -f "$repo/dist/build-info.json" ] || { echo "build-image: run hack/setup.sh first (no dist/)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root/app/dist" "$root/usr/local/bin" "$root/usr/sbin" "$root/tmp" "$root/etc" "$root/run" "$root/var/lib"
chmod 1777 "$root/tmp"

# A file and every shared library it needs, at the same paths.
with_libs() {
  local f
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    ldd "$f" 2> /dev/null | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | while read -r lib; do
      [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
    done
  done
}

with_libs "$(command -v node)"
mv "$root$(command -v node)" "$root/usr/local/bin/node" 2> /dev/null || true
# Both iptables backends: kni writes its rules with the one the node's kubelet uses
# (plugin/node/iptables.ts), as kube-proxy's image does.
with_libs /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/lib/x86_64-linux-gnu/xtables/*.so
# nft and its library: kni writes its nftables tables through libnftables.so.1 (in-process,
# plugin/sys/libnftables.ts); nft lists them, and kube-proxy's map for knictl trace.
with_libs /usr/sbin/nft
# nsenter: the example extension (hack/examples/mesh-redirect.ts) enters pod netns with it.
with_libs /usr/bin/nsenter
# CNI plugins installed on the host run chrooted in its root (defaultNetwork.chrootDir).
with_libs /usr/sbin/chroot
for t in iptables ip6tables iptables-nft ip6tables-nft iptables-save ip6tables-save iptables-restore ip6tables-restore iptables-nft-save ip6tables-nft-save iptables-nft-restore ip6tables-nft-restore; do ln -sf xtables-nft-multi "$root/usr/sbin/$t"; done
for t in iptables-legacy ip6tables-legacy iptables-legacy-save ip6tables-legacy-save iptables-legacy-restore ip6tables-legacy-restore; do ln -sf xtables-legacy-multi "$root/usr/sbin/$t"; done
cp /etc/protocols /etc/services "$root/etc/" 2> /dev/null || true
# Debian's CNI reference plugins (static Go binaries), for defaultNetwork.cni conflists.
mkdir -p "$root/usr/lib/cni" && cp -L /usr/lib/cni/* "$root/usr/lib/cni/"

cp -r "$repo/dist/plugin" "$repo/dist/runtime-hooks" "$root/app/dist/"
cp "$repo/dist/build-info.json" "$root/app/dist/"
# The example extension (kind-config/mesh-redirect-daemonset.yaml runs it from this image).
mkdir -p "$root/app/dist/hack" && cp -r "$repo/dist/hack/examples" "$root/app/dist/hack/"
mkdir -p "$root/app/dist/bin" && cp "$repo/dist/bin/kni-cni" "$root/app/dist/bin/"
cp -r "$repo/proto" "$root/app/"
cp "$repo/package.json" "$repo/package-lock.json" "$root/app/"
(cd "$root/app" && npm ci --omit=dev --no-audit --no-fund --loglevel=error > /dev/null)
rm -f "$root/app/package-lock.json"
# The commands by name (kubectl -n kube-system exec ds/kni -- knictl node): node scripts, as the
# image has no shell.
for c in knictl:knictl kni-runtime:main; do
  printf '#!/usr/local/bin/node\nrequire("/app/dist/plugin/%s.js");\n' "${c#*:}" > "$root/usr/local/bin/${c%%:*}"
  chmod 755 "$root/usr/local/bin/${c%%:*}"
done

oci_image "$root" "$out" "$name" '{"Entrypoint":["/usr/local/bin/node","--max-semi-space-size=4","--heap-growing-percent=30","/app/dist/plugin/main.js"],"Env":["PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","MALLOC_ARENA_MAX=2"],"WorkingDir":"/app"}'
echo "$out"
