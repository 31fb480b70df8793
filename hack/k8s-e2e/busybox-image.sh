#!/usr/bin/env bash
# A stand-in for Kubernetes' e2e busybox test image: Debian's static busybox with a link for
# each applet, `sh` its command, as upstream's image is.
#   busybox-image.sh OUT.tar IMAGE-NAME
set -euo pipefail
out=$1 name=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/oci-image.sh
. "$here/../lib/oci-image.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
r=$work/rootfs
mkdir -p "$r/bin" "$r/tmp" "$r/etc"
cp /bin/busybox "$r/bin/busybox"
for a in $(busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$r/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' > "$r/etc/group"
oci_image "$r" "$out" "$name" '{"Cmd":["sh"],"Env":["PATH=/bin"]}'
