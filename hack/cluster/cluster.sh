#!/usr/bin/env bash
# A Kubernetes cluster on this machine, in network namespaces (the stand-in for kind, which
# needs a Docker engine this machine does not have):
#   cluster.sh up | kni | kni-daemonset | dns | e2e-images | pod-routes | reference-cni | down | status
# (`kni` runs kni from this checkout on every worker; `kni-daemonset` deploys it as users do;
# `dns` adds CoreDNS, as kind has it; `e2e-images` puts the Kubernetes e2e specs' images on the
# workers; `pod-routes` gives the control plane routes to the pods).
#
# - kc-wire: a netns holding the bridge that is the nodes' wire (10.240.0.0/24, fd00:240::/64);
#   the host reaches it through one veth (10.240.0.1) so that KUBECONFIG works from a shell.
# - kc-cp (10.240.0.10): etcd, kube-apiserver, kube-controller-manager (node IPAM on: every
#   Node gets dual-stack spec.podCIDRs), kube-scheduler.
# - kc-w1, kc-w2 (.11, .12): each its own containerd 2.x (root, state, sockets, NRI, CNI
#   dirs), kubelet (root dir, cgroup root, node name and IP) and kube-proxy (iptables mode, or
#   nftables with KNI_CLUSTER_PROXY_MODE=nftables).
# - sec: a second wire (bridge secwire in kc-wire, no addresses) for secondary networks: each
#   worker has sec0 and sec1 (a macvlan master each; this kernel has no ipvlan) and sec2, a
#   port of the worker's bridge secbr (for the bridge plugin), all on that wire.
# Everything lives under $KNI_CLUSTER_DIR (default /var/lib/kni-cluster); `down` removes what
# `up` made (processes, mounts, netns, links, cgroups), also after `up` failed half way.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
CL=${KNI_CLUSTER_DIR:-/var/lib/kni-cluster}
BIN=${KNI_CLUSTER_CACHE:-/var/cache/kni-cluster}/bin
WORKERS=(w1 w2)
CP_IP=10.240.0.10
IMAGE=kni.local/e2e:1
# Each Node's IPv4 pod CIDR size (a small one, e.g. 28, lets a test fill a node's range).
MASK4=${KNI_CLUSTER_NODE_MASK4:-24}
PATH=$BIN:$PATH

# KNI_CLUSTER_ROUTED=1 at `up`: kc-w2 sits on a second subnet (10.240.1.0/24, fd00:240:1::/64)
# that kc-wire routes to, so no node can reach kc-w2 directly (kni's auto backend: vxlan).
routed() { [ -f "$CL/routed" ]; }
# KNI_CLUSTER_PROXY_MODE=nftables at `up`: kube-proxy in its nftables mode (iptables by default).
proxy_mode() { cat "$CL/proxy-mode" 2> /dev/null || echo iptables; }
# KNI_CLUSTER_NODE_IPAM=0 at `up`: no node IPAM (Nodes get no podCIDRs), as a cluster made without it.
node_ipam() { if [ -f "$CL/no-node-ipam" ]; then echo false; else echo true; fi; }
ip4() { case $1 in cp) echo 10.240.0.10 ;; w1) echo 10.240.0.11 ;; w2) if routed; then echo 10.240.1.12; else echo 10.240.0.12; fi ;; host) echo 10.240.0.1 ;; esac; }
ip6() { case $1 in cp) echo fd00:240::10 ;; w1) echo fd00:240::11 ;; w2) if routed; then echo fd00:240:1::12; else echo fd00:240::12; fi ;; host) echo fd00:240::1 ;; esac; }
# The router's address on a node's subnet, and the other subnet (routed clusters only).
gw4() { if [ "$1" = w2 ]; then echo 10.240.1.254; else echo 10.240.0.254; fi; }
gw6() { if [ "$1" = w2 ]; then echo fd00:240:1::254; else echo fd00:240::254; fi; }
far4() { if [ "$1" = w2 ]; then echo 10.240.0.0/24; else echo 10.240.1.0/24; fi; }
far6() { if [ "$1" = w2 ]; then echo fd00:240::/64; else echo fd00:240:1::/64; fi; }
ns() { echo "kc-$1"; }
sock() { echo "$CL/$1/root/run/containerd/containerd.sock"; } # a worker's containerd, seen from the host
log() { printf 'cluster: %s\n' "$*" >&2; }

