#!/usr/bin/env bash
# Builds the test cluster's components from their published Go modules at the versions in
# versions.env, into $KNI_CLUSTER_CACHE (default /var/cache/kni-cluster), outside the work
# tree: a second run finds them and returns at once. Needs Go and the Go module proxy only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${KNI_CLUSTER_CACHE:-/var/cache/kni-cluster}
export GOPATH=${GOPATH:-$cache/gopath} GOFLAGS=-mod=mod CGO_ENABLED=${CGO_ENABLED:-0}
bin=$cache/bin
mkdir -p "$bin" "$cache/src"

k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

build_kubernetes() {
  local v=$KUBERNETES_VERSION staging=v0.${KUBERNETES_VERSION#v1.}
  local done=$bin/.kubernetes-$v
  [ -f "$done" ] && return 0
  local mod=$cache/src/kubernetes-$v
  rm -rf "$mod" && mkdir -p "$mod"
  # k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with
  # local paths): build its commands as dependencies of a throwaway module that pins every
  # staging module to the matching published v0.x version.
  local gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module kni.local/cluster-components"
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")"
    echo "require k8s.io/kubernetes $v"
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 '"$staging"'#p' "$gomod"
  } > "$mod/go.mod"
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kubelet/app"\n\nfunc main() {}\n' > "$mod/tools.go"
  (cd "$mod" && go mod tidy >/dev/null && for c in "${k8s_cmds[@]}"; do
    echo "build-components: building $c $v" >&2
    go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$v" -o "$bin/$c" "k8s.io/kubernetes/cmd/$c"
  done)
  touch "$done"
}

build_containerd() {
  local v=$CONTAINERD_VERSION done=$bin/.containerd-$CONTAINERD_VERSION
  [ -f "$done" ] && return 0
  echo "build-components: building containerd $v" >&2
  # no_btrfs: the btrfs snapshotter needs libbtrfs headers, and the cluster uses overlayfs.
  GOBIN=$bin CGO_ENABLED=1 go install -tags no_btrfs "github.com/containerd/containerd/v2/cmd/containerd@$v" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$v" "github.com/containerd/containerd/v2/cmd/ctr@$v"
  touch "$done"
}

build_crictl() {
  local v=$CRI_TOOLS_VERSION done=$bin/.crictl-$CRI_TOOLS_VERSION
  [ -f "$done" ] && return 0
  echo "build-components: building crictl $v" >&2
  GOBIN=$bin go install "sigs.k8s.io/cri-tools/cmd/crictl@$v"
  touch "$done"
}

what=${1:-all}
case "$what" in
  kubernetes) build_kubernetes ;;
  containerd) build_containerd ;;
  crictl) build_crictl ;;
  all) build_containerd; build_crictl; build_kubernetes ;;
  *) echo "usage: $0 [all|kubernetes|containerd|crictl]" >&2; exit 2 ;;
esac
echo "$bin"
