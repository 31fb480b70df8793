#!/usr/bin/env bash
# The test command: set up, build, run every test (as root, on the real kernel), the cluster
# tests included: their components (Kubernetes, containerd 2.x, etcd) are built from their Go
# modules the first time (~13 min on 2 cores) and cached in /var/cache/kni-cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
bash hack/cluster/build-components.sh all
# The VM tests' guest (QEMU, a Debian kernel, a busybox initramfs), cached in /var/cache/kni-vm.
bash hack/vm/build-guest.sh >/dev/null
npx mocha "$@"