# --- processes: started in a node netns, detached, pid and log under $CL/run ---
start() { # start NAME NODE CMD...
  local name=$1 node=$2
  shift 2
  mkdir -p "$CL/run"
  local mnt=()
  [ -e "$CL/mnt/$node" ] && mnt=(--mount="$CL/mnt/$node")
  [ -e "$CL/uts/$node" ] && mnt+=(--uts="$CL/uts/$node")
  nsenter --net="/run/netns/$(ns "$node")" "${mnt[@]}" setsid "$@" > "$CL/run/$name.log" 2>&1 < /dev/null &
  echo $! > "$CL/run/$name.pid"
}

# A worker's own mount and UTS namespaces, as a kind node container has: its own /etc/cni/net.d,
# /opt/cni/bin, /run/kni, /run/kni-extensions, /var/lib/kni, /run/nri, /run/containerd, /run/netns and the
# kubelet's device-plugins and pod-resources directories and the device-info files (bind mounts of dirs under $CL/<node>), so kni's DaemonSet finds the standard host paths on every node.
# The host only gets the empty mount point dirs, which `down` removes again.
NODE_PATHS=(/etc/cni/net.d /opt/cni/bin /run/kni /run/kni-extensions /var/lib/kni /run/nri /run/containerd /run/netns
  /var/lib/kubelet/device-plugins /var/lib/kubelet/pod-resources /run/k8s.cni.cncf.io/devinfo)
