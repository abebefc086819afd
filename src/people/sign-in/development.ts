// The development sign-in (INSECURE_DEV_SIGN_IN): a person is whoever types a name. For local use
// only, and start-up warns when it is on. Its people live apart from any provider's: their ids start
// with `dev|`, which no OpenID Connect id (`<issuer URL>|<subject>`) can.
import { ApiError } from '../../errors.ts';
import type { SignedIn } from '../sessions.ts';

const NAME = /^[\p{L}\p{N} ._-]{1,64}$/u;

/** The person a typed name signs in as; typing it is the whole ceremony, so it counts as credentials entered now. */
export function developmentPerson(typed: unknown, nowMs: number): SignedIn {
  const name = typeof typed === 'string' ? typed.trim() : '';
  if (!NAME.test(name)) throw new ApiError('invalid_request', 'Use a name of letters, digits, spaces, dots, dashes (at most 64).');
  return { personId: `dev|${name}`, name, signedInAtMs: nowMs, freshLoginAtMs: nowMs };
}
