#!/usr/bin/env bash
# The guest the VM tests boot behind kni: QEMU (Debian's qemu-system-x86), Debian's stock
# kernel with its virtio-net modules, and a small initramfs of busybox-static and iproute2's
# ip whose /init leaves a shell on the serial console. Cached outside the work tree; prints
# the directory holding vmlinuz and initramfs.gz. Quick when already built.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "hack/vm/build-guest.sh: must run as root: it installs Debian packages" >&2
  exit 1
fi

need=()
for pkg in qemu-system-x86 busybox-static iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "hack/vm/build-guest.sh: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The kernel package linux-image-amd64 points at today, by its exact name and version.
kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
kver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')
[ -n "$kpkg" ] && [ -n "$kver" ] || { echo "hack/vm/build-guest.sh: apt knows no linux-image-amd64 kernel (run apt-get update)" >&2; exit 1; }
out="/var/cache/kni-vm/${kpkg}_${kver}"
script_sum=$(sha256sum "$0" | cut -c1-12)
if [ -f "$out/initramfs.gz" ] && [ "$(cat "$out/built-by" 2>/dev/null)" = "$script_sum" ]; then
  echo "$out"
  exit 0
fi

work=$(mktemp -d /var/cache/kni-vm-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg=$kver" >/dev/null)
dpkg-deb -x "$work"/linux-image-*.deb "$work/pkg"
release=${kpkg#linux-image-}
mods="$work/pkg/lib/modules/$release"

root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,usr/local/bin,lib/modules,lib64,lib/x86_64-linux-gnu}
cp /bin/busybox "$root/bin/busybox"
# iproute2's ip with the libraries it links (busybox's ip lacks parts of IPv6 and neighbour
# flags). Debian's busybox shell runs its own applets before the PATH: an alias picks this one.
cp "$(command -v ip)" "$root/usr/local/bin/ip"
mkdir -p "$root/etc"
echo 'alias ip=/usr/local/bin/ip' > "$root/etc/shrc"
for lib in $(ldd "$(command -v ip)" | awk '/=> \// {print $3} /^\t\/lib64/ {print $1}'); do
  cp -L "$lib" "$root$lib"
done

# virtio-net and what it needs, in load order: each module's .modinfo names its dependencies
# ("depends="); the package ships no modules.dep (depmod makes it at install).
: > "$root/lib/modules/order"
add_module() {
  local name=$1 file dep
  grep -qxF "$name.ko" "$root/lib/modules/order" && return
  file=$(find "$mods/kernel" -name "$name.ko*" | head -1)
  [ -n "$file" ] || { echo "hack/vm/build-guest.sh: module $name is not in $kpkg" >&2; exit 1; }
  case "$file" in
    *.xz) xz -dc "$file" > "$work/$name.ko" ;;
    *.zst) zstd -qdc "$file" > "$work/$name.ko" ;;
    *) cp "$file" "$work/$name.ko" ;;
  esac
  for dep in $(grep -a -o 'depends=[a-z0-9_,-]*' "$work/$name.ko" | head -1 | cut -d= -f2 | tr , ' '); do add_module "$dep"; done
  mv "$work/$name.ko" "$root/lib/modules/$name.ko"
  echo "$name.ko" >> "$root/lib/modules/order"
}
add_module virtio_pci
add_module virtio_net

cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export ENV=/etc/shrc
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do insmod "/lib/modules/$m"; done
ip link set lo up
# The test drives this shell over the serial console (the kernel's console: stdin and stdout
# here): no prompt and no echo, so that what comes back is the commands' output alone.
export PS1=
stty -echo
echo kni-guest-ready
while true; do sh; done
INIT
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initramfs.gz"

mkdir -p "$out"
cp "$work"/pkg/boot/vmlinuz-* "$out/vmlinuz"
mv "$work/initramfs.gz" "$out/initramfs.gz"
echo "$script_sum" > "$out/built-by"
echo "$out"