make_node_namespaces() {
  local w=$1 d=$CL/$1
  mkdir -p "$CL/mnt"
  touch "$CL/mnt/$w"
  unshare --mount="$CL/mnt/$w" --propagation private true
  for p in "${NODE_PATHS[@]}"; do
    local part=""
    for c in ${p//\// }; do # every missing ancestor is recorded, for down to remove
      part="$part/$c"
      [ -d "$part" ] || { mkdir "$part" && echo "$part" >> "$CL/created-dirs"; }
    done
    mkdir -p "$d/root$p"
    nsenter --mount="$CL/mnt/$w" mount --bind "$d/root$p" "$p"
  done
  # Bidirectional mount propagation (kni's /run/netns) needs shared mounts inside the node.
  nsenter --mount="$CL/mnt/$w" mount --make-rshared /
  # And its own hostname (its Node's name), as a kind node container has: hostNetwork pods
  # share it, and the e2e specs expect each to report its node's name.
  mkdir -p "$CL/uts"
  touch "$CL/uts/$w"
  unshare --uts="$CL/uts/$w" hostname "kc-$w"
}
alive() { [ -f "$CL/run/$1.pid" ] && kill -0 "$(cat "$CL/run/$1.pid")" 2>/dev/null; }
wait_for() { # wait_for SECONDS WHAT CMD...
  local t=$1 what=$2
  shift 2
  for _ in $(seq 1 $((t * 5))); do "$@" > /dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out waiting for $what"
  return 1
}

# --- certificates and kubeconfigs (openssl) ---
cert() { # cert NAME SUBJECT [SANS]
  local name=$1 subj=$2 sans=${3:-}
  openssl genrsa -out "$CL/pki/$name.key" 2048 2> /dev/null
  openssl req -new -key "$CL/pki/$name.key" -subj "$subj" -out "$CL/pki/$name.csr" 2> /dev/null
  local ext="$CL/pki/$name.ext"
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"; echo "extendedKeyUsage=serverAuth,clientAuth"; [ -n "$sans" ] && echo "subjectAltName=$sans"; } > "$ext"
  openssl x509 -req -in "$CL/pki/$name.csr" -CA "$CL/pki/ca.crt" -CAkey "$CL/pki/ca.key" -CAcreateserial -days 30 -extfile "$ext" -out "$CL/pki/$name.crt" 2> /dev/null
}
kubeconfig() { # kubeconfig FILE CERTNAME
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kni, cluster: {server: "https://$CP_IP:6443", certificate-authority: "$CL/pki/ca.crt"}}]
users: [{name: u, user: {client-certificate: "$CL/pki/$2.crt", client-key: "$CL/pki/$2.key"}}]
contexts: [{name: kni, context: {cluster: kni, user: u}}]
current-context: kni
EOF
}
make_pki() {
  [ -f "$CL/pki/ca.crt" ] && return 0
  mkdir -p "$CL/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$CL/pki/ca.key" -subj "/CN=kni-cluster-ca" -days 30 -out "$CL/pki/ca.crt" 2> /dev/null
  openssl genrsa -out "$CL/pki/sa.key" 2048 2> /dev/null
  openssl rsa -in "$CL/pki/sa.key" -pubout -out "$CL/pki/sa.pub" 2> /dev/null
  cert apiserver "/CN=kube-apiserver" "IP:$CP_IP,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=kubernetes-admin"
  cert kcm "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  # kni run by hand (cluster.sh kni) gets exactly the DaemonSet's rights: RBAC binds them to the
  # service account's user name, which this certificate carries.
  cert kni "/O=system:serviceaccounts/CN=system:serviceaccount:kube-system:kni"
  for w in "${WORKERS[@]}"; do cert "kubelet-$w" "/O=system:nodes/CN=system:node:kc-$w" "IP:$(ip4 "$w")"; done
  kubeconfig "$CL/admin.kubeconfig" admin
  kubeconfig "$CL/kcm.kubeconfig" kcm
  kubeconfig "$CL/scheduler.kubeconfig" scheduler
  kubeconfig "$CL/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$CL/kni.kubeconfig" kni
  for w in "${WORKERS[@]}"; do kubeconfig "$CL/kubelet-$w.kubeconfig" "kubelet-$w"; done
}

# --- the wire ---
make_network() {
  ip netns add "$(ns wire)"
  ip -n "$(ns wire)" link add wire0 type bridge
  ip -n "$(ns wire)" link set wire0 up
  if routed; then
    ip -n "$(ns wire)" link add wire1 type bridge
    ip -n "$(ns wire)" link set wire1 up
    ip -n "$(ns wire)" addr add 10.240.0.254/24 dev wire0
    ip -n "$(ns wire)" -6 addr add fd00:240::254/64 dev wire0 nodad
    ip -n "$(ns wire)" addr add 10.240.1.254/24 dev wire1
    ip -n "$(ns wire)" -6 addr add fd00:240:1::254/64 dev wire1 nodad
    ip netns exec "$(ns wire)" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  fi
  for n in host cp "${WORKERS[@]}"; do
    local peer="kcw-$n" bridge=wire0
    if [ "$n" = host ]; then
      ip link add kni-cluster type veth peer name "$peer" netns "$(ns wire)"
      ip addr add "$(ip4 host)/24" dev kni-cluster
      ip -6 addr add "$(ip6 host)/64" dev kni-cluster nodad
      ip link set kni-cluster up
      if routed; then
        ip route add 10.240.1.0/24 via 10.240.0.254 dev kni-cluster
        ip -6 route add fd00:240:1::/64 via fd00:240::254 dev kni-cluster
      fi
    else
      ip netns add "$(ns "$n")"
      ip -n "$(ns "$n")" link set lo up
      ip -n "$(ns "$n")" link add eth0 type veth peer name "$peer" netns "$(ns wire)"
      ip -n "$(ns "$n")" addr add "$(ip4 "$n")/24" dev eth0
      ip -n "$(ns "$n")" -6 addr add "$(ip6 "$n")/64" dev eth0 nodad
      ip -n "$(ns "$n")" link set eth0 up
      if routed && [ "$n" = w2 ]; then
        bridge=wire1
        ip -n "$(ns "$n")" route add default via "$(gw4 "$n")"
      else
        ip -n "$(ns "$n")" route add default via "$(ip4 host)"
        if routed; then ip -n "$(ns "$n")" route add "$(far4 "$n")" via "$(gw4 "$n")"; fi
      fi
      if routed; then ip -n "$(ns "$n")" -6 route add "$(far6 "$n")" via "$(gw6 "$n")"; fi
    fi
    ip -n "$(ns wire)" link set "$peer" master "$bridge" up
  done
  ip -n "$(ns wire)" link add secwire type bridge
  ip -n "$(ns wire)" link set secwire up
  for n in "${WORKERS[@]}"; do
    for i in 0 1 2; do
      ip -n "$(ns "$n")" link add "sec$i" type veth peer name "kcs$i-$n" netns "$(ns wire)"
      ip -n "$(ns wire)" link set "kcs$i-$n" master secwire up
      ip -n "$(ns "$n")" link set "sec$i" up
    done
    ip -n "$(ns "$n")" link add secbr type bridge
    ip -n "$(ns "$n")" link set sec2 master secbr
    ip -n "$(ns "$n")" link set secbr up
  done
}

