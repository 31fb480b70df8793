# The networks the test cluster runs, sourced by cluster.sh (its variables and helpers: CL,
# WORKERS, repo, start, wait_for, log, sock): kni from this checkout by hand, kni's DaemonSet
# from its image, or the CNI reference plugins (npm run bench:cluster's baseline).

# kni from this checkout on every worker, as the DaemonSet runs it but without the image: the
# manifest's ConfigMap and RBAC objects are applied, each kni reads that config, its Node name
# from KNI_NODE_NAME (the DaemonSet's downward API) and the API through kni.kubeconfig (the
# DaemonSet's service account). Each takes its pod ranges from its Node.
kni_up() {
  kubectl --kubeconfig "$CL/admin.kubeconfig" apply -l kni.dev/part=setup -f "$repo/kind-config/kni-daemonset.yaml" > /dev/null
  kubectl --kubeconfig "$CL/admin.kubeconfig" -n kube-system get configmap kni-config -o jsonpath='{.data.config\.yaml}' > "$CL/kni.yaml"
  # Tests add settings of their own (top-level keys) with KNI_CLUSTER_KNI_EXTRA=FILE.
  if [ -n "${KNI_CLUSTER_KNI_EXTRA:-}" ]; then cat "$KNI_CLUSTER_KNI_EXTRA" >> "$CL/kni.yaml"; fi
  for w in "${WORKERS[@]}"; do start_kni "$w"; done
  for w in "${WORKERS[@]}"; do
    # Serving, not only Ready: a node kni was killed on is still Ready while kni restarts.
    wait_for 120 "kni serving on $w" node "$repo/dist/plugin/knictl.js" --socket "$CL/$w/root/run/kni/kni.sock" ipam
    wait_for 120 "node kc-$w Ready" bash -c "kubectl --kubeconfig $CL/admin.kubeconfig get node kc-$w -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"
  done
  log "kni runs on every worker; nodes Ready"
}

start_kni() {
  # Metrics on the node's own loopback (each node is its own netns: no port clash). V8's heap
  # sized and glibc's arenas capped as the DaemonSet does (kind-config/kni-daemonset.yaml).
  start "kni-$1" "$1" env MALLOC_ARENA_MAX=2 KNI_NODE_NAME="kc-$1" KUBECONFIG="$CL/kni.kubeconfig" node --max-semi-space-size=4 --heap-growing-percent=30 "$repo/dist/plugin/main.js" --config "$CL/kni.yaml" --metrics-addr 127.0.0.1:9273
}

# kni as the DaemonSet of kind-config/kni-daemonset.yaml, from its image built here
# (hack/build-image.sh) and imported into every worker's containerd: no registry.
kni_daemonset() {
  [ -f "$CL/kni-image.tar" ] || bash "$repo/hack/build-image.sh" "$CL/kni-image.tar" kni:dev > /dev/null
  for w in "${WORKERS[@]}"; do ctr -a "$(sock "$w")" -n k8s.io images import "$CL/kni-image.tar" > /dev/null; done
  kubectl --kubeconfig "$CL/admin.kubeconfig" apply -f "$repo/kind-config/kni-daemonset.yaml" > /dev/null
  kubectl --kubeconfig "$CL/admin.kubeconfig" -n kube-system rollout status daemonset/kni --timeout=180s > /dev/null
  log "kni runs as the DaemonSet on every worker"
}

# The CNI reference plugins instead of kni (bridge + host-local + portmap + loopback, as
# kindnet uses them), on each Node's podCIDRs: the baseline of npm run bench:cluster.
reference_cni() {
  for w in "${WORKERS[@]}"; do
    local d=$CL/$w v4 v6
    wait_for 60 "podCIDRs of kc-$w" bash -c "kubectl --kubeconfig $CL/admin.kubeconfig get node kc-$w -o jsonpath='{.spec.podCIDRs}' | grep -q ."
    v4=$(kubectl --kubeconfig "$CL/admin.kubeconfig" get node "kc-$w" -o jsonpath='{.spec.podCIDRs[0]}')
    v6=$(kubectl --kubeconfig "$CL/admin.kubeconfig" get node "kc-$w" -o jsonpath='{.spec.podCIDRs[1]}')
    cp /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap "$d/root/opt/cni/bin/"
    cat > "$d/root/etc/cni/net.d/10-reference.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "reference", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam", "ranges": [[{"subnet": "$v4"}], [{"subnet": "$v6"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  done
  for w in "${WORKERS[@]}"; do
    wait_for 120 "node kc-$w Ready" bash -c "kubectl --kubeconfig $CL/admin.kubeconfig get node kc-$w -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"
  done
  log "the CNI reference plugins are every worker's network; nodes Ready"
}
