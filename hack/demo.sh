#!/usr/bin/env bash
# The demo: kni-runtime on its embedded default config, inside a throwaway network namespace
# standing in for the node; two pods wired through the KNI API ping each other; then teardown.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh

run="kni-demo-$$"
dir="/tmp/$run"
mkdir -p "$dir"
daemon=""
# `ip netns add` makes /run/netns a mount of itself and leaves it; the demo takes it down again
# if it made it and nothing else is pinned there (as the bench and the tests do).
run_netns_was_mounted=0
if mountpoint -q /run/netns 2>/dev/null; then run_netns_was_mounted=1; fi
# The embedded default serves CNI on /run/kni/cni.sock; the daemon removes the socket, the demo
# the directory if it was not there before.
run_kni_existed=0
if [ -e /run/kni ]; then run_kni_existed=1; fi
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  # A daemon stopped gracefully leaves kni-cni a restart marker beside its CNI socket, for the
  # kni that follows; none follows the demo's.
  if [ -n "$daemon" ] && grep -qs "\"pid\":$daemon," /run/kni/cni.sock.restarting; then rm -f /run/kni/cni.sock.restarting; fi
  ip netns del "$run-node" 2>/dev/null || true
  rm -rf "$dir"
  if [ "$run_netns_was_mounted" = 0 ] && mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns 2>/dev/null || true
  fi
  if [ "$run_kni_existed" = 0 ]; then rmdir /run/kni 2>/dev/null || true; fi
}
trap cleanup EXIT

ip netns add "$run-node"
ip -n "$run-node" link set lo up
echo "== kni-runtime (embedded default: bridge kni0, 10.244.0.0/24 + fd00:10:244::/64) in netns $run-node"
nsenter --net="/run/netns/$run-node" env MALLOC_ARENA_MAX=2 node --max-semi-space-size=4 --heap-growing-percent=30 dist/plugin/main.js --socket "$dir/kni.sock" --state-dir "$dir/state" >"$dir/daemon.log" 2>&1 &
daemon=$!
node dist/hack/demo.js "$dir/kni.sock"
echo "== daemon log (structured JSON, what kubectl logs shows)"
cat "$dir/daemon.log"