# --- control plane ---
start_apiserver() {
  # For tests that count kni's requests: every request of kni's DaemonSet's ServiceAccount, and
  # reads of single Pods by anyone (only those, so the log stays small).
  printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' 'rules:' \
    '- {level: Metadata, users: ["system:serviceaccount:kube-system:kni"]}' \
    '- {level: Metadata, verbs: [get], resources: [{group: "", resources: [pods]}]}' '- {level: None}' > "$CL/audit-policy.yaml"
  start kube-apiserver cp kube-apiserver --etcd-servers=http://127.0.0.1:2379 --bind-address="$CP_IP" --advertise-address="$CP_IP" --secure-port=6443 \
    --audit-policy-file="$CL/audit-policy.yaml" --audit-log-path="$CL/audit.log" --audit-log-maxsize=20 --audit-log-maxbackup=1 \
    --service-cluster-ip-range=10.96.0.0/16,fd00:96::/112 --tls-cert-file="$CL/pki/apiserver.crt" --tls-private-key-file="$CL/pki/apiserver.key" \
    --client-ca-file="$CL/pki/ca.crt" --service-account-key-file="$CL/pki/sa.pub" --service-account-signing-key-file="$CL/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$CL/pki/apiserver-kubelet-client.crt" --kubelet-client-key="$CL/pki/apiserver-kubelet-client.key" --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP
}
start_control_plane() {
  mkdir -p "$CL/etcd"
  start etcd cp etcd --data-dir "$CL/etcd" --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380
  wait_for 30 etcd nsenter --net=/run/netns/kc-cp curl -sf http://127.0.0.1:2379/health
  start_apiserver
  wait_for 90 kube-apiserver kubectl --kubeconfig "$CL/admin.kubeconfig" get --raw /readyz
  start kube-controller-manager cp kube-controller-manager --kubeconfig="$CL/kcm.kubeconfig" --authentication-kubeconfig="$CL/kcm.kubeconfig" \
    --authorization-kubeconfig="$CL/kcm.kubeconfig" --leader-elect=false --allocate-node-cidrs="$(node_ipam)" \
    --cluster-cidr=10.244.0.0/16,fd00:10:244::/56 --node-cidr-mask-size-ipv4=$MASK4 --node-cidr-mask-size-ipv6=64 \
    --service-cluster-ip-range=10.96.0.0/16,fd00:96::/112 --service-account-private-key-file="$CL/pki/sa.key" --root-ca-file="$CL/pki/ca.crt" \
    --cluster-signing-cert-file="$CL/pki/ca.crt" --cluster-signing-key-file="$CL/pki/ca.key" --use-service-account-credentials=true
  start kube-scheduler cp kube-scheduler --kubeconfig="$CL/scheduler.kubeconfig" --authentication-kubeconfig="$CL/scheduler.kubeconfig" \
    --authorization-kubeconfig="$CL/scheduler.kubeconfig" --leader-elect=false
}

