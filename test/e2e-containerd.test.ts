// End to end with Debian's containerd 1.6 + runc (CNI only); test/cluster/ runs the same suite
// against containerd 2.x.
import { CONTAINERD_16 } from './helpers/containerd-env';
import { e2eContainerdSuite } from './helpers/e2e-containerd-suite';

e2eContainerdSuite(CONTAINERD_16);
