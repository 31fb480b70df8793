#!/usr/bin/env bash
# Packs one static binary built from its module as an image whose entrypoint it is, as upstream's
# images of CoreDNS (cluster.sh dns) and of Kubernetes' regression-issue-74839 test (cluster.sh
# e2e-images) are: the binary alone.
#   binary-image.sh BINARY OUT.tar IMAGE-NAME
set -euo pipefail
binary=$1 out=$2 name=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/oci-image.sh
. "$here/../lib/oci-image.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs/etc" "$work/rootfs/tmp"
cp "$binary" "$work/rootfs/$(basename "$binary")"
oci_image "$work/rootfs" "$out" "$name" "{\"Entrypoint\":[\"/$(basename "$binary")\"]}"
