// The containerd end-to-end suite against containerd 2.x (NRI + CNI shim), built from its module
// by hack/cluster/build-components.sh.
import { CONTAINERD_2 } from '../helpers/containerd-env';
import { e2eContainerdSuite } from '../helpers/e2e-containerd-suite';
import { BIN } from './cluster-helpers';

e2eContainerdSuite(CONTAINERD_2(BIN));
