#!/usr/bin/env bash
# Builds a stand-in for Kubernetes' agnhost test image without an engine or a registry: the
# agnhost binary built from k8s.io/kubernetes (build-components.sh k8s-e2e) on busybox, with the
# tools the network specs run in it that busybox lacks or words differently, each with the
# libraries it links: curl, OpenBSD's nc (UDP), GNU wget (Debian's static busybox wget crashes
# given -T), dig and glibc's getent (the DNS specs) and ss. Upstream's is Alpine with the same
# tools, porter's TLS certificate and key, and CoreDNS as /coredns (the DNS specs start their own
# servers with it); those are read from beside the binary, where build-components.sh k8s-e2e puts
# them. network-policy-api's conformance tests run their servers with /bin/bash -c, which
# upstream's image has too. The DNS specs' other querier image (jessie-dnsutils: Debian with dig) is the same root
# filesystem under its own name: give more OUT.tar NAME pairs.
#   agnhost-image.sh AGNHOST-BINARY OUT.tar IMAGE-NAME [OUT.tar IMAGE-NAME]...
set -euo pipefail
agnhost=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/oci-image.sh
. "$here/../lib/oci-image.sh"
tools=(/bin/dash /bin/bash /usr/bin/curl /bin/nc.openbsd /usr/bin/wget /usr/bin/dig /usr/bin/getent /bin/ss)
for tool in "${tools[@]}"; do
  [ -x "$tool" ] || { echo "agnhost-image.sh: $tool is missing (hack/setup.sh installs curl, wget, netcat-openbsd and bind9-dnsutils)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
r=$work/rootfs
mkdir -p "$r/bin" "$r/usr/bin" "$r/tmp" "$r/etc" "$r/uploads"
cp "$agnhost" "$r/agnhost"
ln -s agnhost "$r/agnhost-2"
cp /bin/busybox "$r/bin/busybox"
for a in $(busybox --list); do [ "$a" = busybox ] || [ "$a" = sh ] || ln -s busybox "$r/bin/$a"; done
# Debian's busybox shell runs its own applets before the PATH (its nc has no -u): the shell is dash.
cp /bin/dash "$r/bin/sh"
cp /bin/bash "$r/bin/bash"
cp /usr/bin/curl "$r/usr/bin/curl"
cp /bin/nc.openbsd "$r/usr/bin/nc"
cp /usr/bin/wget /usr/bin/dig /usr/bin/getent /bin/ss "$r/usr/bin/"
cp "$agnhost.localhost.crt" "$r/localhost.crt"
cp "$agnhost.localhost.key" "$r/localhost.key"
cp "$(dirname "$agnhost")/coredns" "$r/coredns"
# glibc's own files and dns modules, in that order, as a Debian image has them.
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$r/etc/nsswitch.conf"
for lib in $(ldd "${tools[@]}" | awk '/=> \// {print $3} /^\t\/lib64/ {print $1}' | sort -u); do
  mkdir -p "$r$(dirname "$lib")"
  cp -L "$lib" "$r$lib"
done
# The user and group the image's specs look for, as upstream's Dockerfile adds them.
printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/:/bin/sh\n' > "$r/etc/passwd"
printf 'root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' > "$r/etc/group"
# /usr/bin first: curl, wget and OpenBSD's nc over busybox's applets of those names.
while [ $# -ge 2 ]; do
  oci_image "$r" "$1" "$2" '{"Entrypoint":["/agnhost"],"Cmd":["pause"],"Env":["PATH=/usr/bin:/bin:/"]}'
  shift 2
done
