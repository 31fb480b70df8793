# Packs a root filesystem as a single-layer OCI image layout tarball with no container engine
# and no registry: `ctr images import` and `kind load image-archive` take it as is. The index
# names the image through the io.containerd.image.name annotation.
#   oci_image ROOTFS OUT.tar NAME CONFIG_JSON      (CONFIG_JSON: the image config's "config")
oci_image() {
  local rootfs=$1 out=$2 name=$3 config=$4 work
  work=$(mktemp -d)
  mkdir -p "$work/blobs/sha256"
  tar --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  _blob() { # file -> prints "digest size", stores the blob
    local d s
    d=$(sha256sum "$1" | cut -d' ' -f1)
    s=$(stat -c %s "$1")
    mv "$1" "$work/blobs/sha256/$d"
    echo "$d $s"
  }
  local ld ls cd cs md ms
  read -r ld ls < <(_blob "$work/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$config" "$ld" > "$work/config.json"
  read -r cd cs < <(_blob "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" > "$work/manifest.json"
  read -r md ms < <(_blob "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' "$md" "$ms" "$name" "${name##*:}" > "$work/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci-layout"
  tar -C "$work" -cf "$out" oci-layout index.json blobs
  rm -rf "$work"
}
