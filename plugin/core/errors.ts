// The errors the core answers with. Codes are gRPC status names; each entry point maps them
// (gRPC status, CNI error code, NRI status).

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'RESOURCE_EXHAUSTED'
  | 'FAILED_PRECONDITION'
  | 'UNAVAILABLE'
  | 'INTERNAL';

export class KniError extends Error {
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
  }
}

export const invalid = (message: string): KniError => new KniError('INVALID_ARGUMENT', message);
