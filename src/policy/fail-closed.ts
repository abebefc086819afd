// The fail-closed wrapper every policy decision goes through (DESIGN §5): a decision the policy
// could not make (an exception in wasm, an undefined result, a malformed answer, no policy loaded)
// refuses the request with 500 internal_error. It never becomes an authorization, and the client
// never sees the policy's internals; the log says what failed.
import { ApiError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { PolicyError } from './types.ts';

export function decideOrRefuse<T>(logger: Logger, entrypoint: string, decide: () => T): T {
  try {
    return decide();
  } catch (err) {
    if (err instanceof PolicyError) {
      logger.error('policy decision failed; refusing', { decision: entrypoint, err });
      throw new ApiError('internal_error', 'the authorization policy could not decide; the request was refused');
    }
    throw err;
  }
}
