import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';

/** Asserts that p fails with that gRPC status and a message matching re. */
export async function rejectsWith(p: Promise<unknown>, code: grpc.status, re: RegExp): Promise<void> {
  try {
    await p;
  } catch (e) {
    const err = e as grpc.ServiceError;
    assert.equal(grpc.status[err.code], grpc.status[code], `wrong status, message: ${err.details}`);
    assert.match(err.details, re);
    return;
  }
  assert.fail(`expected ${grpc.status[code]}, the call succeeded`);
}
