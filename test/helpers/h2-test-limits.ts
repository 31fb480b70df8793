import { H2Limits } from '../../plugin/server/http2/connection';

/** Limits for a test's server: roomy, so that only the test's own case trips one. */
export const H2_TEST_LIMITS: H2Limits = { handshakeMs: 2000, idleMs: 60_000, maxAgeMs: 600_000, maxAgeGraceMs: 1000, maxConcurrentStreams: 100, maxHeaderListSize: 16 << 10 };
