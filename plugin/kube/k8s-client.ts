// What kni uses of @kubernetes/client-node, and the only module that names its values. The
// build bundles this file with the library into k8s-client.bundle.js (package.json's build:
// esbuild, unused API groups shaken out, whitespace dropped), and kube-api.ts loads the bundle.
// Why: the library's entry point loads every API group (PromiseAPI and ObservableAPI alone are
// 11.7 MB of source), whatever is imported. Measured here (Node 20): a process with the library
// and a CoreV1Api client is 111 MB resident; with the bundle of these names, 68 MB. Every node
// of a cluster runs kni, and this is most of its idle footprint.
// A name used from the library must be listed here (kube-api.ts types the bundle by this file).
export { AppsV1Api, CoreV1Api, CustomObjectsApi, DiscoveryV1Api, KubeConfig, ListWatch, makeInformer, NetworkingV1Api, PatchStrategy, setHeaderOptions, Watch } from '@kubernetes/client-node';
