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
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  ip netns del "$run-node" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

ip netns add "$run-node"
ip -n "$run-node" link set lo up
echo "== kni-runtime (embedded default: bridge kni0, 10.244.0.0/24 + fd00:10:244::/64) in netns $run-node"
nsenter --net="/run/netns/$run-node" node dist/plugin/main.js --socket "$dir/kni.sock" --state-dir "$dir/state" >"$dir/daemon.log" 2>&1 &
daemon=$!
node dist/hack/demo.js "$dir/kni.sock"
echo "== daemon log (structured JSON, what kubectl logs shows)"
cat "$dir/daemon.log"
