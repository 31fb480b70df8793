#!/usr/bin/env bash
# Installs what kni needs on a fresh machine of this kind (Debian 12, root): Debian packages,
# npm dependencies, then builds. Quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "hack/setup.sh: must run as root: it installs Debian packages, and kni creates network namespaces" >&2
  exit 1
fi

need=()
# containerd, runc, CNI plugins (loopback) and busybox: the end-to-end tests run real pods;
# valgrind: npm run bench:instructions; ethtool: the vxlan test reads what kni set on the device;
# nftables: kube-proxy's nftables mode in the test cluster, and knictl trace reading its map
# netcat-openbsd, wget, bind9-dnsutils: the Kubernetes e2e specs' agnhost stand-in (UDP from a
# node to a pod; a wget with a working -T; dig for the DNS specs)
for pkg in iproute2 iptables nftables iputils-ping util-linux gcc libc6-dev containerd runc containernetworking-plugins busybox-static procps curl valgrind ethtool netcat-openbsd wget bind9-dnsutils; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "hack/setup.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npm run build --silent
# The commit kni is built from (kni-runtime --version, knictl version, kni_build_info).
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null && commit="$commit-dirty"
info="{\"commit\": \"$commit\"}"
[ "$(cat dist/build-info.json 2>/dev/null)" = "$info" ] || echo "$info" > dist/build-info.json
# kni-cni: a static C binary (a runtime execs it per call; Node start-up would cost tens of ms)
mkdir -p dist/bin
if [ ! -x dist/bin/kni-cni ] || [ runtime-hooks/cni-shim/kni-cni.c -nt dist/bin/kni-cni ]; then
  gcc -O2 -Wall -Wextra -Werror -static -o dist/bin/kni-cni runtime-hooks/cni-shim/kni-cni.c
fi
# The kernel floor of an attach and a detach, which npm run bench compares kni with.
if [ ! -x dist/bin/kernel-floor ] || [ bench/kernel-floor.c -nt dist/bin/kernel-floor ]; then
  gcc -O2 -Wall -Wextra -Werror -static -o dist/bin/kernel-floor bench/kernel-floor.c
fi
# The no-op CNI plugin: the floor npm run bench:containerd sets kni beside.
if [ ! -x dist/bin/noop-cni ] || [ bench/noop-cni.c -nt dist/bin/noop-cni ]; then
  gcc -O2 -Wall -Wextra -Werror -static -o dist/bin/noop-cni bench/noop-cni.c
fi
# madge, for the import-cycle test: in its own prefix outside the work tree, beside the
# TypeScript 5 its parser loads (the project builds with TypeScript 7, which has no JS API).
MADGE_DIR=/var/cache/kni-tools/madge-8.0.0
if [ ! -f "$MADGE_DIR/node_modules/madge/package.json" ]; then
  mkdir -p "$MADGE_DIR"
  echo '{"private": true}' > "$MADGE_DIR/package.json"
  npm install --prefix "$MADGE_DIR" --no-audit --no-fund --loglevel=error madge@8.0.0 typescript@5.9.3
fi
