/**
 * Engine errors as JavaScript sees them: an `Error` whose `code` is one of the stable
 * ENGINE_ERROR_CODES and whose message is the engine's own.
 *
 * Owns: the one error class both backends throw, and the normalisation of errors
 * that did not come from the engine (napi argument checks). Must never: map codes to
 * HTTP statuses (that is the API layer's error catalogue).
 */

import { ENGINE_ERROR_CODES, EngineErrorCode } from './engine';

export class EngineError extends Error {
  readonly code: EngineErrorCode;

  constructor(code: EngineErrorCode, message: string) {
    super(message);
    this.name = 'EngineError';
    this.code = code;
  }
}

export function isEngineErrorCode(code: unknown): code is EngineErrorCode {
  return typeof code === 'string' && (ENGINE_ERROR_CODES as readonly string[]).includes(code);
}

/** napi-rs rejects arguments of the wrong JavaScript type with these codes. */
const NAPI_ARGUMENT_CODES = new Set([
  'InvalidArg',
  'ObjectExpected',
  'StringExpected',
  'NumberExpected',
  'BooleanExpected',
  'ArrayExpected',
  'BigintExpected',
  'ArrayBufferExpected',
]);

/**
 * Errors from the native addon already carry engine codes; napi's own argument-type
 * errors become QUIVER_INVALID_ARGUMENT so callers see one vocabulary. Anything else
 * (an engine panic) is passed through untouched and ends up as an internal error.
 */
export function normaliseError(err: unknown): unknown {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && NAPI_ARGUMENT_CODES.has(code)) {
      return new EngineError('QUIVER_INVALID_ARGUMENT', err.message);
    }
  }
  return err;
}

export function invalidArgument(message: string): EngineError {
  return new EngineError('QUIVER_INVALID_ARGUMENT', message);
}
