#!/usr/bin/env bash
# Builds the test cluster's components from their published Go modules at the versions in
# versions.env, into $KNI_CLUSTER_CACHE (default /var/cache/kni-cluster), outside the work
# tree: a second run finds them and returns at once. Needs Go and the Go module proxy only.
#
# Neither k8s.io/kubernetes (replace directives) nor containerd/v2 (exclude directives) can be
# `go install`ed: each is built as a dependency of a throwaway module instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${KNI_CLUSTER_CACHE:-/var/cache/kni-cluster}
export GOPATH=${GOPATH:-$cache/gopath} GOFLAGS=-mod=mod
bin=$cache/bin
mkdir -p "$bin" "$cache/src"
# Bump when the way a component is built changes: cached binaries of an older recipe are rebuilt.
RECIPE=2

# build_in_module NAME MODULE VERSION EXTRA_GO_MOD_LINES TAGS CGO LDFLAGS PACKAGE[:BINARY]...
build_in_module() {
  local name=$1 module=$2 version=$3 extra=$4 tags=$5 cgo=$6 ldflags=$7
  shift 7
  local done=$bin/.$name-$version-r$RECIPE dir=$cache/src/$name-$version
  [ -f "$done" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  printf 'module kni.local/%s\n\ngo %s\n\nrequire %s %s\n%s\n' "$name" "$(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')" "$module" "$version" "$extra" > "$dir/go.mod"
  for arg in "$@"; do
    local pkg=${arg%%:*} out=${arg##*:}
    [ "$out" = "$arg" ] && out=${pkg##*/}
    echo "build-components: $name $version: $out" >&2
    (cd "$dir" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$bin/$out" "$pkg")
  done
  touch "$done"
}

# kubernetes_module FIELD: a field of `go mod download -json` for k8s.io/kubernetes at the
# cluster's version (GoMod: its go.mod; Dir: its source).
kubernetes_module() {
  (cd "$cache/src" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION") | sed -n "s/.*\"$1\": \"\(.*\)\".*/\1/p"
}

build_kubernetes() {
  local v=$KUBERNETES_VERSION staging=v0.${KUBERNETES_VERSION#v1.} gomod
  # Every staging module (k8s.io/api, client-go, …) at the published v0.x of this release,
  # as k8s.io/kubernetes's own go.mod lists them.
  gomod=$(kubernetes_module GoMod)
  local replaces
  replaces=$(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 '"$staging"'#p' "$gomod")
  # The version the binaries report (node status, kubectl version), as Kubernetes' own build sets it.
  local minor=${v#v1.}
  minor=${minor%%.*}
  local vflags="-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  vflags="$vflags -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  build_in_module kubernetes k8s.io/kubernetes "$v" "$replaces" "" 0 "$vflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
}

build_containerd() {
  # no_btrfs: the btrfs snapshotter needs libbtrfs headers; the cluster uses overlayfs.
  build_in_module containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" "" no_btrfs 1 "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
}

# The Kubernetes e2e suite (e2e.test, its Ginkgo specs) and the binaries of its agnhost and
# regression-issue-74839 test images,
# from the same module as the cluster (the network conformance specs: test/cluster/k8s-e2e.cluster.ts).
build_k8s_e2e() {
  build_kubernetes
  # The ginkgo CLI at the version e2e.test links (k8s.io/kubernetes's go.mod), which runs the
  # specs in parallel processes.
  local ginkgo
  ginkgo=$(sed -n 's#^\s*github.com/onsi/ginkgo/v2 \(v[0-9.]*\)$#\1#p' "$(kubernetes_module GoMod)")
  build_in_module ginkgo github.com/onsi/ginkgo/v2 "$ginkgo" "" "" 0 "" github.com/onsi/ginkgo/v2/ginkgo
  local done=$bin/.k8s-e2e-$KUBERNETES_VERSION-r$RECIPE dir=$cache/src/kubernetes-$KUBERNETES_VERSION src
  # The certificate and key agnhost's porter serves TLS with, which its image carries beside it.
  src=$(kubernetes_module Dir)
  cp "$src/test/images/agnhost/porter/localhost.crt" "$bin/agnhost.localhost.crt"
  cp "$src/test/images/agnhost/porter/localhost.key" "$bin/agnhost.localhost.key"
  [ -f "$done" ] && [ -x "$bin/regression-issue-74839" ] && return 0
  echo "build-components: kubernetes $KUBERNETES_VERSION: e2e.test, agnhost, regression-issue-74839" >&2
  (cd "$dir" && CGO_ENABLED=0 go test -c -trimpath -ldflags "-s -w" -o "$bin/e2e.test" k8s.io/kubernetes/test/e2e)
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/agnhost" k8s.io/kubernetes/test/images/agnhost)
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839)
  touch "$done"
}

# Cluster DNS for the e2e DNS and Services specs: CoreDNS, whose main package is its module's root.
build_coredns() {
  build_in_module coredns github.com/coredns/coredns "$COREDNS_VERSION" "" "" 0 "" github.com/coredns/coredns:coredns
}

build_etcd() {
  build_in_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "" "" 0 "" go.etcd.io/etcd/server/v3:etcd
}

# Not a cluster component: h2spec, the HTTP/2 conformance suite (test/h2spec.test.ts).
build_h2spec() {
  build_in_module h2spec github.com/summerwind/h2spec "$H2SPEC_VERSION" "" "" 0 "" github.com/summerwind/h2spec/cmd/h2spec
}

# Not a cluster component: kwok, which keeps the scale bench's made-up Nodes Ready
# (bench/node-scale.ts); its stages are read from the module it is built from.
build_kwok() {
  build_in_module kwok sigs.k8s.io/kwok "$KWOK_VERSION" "" "" 0 "" sigs.k8s.io/kwok/cmd/kwok
}

# Not cluster components: the CRI's own validation suite and CLI, and an OCI distribution
# registry with its push tool, which serve critest's stand-in images (hack/critest/images.sh)
# on a node. Not part of `all` yet: critest is not in the suite (docs/testing.md).
build_critest() {
  build_in_module cri-tools sigs.k8s.io/cri-tools "$CRI_TOOLS_VERSION" "" "" 0 "" sigs.k8s.io/cri-tools/cmd/crictl
  local done=$bin/.critest-$CRI_TOOLS_VERSION-r$RECIPE dir=$cache/src/cri-tools-$CRI_TOOLS_VERSION
  if [ ! -f "$done" ]; then
    # critest is the test binary of cmd/critest (its Ginkgo specs), as cri-tools' Makefile builds it.
    echo "build-components: cri-tools $CRI_TOOLS_VERSION: critest" >&2
    (cd "$dir" && CGO_ENABLED=0 go test -c -trimpath -ldflags "-s -w" -o "$bin/critest" sigs.k8s.io/cri-tools/cmd/critest)
    touch "$done"
  fi
  build_in_module go-containerregistry github.com/google/go-containerregistry "$GO_CONTAINERREGISTRY_VERSION" "" "" 0 "" \
    github.com/google/go-containerregistry/cmd/registry github.com/google/go-containerregistry/cmd/crane
}

# Not a cluster component: the bench's Go client of kni (bench/grpc-go-client, our own code with
# its own go.mod), built here for the module cache outside the work tree.
build_bench_client() {
  local src
  src=$(cd "$here/../../bench/grpc-go-client" && pwd)
  local done=$bin/.grpc-go-client-$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
  [ -f "$done" ] && return 0
  echo "build-components: grpc-go-client" >&2
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$bin/grpc-go-client" .)
  rm -f "$bin"/.grpc-go-client-*
  touch "$done"
}

# Not a cluster component: kube-network-policies, the policy agent that runs beside a CNI
# (kindnet's), run with kni's policy off for the policy bench (bench/policy.ts).
build_kube_network_policies() {
  build_in_module kube-network-policies sigs.k8s.io/kube-network-policies "$KUBE_NETWORK_POLICIES_VERSION" "" "" 0 "" sigs.k8s.io/kube-network-policies/cmd:kube-network-policies
}

# network-policy-api's conformance tests of ClusterNetworkPolicy as a test binary, built from the
# module's source at its version; on a kernel without SCTP (this machine's) with the changes
# cnp-conformance-nosctp.py makes and says, to a copy of that source.
build_cnp_conformance() {
  local v=$NETWORK_POLICY_API_VERSION
  local done=$bin/.cnp-conformance-$v-r$RECIPE-$(sha256sum "$here/cnp-conformance-nosctp.py" | cut -c1-12) dir=$cache/src/network-policy-api-$v src
  [ -f "$done" ] && return 0
  echo "build-components: network-policy-api $v: cnp-conformance.test" >&2
  src=$( (cd "$cache/src" && go mod download -json "sigs.k8s.io/network-policy-api@$v") | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
  python3 "$here/cnp-conformance-nosctp.py" "$dir" >&2
  (cd "$dir" && CGO_ENABLED=0 go test -c -trimpath -o "$bin/cnp-conformance.test" ./conformance)
  rm -f "$bin"/.cnp-conformance-*
  touch "$done"
}

case "${1:-all}" in
  kubernetes) build_kubernetes ;;
  containerd) build_containerd ;;
  etcd) build_etcd ;;
  bench-client) build_bench_client ;;
  h2spec) build_h2spec ;;
  kwok) build_kwok ;;
  critest) build_critest ;;
  k8s-e2e) build_k8s_e2e; build_coredns ;;
  coredns) build_coredns ;;
  kube-network-policies) build_kube_network_policies ;;
  cnp-conformance) build_cnp_conformance ;;
  all) build_containerd; build_etcd; build_kubernetes; build_bench_client; build_h2spec; build_critest; build_k8s_e2e; build_coredns; build_cnp_conformance ;;
  *) echo "usage: $0 [all|kubernetes|containerd|etcd|bench-client|h2spec|kwok|critest|k8s-e2e|coredns|kube-network-policies|cnp-conformance]" >&2; exit 2 ;;
esac
echo "$bin"
