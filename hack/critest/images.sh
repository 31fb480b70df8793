#!/usr/bin/env bash
# Builds stand-ins for the images critest (cri-tools v1.37.0) names, without a container engine
# or the internet: busybox (Debian's static build) in one layer, with the entrypoint, user and
# files each spec expects, as OCI image layouts under OUT/NAME (one directory per reference),
# for crane to push into a registry on the node (docs/testing.md, "critest").
#   images.sh OUT
# What a stand-in cannot be (an image pinned by a digest of upstream's build, nginx's own
# behaviour beyond serving a page) is listed in docs/testing.md.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/oci-image.sh
. "$here/../lib/oci-image.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Bump when a stand-in changes: the images built by an older recipe are built again.
RECIPE=6
[ "$(cat "$out/RECIPE" 2>/dev/null)" = "$RECIPE" ] || rm -rf "$out"
mkdir -p "$out"
echo "$RECIPE" > "$out/RECIPE"

# Debian's dynamic busybox, with its libraries: its sh runs a command by looking it up in PATH,
# as upstream's busybox image does. busybox-static's sh runs its applets without looking, so a
# masked /bin/ls (critest's MaskedPaths spec) would still run.
(cd "$work" && apt-get -o APT::Sandbox::User=root download -q busybox >/dev/null) || { echo "images.sh: apt-get download busybox failed (the stand-ins need Debian's dynamic busybox)" >&2; exit 1; }
dpkg-deb -x "$work"/busybox_*.deb "$work/busybox"
busybox=$work/busybox/bin/busybox

# rootfs NAME: a busybox root with /etc/passwd and /etc/group (www-data as Debian numbers it).
# Every applet is a hard link, as in upstream's image: a mount over one name (MaskedPaths) masks
# that name only.
rootfs() {
  local r=$work/$1 lib
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/www" "$r/var/run"
  cp "$busybox" "$r/bin/busybox"
  for lib in $(ldd "$busybox" | grep -o '/[^ ]*'); do mkdir -p "$r$(dirname "$lib")" && cp -L "$lib" "$r$lib"; done
  for a in $("$busybox" --list); do [ "$a" = busybox ] || ln -f "$r/bin/busybox" "$r/bin/$a"; done
  # Debian's busybox has no pgrep: the pids of the processes of that name, as procps's prints them.
  printf '#!/bin/sh\nfound=1\nfor d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}" && found=0; done\nexit $found\n' > "$r/bin/pgrep"
  chmod +x "$r/bin/pgrep"
  printf 'root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' > "$r/etc/passwd"
  printf 'root:x:0:\nwww-data:x:33:\nnobody:x:65534:\n' > "$r/etc/group"
  echo "critest stand-in $1" > "$r/www/index.html"
  echo "$r"
}

# image REF ROOTFS CONFIG_JSON: an OCI layout directory named after REF.
image() {
  local ref=$1 dir=$out/${1//[\/:@]/_}
  [ -d "$dir" ] && return 0
  oci_image "$2" "$work/image.tar" "$ref" "$3"
  mkdir -p "$dir" && tar -C "$dir" -xf "$work/image.tar" && rm "$work/image.tar"
  echo "$ref" > "$dir/REF"
}

e2e=registry.k8s.io/e2e-test-images
cri=gcr.io/k8s-staging-cri-tools
base=$(rootfs base)
# busybox: the default container image; containers run the commands specs give.
image "$e2e/busybox:1.29-2" "$base" '{"Cmd":["sh"],"Env":["PATH=/bin"]}'
# The web servers: a page on port 80 (nginx, httpd) or on 12003 on the host's network.
# nginx is a script named nginx (so pidof finds it, as the HostPID spec asks from another
# container) that writes its pid file, says "master process" in its command line as nginx's
# title does (the PID namespace specs read /proc/1/cmdline), serves with busybox's httpd and
# stops on SIGTERM; httpd says its name in its log (the container log spec looks for it).
nginx=$(rootfs nginx)
mkdir -p "$nginx/usr/sbin"
printf '#!/bin/sh\necho $$ > /var/run/nginx.pid\nhttpd -f -p 80 -h /www &\ntrap "kill $!; exit 0" TERM\nwait\n' > "$nginx/usr/sbin/nginx"
chmod +x "$nginx/usr/sbin/nginx"
image "$e2e/nginx:1.14-2" "$nginx" '{"Entrypoint":["/usr/sbin/nginx","master process","-g","daemon off;"],"Env":["PATH=/bin:/usr/sbin"],"ExposedPorts":{"80/tcp":{}}}'
image "$e2e/httpd:2.4.39-4" "$base" '{"Entrypoint":["sh","-c","echo httpd serving on port 80; exec httpd -f -p 80 -h /www"],"Env":["PATH=/bin"],"ExposedPorts":{"80/tcp":{}}}'
image "$cri/hostnet-nginx-amd64" "$base" '{"Entrypoint":["httpd","-f","-p","12003","-h","/www"],"Env":["PATH=/bin"]}'
# The image specs: references of every kind, users by id and by name, tags of one image.
# Each a different image (a label of its own: the same config would be the same image, and the
# pull specs want a reference's tag alone on it), but the three tags of test-image-tags one image.
for ref in test-image-latest test-image-tag:test test-image-tag:all test-image-tags:1 test-image-tags:2 test-image-tags:3; do
  image "$cri/$ref" "$base" "{\"Cmd\":[\"sh\"],\"Env\":[\"PATH=/bin\"],\"Labels\":{\"stand-in\":\"${ref%%:[0-9]}\"}}"
done
for n in 1 2 3; do
  # Three different images: each its own layer.
  r=$(rootfs "different-$n")
  image "$cri/test-image-$n:latest" "$r" '{"Cmd":["sh"],"Env":["PATH=/bin"]}'
done
image "$cri/test-image-user-uid" "$base" '{"User":"1002","Cmd":["sh"],"Env":["PATH=/bin"]}'
image "$cri/test-image-user-username" "$base" '{"User":"www-data","Cmd":["sh"],"Env":["PATH=/bin"]}'
image "$cri/test-image-user-uid-group" "$base" '{"User":"1003:users","Cmd":["sh"],"Env":["PATH=/bin"]}'
image "$cri/test-image-user-username-group" "$base" '{"User":"www-data:www-data","Cmd":["sh"],"Env":["PATH=/bin"]}'
pre=$(rootfs predefined)
# default-user (1000, its own group 1000) is also in group-defined-in-image (50000) by /etc/group.
printf 'root:x:0:0:root:/root:/bin/sh\ndefault-user:x:1000:1000::/:/bin/sh\n' > "$pre/etc/passwd"
printf 'root:x:0:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n' > "$pre/etc/group"
image "$cri/test-image-predefined-group" "$pre" '{"User":"1000","Cmd":["sh"],"Env":["PATH=/bin"]}'
# One pause image under two registries: the same image ID.
image "registry.k8s.io/pause:3.9" "$base" '{"Entrypoint":["sleep","infinity"],"Env":["PATH=/bin"]}'
image "k8s.gcr.io/pause:3.9" "$base" '{"Entrypoint":["sleep","infinity"],"Env":["PATH=/bin"]}'
echo "$out"
