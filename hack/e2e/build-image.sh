#!/usr/bin/env bash
# Builds the e2e image without a registry: a static pause binary (the sandbox entrypoint) and
# busybox (for test containers) in one uncompressed layer, as an OCI image layout tarball
# whose index names it through the io.containerd.image.name annotation.
#   build-image.sh OUT.tar IMAGE-NAME
set -euo pipefail
out=$1
name=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$work/rootfs/www" "$work/layout/blobs/sha256"
gcc -O2 -static -o "$work/rootfs/pause" "$here/pause.c"
cp /bin/busybox "$work/rootfs/bin/busybox"
ln -s busybox "$work/rootfs/bin/sh"
echo "hello from kni e2e" > "$work/rootfs/www/index.html"
tar --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" .

blob() { # file media-type -> prints "digest size", stores the blob
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  cp "$1" "$work/layout/blobs/sha256/$d"
  echo "$d $s"
}
read -r ld ls < <(blob "$work/layer.tar")
cat > "$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:$ld"]}}
JSON
read -r cd cs < <(blob "$work/config.json")
cat > "$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$cd","size":$cs},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$ld","size":$ls}]}
JSON
read -r md ms < <(blob "$work/manifest.json")
cat > "$work/layout/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$md","size":$ms,"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
JSON
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
tar -C "$work/layout" -cf "$out" .