# --- workers ---
start_worker() {
  local w=$1 d=$CL/$1
  mkdir -p "$d/kubelet" "$d/pod-logs"
  make_node_namespaces "$w"
  # The kubelet's pod-resources socket where kni looks for it on any node (its root dir is
  # $d/kubelet here; the device-plugins directory is at its fixed path already).
  ln -s "$d/root/var/lib/kubelet/pod-resources" "$d/kubelet/pod-resources"
  cp /usr/lib/cni/loopback "$d/root/opt/cni/bin/"
  sed -e "s#@ROOT@#$d/containerd/root#; s#@STATE@#/run/containerd#; s#@SOCKET@#/run/containerd/containerd.sock#g" \
    -e "s#@IMAGE@#$IMAGE#; s#@CNI_BIN@#/opt/cni/bin#; s#@CNI_CONF@#/etc/cni/net.d#; s#@RUNC_ROOT@#$d/runc#; s#@NRI_SOCKET@#/run/nri/nri.sock#" \
    -e "s#@REGISTRY_HOSTS@#/etc/containerd/certs.d#" \
    "$repo/hack/lib/containerd-v3.toml" > "$d/containerd.toml"
  start "containerd-$w" "$w" containerd --config "$d/containerd.toml"
  wait_for 30 "containerd on $w" ctr -a "$(sock "$w")" version
  ctr -a "$(sock "$w")" -n k8s.io images import "$CL/image.tar" > /dev/null
  cat > "$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(ip4 "$w")
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /kni-cluster-$w
failSwapOn: false
podLogsDir: $d/pod-logs
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: "$CL/pki/ca.crt"}}
authorization: {mode: AlwaysAllow}
tlsCertFile: $CL/pki/kubelet-$w.crt
tlsPrivateKeyFile: $CL/pki/kubelet-$w.key
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
EOF
  # The kubelet's cgroup root must exist in every (v1) hierarchy; a new cpuset starts empty.
  for h in /sys/fs/cgroup/*/; do
    mkdir -p "$h/kni-cluster-$w"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h/kni-cluster-$w/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h/kni-cluster-$w/cpuset.mems"
    fi
  done
  start "kubelet-$w" "$w" kubelet --config="$d/kubelet.yaml" --kubeconfig="$CL/kubelet-$w.kubeconfig" --root-dir="$d/kubelet" \
    --hostname-override="kc-$w" --node-ip="$(ip4 "$w"),$(ip6 "$w")"
  cat > "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$CL/kube-proxy.kubeconfig"}
mode: $(proxy_mode)
hostnameOverride: kc-$w
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
conntrack: {maxPerCore: 0}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
  start "kube-proxy-$w" "$w" kube-proxy --config="$d/kube-proxy.yaml"
}

# The control plane's routes to each Node's pod ranges, as a kind control plane has them from its
# own network: the API server's proxy to pods and services (the e2e Proxy and DNS specs) needs
# them. Asked for (cluster.sh pod-routes), not made by `up`: in a routed cluster the router
# between the subnets then knows kc-w2's pod ranges, and other tests prove that only the
# overlay crosses it.
pod_cidrs() { # pod_cidrs WORKER: its Node's podCIDRs; fails while it has none
  local c
  c=$(kubectl --kubeconfig "$CL/admin.kubeconfig" get node "kc-$1" -o 'jsonpath={.spec.podCIDRs[*]}')
  [ -n "$c" ] && echo "$c"
}
cp_pod_routes() {
  local w c cidrs
  for w in "${WORKERS[@]}"; do
    wait_for 60 "podCIDRs of kc-$w" pod_cidrs "$w"
    cidrs=$(pod_cidrs "$w")
    for c in $cidrs; do
      local fam=-4 to=ip4 gw=gw4
      case $c in *:*) fam=-6 to=ip6 gw=gw6 ;; esac
      if routed && [ "$w" = w2 ]; then
        ip -n "$(ns cp)" "$fam" route replace "$c" via "$($gw cp)"
        ip -n "$(ns wire)" "$fam" route replace "$c" via "$($to "$w")"
      else
        ip -n "$(ns cp)" "$fam" route replace "$c" via "$($to "$w")"
      fi
    done
  done
}

up() {
  if [ -d "$CL/run" ]; then log "a cluster is already up (or half up) in $CL: run '$0 down' first"; exit 1; fi
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl containerd containerd-shim-runc-v2 ctr; do
    [ -x "$BIN/$b" ] || { log "building the components (hack/cluster/build-components.sh)"; bash "$here/build-components.sh" all > /dev/null; break; }
  done
  case ${KNI_CLUSTER_PROXY_MODE:-iptables} in
    iptables | nftables) ;;
    *) log "KNI_CLUSTER_PROXY_MODE must be iptables or nftables, not ${KNI_CLUSTER_PROXY_MODE}"; exit 1 ;;
  esac
  mkdir -p "$CL/run"
  if [ "${KNI_CLUSTER_ROUTED:-0}" = 1 ]; then touch "$CL/routed"; fi
  if [ "${KNI_CLUSTER_NODE_IPAM:-1}" = 0 ]; then touch "$CL/no-node-ipam"; fi
  if [ "${KNI_CLUSTER_PROXY_MODE:-iptables}" = nftables ]; then echo nftables > "$CL/proxy-mode"; fi
  trap 'log "up failed; see $CL/run/*.log (down removes everything)"' ERR
  make_pki
  [ -f "$CL/image.tar" ] || bash "$repo/hack/e2e/build-image.sh" "$CL/image.tar" "$IMAGE"
  make_network
  start_control_plane
  for w in "${WORKERS[@]}"; do start_worker "$w"; done
  for w in "${WORKERS[@]}"; do wait_for 90 "node kc-$w to register" kubectl --kubeconfig "$CL/admin.kubeconfig" get node "kc-$w"; done
  cnp_crd
  log "up: nodes registered (Ready once a network runs on them)"
  echo "export KUBECONFIG=$CL/admin.kubeconfig"
}

# The ClusterNetworkPolicy CRD of sigs.k8s.io/network-policy-api, from the module at the version
# kni implements, as a cluster operator installs it beside kni: the experimental channel, whose
# destinationNamedPort kni enforces (its nodes and domainNames peers kni reports and leaves out).
cnp_crd() {
  local dir cache
  cache=$(dirname "$BIN")
  dir=$( (mkdir -p "$cache/src" && cd "$cache/src" && GOPATH=$cache/gopath GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/network-policy-api@$(. "$here/versions.env" && echo "$NETWORK_POLICY_API_VERSION")") | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -f "$dir/go.mod" ] || { log "sigs.k8s.io/network-policy-api cannot be downloaded from the Go module proxy"; return 1; }
  # Until the API server's caches are up it may answer 429 ("storage is (re)initializing").
  wait_for 60 "the ClusterNetworkPolicy CRD to be applied" kubectl --kubeconfig "$CL/admin.kubeconfig" apply -f "$dir/config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml"
  wait_for 60 "ClusterNetworkPolicies to be served" kubectl --kubeconfig "$CL/admin.kubeconfig" get clusternetworkpolicies
}

# The cluster DNS (CoreDNS behind kube-dns at the kubelets' clusterDNS), for the e2e specs that
# resolve names; its pods start once a network runs.
dns_up() {
  bash "$here/build-components.sh" coredns > /dev/null
  local image tar=$CL/coredns.tar
  image=kni.local/coredns:$(. "$here/versions.env" && echo "$COREDNS_VERSION")
  bash "$repo/hack/k8s-e2e/binary-image.sh" "$BIN/coredns" "$tar" "$image"
  for w in "${WORKERS[@]}"; do ctr -a "$(sock "$w")" -n k8s.io images import "$tar" > /dev/null; done
  sed "s#@IMAGE@#$image#" "$repo/hack/k8s-e2e/coredns.yaml" | kubectl --kubeconfig "$CL/admin.kubeconfig" apply -f - > /dev/null
  kubectl --kubeconfig "$CL/admin.kubeconfig" -n kube-system rollout status deployment/coredns --timeout=300s > /dev/null
  log "dns: CoreDNS answers at 10.96.0.10 (kube-dns)"
}

# kube-network-policies beside kni (run kni with policy.enabled: false), as its manifest deploys
# it: the binary built from its module as the image (bench/policy.ts compares it with kni's policy).
knp_up() {
  bash "$here/build-components.sh" kube-network-policies > /dev/null
  local image tar=$CL/kube-network-policies.tar
  image=kni.local/kube-network-policies:$(. "$here/versions.env" && echo "$KUBE_NETWORK_POLICIES_VERSION")
  bash "$repo/hack/k8s-e2e/binary-image.sh" "$BIN/kube-network-policies" "$tar" "$image"
  for w in "${WORKERS[@]}"; do ctr -a "$(sock "$w")" -n k8s.io images import "$tar" > /dev/null; done
  sed "s#@IMAGE@#$image#" "$here/kube-network-policies.yaml" | kubectl --kubeconfig "$CL/admin.kubeconfig" apply -f - > /dev/null
  kubectl --kubeconfig "$CL/admin.kubeconfig" -n kube-system rollout status daemonset/kube-network-policies --timeout=300s > /dev/null
  log "kube-network-policies runs on every worker"
}

# The images the Kubernetes e2e network specs run, under the names they ask for: agnhost and the
# DNS specs' jessie-dnsutils (one stand-in, hack/k8s-e2e/agnhost-image.sh), busybox, the
# Conntrack spec's regression-issue-74839 (its binary alone, as upstream's) and pause (the
# cluster's own sandbox image, whose entrypoint is a pause).
e2e_images() {
  bash "$here/build-components.sh" k8s-e2e > /dev/null
  bash "$repo/hack/k8s-e2e/agnhost-image.sh" "$BIN/agnhost" "$CL/agnhost.tar" registry.k8s.io/e2e-test-images/agnhost:2.56 \
    "$CL/jessie-dnsutils.tar" registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7
  bash "$repo/hack/k8s-e2e/binary-image.sh" "$BIN/regression-issue-74839" "$CL/regression-issue-74839.tar" \
    registry.k8s.io/e2e-test-images/regression-issue-74839:1.2
  bash "$repo/hack/k8s-e2e/busybox-image.sh" "$CL/busybox.tar" registry.k8s.io/e2e-test-images/busybox:1.37.0-1
  for w in "${WORKERS[@]}"; do
    for t in agnhost jessie-dnsutils regression-issue-74839 busybox; do ctr -a "$(sock "$w")" -n k8s.io images import "$CL/$t.tar" > /dev/null; done
    ctr -a "$(sock "$w")" -n k8s.io images tag --force "$IMAGE" registry.k8s.io/pause:3.10.1 > /dev/null
    # The agnhost network-policy-api's conformance tests name (cnp-conformance.cluster.ts).
    ctr -a "$(sock "$w")" -n k8s.io images tag --force registry.k8s.io/e2e-test-images/agnhost:2.56 registry.k8s.io/e2e-test-images/agnhost:2.45 > /dev/null
  done
  log "e2e-images: agnhost, jessie-dnsutils, busybox, regression-issue-74839 and pause on every worker"
}

# The networks a cluster runs (kni by hand, kni's DaemonSet, the CNI reference plugins).
# shellcheck source=hack/cluster/networks.sh
source "$here/networks.sh"

status() {
  [ -d "$CL/run" ] || { echo "no cluster in $CL"; return 0; }
  for f in "$CL"/run/*.pid; do
    local n
    n=$(basename "$f" .pid)
    if alive "$n"; then echo "$n: running (pid $(cat "$f"))"; else echo "$n: NOT RUNNING (log: $CL/run/$n.log)"; fi
  done
  kubectl --kubeconfig "$CL/admin.kubeconfig" get nodes -o wide 2> /dev/null || echo "API server not answering"
}

down() {
  # Processes: ours by pid, then anything else still running from the cluster dir (shims, the
  # containers they started) through the cluster's cgroups.
  for f in "$CL"/run/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2> /dev/null || true; done
  pkill -9 -f "$CL/" 2> /dev/null || true
  # Whatever still runs in a node's netns: containerd shims name the in-node socket path
  # (/run/containerd/...), not $CL, and live outside the kubelet's cgroups.
  for n in cp "${WORKERS[@]}"; do ip netns pids "$(ns "$n")" 2> /dev/null | xargs -r kill -9 2> /dev/null || true; done
  for w in "${WORKERS[@]}"; do
    for cg in /sys/fs/cgroup/*/kni-cluster-"$w"; do
      [ -d "$cg" ] || continue
      find "$cg" -name cgroup.procs -exec cat {} + 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    done
  done
  sleep 0.5
  for w in "${WORKERS[@]}"; do
    for cg in /sys/fs/cgroup/*/kni-cluster-"$w"; do [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2> /dev/null || true; done
  done
  # Mounts under the cluster dir (netns pins, overlay rootfs, pod volumes), deepest first.
  awk -v d="$CL/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2> /dev/null || true
  for w in "${WORKERS[@]}"; do umount "$CL/mnt/$w" "$CL/uts/$w" 2> /dev/null || true; done
  for n in cp "${WORKERS[@]}" wire; do ip netns del "$(ns "$n")" 2> /dev/null || true; done
  [ -f "$CL/created-dirs" ] && sort -r "$CL/created-dirs" | xargs -r rmdir 2> /dev/null || true
  ip link del kni-cluster 2> /dev/null || true
  rm -rf "$CL"
  log "down: nothing of the cluster is left"
}

case "${1:-}" in
  up) up ;;
  kni) kni_up ;;
  apiserver-stop) # an API server outage, for tests: kube-apiserver killed, everything else runs
    kill -9 "$(cat "$CL/run/kube-apiserver.pid")" ;;
  apiserver-start)
    start_apiserver
    wait_for 90 kube-apiserver kubectl --kubeconfig "$CL/admin.kubeconfig" get --raw /readyz ;;
  kni-stop) # kni-stop WORKER: kill -9 kni on one worker
    kill -9 "$(cat "$CL/run/kni-${2:?worker}.pid")" ;;
  kni-restart) # kni-restart WORKER: start kni on one worker again (after a test stopped it)
    start_kni "${2:?worker}" ;;
  kni-daemonset) kni_daemonset ;;
  dns) dns_up ;;
  kube-network-policies) knp_up ;;
  cnp-crd) cnp_crd ;; # the ClusterNetworkPolicy CRD again (up installs it), for tests that delete it
  e2e-images) e2e_images ;;
  pod-routes) cp_pod_routes ;;
  reference-cni) reference_cni ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up | kni | kni-daemonset | dns | kube-network-policies | e2e-images | pod-routes | reference-cni | down | status (tests also use: apiserver-stop | apiserver-start | kni-stop W | kni-restart W)" >&2; exit 2 ;;
esac
