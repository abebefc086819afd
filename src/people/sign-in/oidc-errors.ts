// The closed set of ways a person's sign-in can fail, each with the one message a person may see.
// The reason is for logs and tests; the message names no provider internals (error descriptions,
// claim values, endpoints), which stay in `cause` for the log only.
import { AuthorizationResponseError, ClientError, ResponseBodyError } from 'openid-client';

export type SignInFailure =
  | 'expired' // the pending sign-in is missing, malformed or older than it may be
  | 'state_mismatch' // the callback does not belong to this pending sign-in
  | 'provider_denied' // the provider answered the authorization request with an error (e.g. cancelled)
  | 'provider_refused' // the provider's token endpoint refused the code (reused, expired, wrong verifier)
  | 'nonce_mismatch' // the ID token was issued for another sign-in
  | 'stale_sign_in' // the provider's login is older than the freshness window allows
  | 'timeout' // the provider did not answer within the configured time
  | 'unreachable' // the provider could not be reached at all
  | 'invalid_response'; // anything else the provider sent that failed validation

const PUBLIC_MESSAGES: Record<SignInFailure, string> = {
  expired: 'This sign-in has expired or was already used. Please sign in again.',
  state_mismatch: 'This sign-in does not match the one you started here. Please sign in again.',
  provider_denied: 'The sign-in was not completed at your identity provider.',
  provider_refused: 'Your identity provider did not confirm this sign-in. Please sign in again.',
  nonce_mismatch: 'This sign-in does not match the one you started here. Please sign in again.',
  stale_sign_in: 'Your last sign-in is too old for this step. Please sign in again.',
  timeout: 'Your identity provider did not answer in time. Please try again.',
  unreachable: 'Your identity provider could not be reached. Please try again later.',
  invalid_response: 'Your identity provider sent an answer that could not be verified. Please sign in again.',
};

/** A sign-in failure whose message is safe to show the person; `reason` and `cause` are for the log. */
export class SignInError extends Error {
  readonly reason: SignInFailure;
  constructor(reason: SignInFailure, options?: { cause?: unknown }) {
    super(PUBLIC_MESSAGES[reason], options);
    this.name = 'SignInError';
    this.reason = reason;
  }
}

/**
 * Maps what openid-client threw during the code exchange to one failure reason. openid-client
 * wraps the underlying check in `cause`, which carries the claim that failed, so a nonce mismatch
 * and a stale auth_time can be told apart without reading message text.
 */
export function classifyProviderError(err: unknown): SignInError {
  if (err instanceof SignInError) return err;
  if (err instanceof AuthorizationResponseError) return new SignInError('provider_denied', { cause: err });
  if (err instanceof ResponseBodyError) return new SignInError('provider_refused', { cause: err });
  if (err instanceof ClientError) {
    const claim = claimOf(err.cause);
    if (err.code === 'OAUTH_TIMEOUT') return new SignInError('timeout', { cause: err });
    if (err.code === 'OAUTH_JWT_CLAIM_COMPARISON_FAILED' && claim === 'nonce') return new SignInError('nonce_mismatch', { cause: err });
    if (err.code === 'OAUTH_JWT_TIMESTAMP_CHECK_FAILED' && claim === 'auth_time') return new SignInError('stale_sign_in', { cause: err });
    return new SignInError('invalid_response', { cause: err });
  }
  if (isTimeout(err)) return new SignInError('timeout', { cause: err });
  // Node's fetch reports a refused connection or a failed DNS lookup as a TypeError("fetch failed").
  if (err instanceof TypeError && err.message === 'fetch failed') return new SignInError('unreachable', { cause: err });
  return new SignInError('invalid_response', { cause: err });
}

/** The claim name an oauth4webapi check records in its cause, if any. */
function claimOf(cause: unknown): string | undefined {
  const detail = (cause as { cause?: { claim?: unknown } } | undefined)?.cause;
  return typeof detail?.claim === 'string' ? detail.claim : undefined;
}

function isTimeout(err: unknown): boolean {
  return err instanceof Error && (err.name === 'TimeoutError' || (err.cause instanceof Error && err.cause.name === 'TimeoutError'));
}

/** A one-line description of an error and its causes, for operators (start-up errors and logs), never for people. */
export function describeError(err: unknown): string {
  const parts: string[] = [];
  let current: unknown = err;
  // Causes can nest; three levels are enough to reach the network error under openid-client's wrapper.
  for (let depth = 0; depth < 3 && current instanceof Error; depth += 1) {
    // A provider's error response keeps its OAuth error code apart from the message.
    const oauthError = current instanceof ResponseBodyError || current instanceof AuthorizationResponseError ? ` (${current.error}: ${current.error_description ?? 'no description'})` : '';
    parts.push(`${current.message}${oauthError}`);
    current = current.cause;
  }
  return parts.length > 0 ? parts.join(': ') : String(err);
}
