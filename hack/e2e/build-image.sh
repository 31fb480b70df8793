#!/usr/bin/env bash
# Builds the e2e image without a registry: a static pause binary (the sandbox entrypoint) and
# busybox (for test containers) in one layer, as an OCI image layout tarball.
#   build-image.sh OUT.tar IMAGE-NAME
set -euo pipefail
out=$1
name=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/oci-image.sh
. "$here/../lib/oci-image.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$work/rootfs/www"
gcc -O2 -static -o "$work/rootfs/pause" "$here/pause.c"
cp /bin/busybox "$work/rootfs/bin/busybox"
ln -s busybox "$work/rootfs/bin/sh"
echo "hello from kni e2e" > "$work/rootfs/www/index.html"
oci_image "$work/rootfs" "$out" "$name" '{"Entrypoint":["/pause"],"Env":["PATH=/bin"]}'
