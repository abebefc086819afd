// Keys delivered by a JWKS URL (protocol §5.1), in the terms host and agent authentication need:
// "the key this URL publishes under this kid, as a key we can store and verify with", and "is the
// key we stored still published there". The fetching and its SSRF rules are jwks-fetch.ts's; the
// caching, single flight and the revocation bound are jwks-cache.ts's. What this module adds:
//   - the URL a caller names is checked before anything is fetched (https, no credentials, no
//     fragment, bounded length), so a bad one is a 400 that says why, not a failed fetch;
//   - a key from a JWKS must be one agentgate verifies (discovery `algorithms`), through the same
//     parsePublicJwk every inline key passes, and keeps the kid it is published under;
//   - a caller that may make us fetch (the peek found nothing usable) first spends its own budget,
//     so one host cannot spend the cache's global budget that every other host's rotation needs;
//   - a key we cannot obtain is a refusal, never a pass (fail closed).
import type { PublicJwk } from '../domain/types.ts';
import { ApiError, type ErrorCode } from '../errors.ts';
import type { KeyLookup } from './jwks-cache.ts';
import { jwkThumbprint, parsePublicJwk } from './keys.ts';

/** What this module needs of the cache (JwksCache): a waiting lookup and a synchronous peek. */
export interface JwksKeySource {
  lookup(url: string, kid: string): Promise<KeyLookup>;
  peek(url: string, kid: string): PublicJwk | undefined;
}

/** The longest JWKS URL accepted: longer than any real one, short enough to index and log. */
export const MAX_JWKS_URL_CHARS = 2048;
/** The longest kid accepted (the JWK member bound of keys.ts). */
const MAX_KID_CHARS = 256;

/** What the fetch of a key came to, for the caller to word: present, gone, or not obtainable. */
export type PublishedKey = { kind: 'published' } | { kind: 'changed' } | { kind: 'removed' } | { kind: 'unavailable'; reason: string };

/**
 * A JWKS URL as a caller names it: an absolute https URL without credentials or fragment. The
 * fetcher enforces https again (and every address rule); this check only makes a bad URL a 400
 * that names the problem before any budget is spent. Returns the URL exactly as given: the stored
 * URL, the index and every later comparison use that one spelling.
 */
export function parseJwksUrl(value: unknown, label: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_JWKS_URL_CHARS) {
    throw new ApiError('invalid_request', `${label} must be an https URL of at most ${MAX_JWKS_URL_CHARS} characters`);
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ApiError('invalid_request', `${label} is not a valid URL`);
  }
  if (url.protocol !== 'https:') throw new ApiError('invalid_request', `${label} must use https`);
  if (url.username !== '' || url.password !== '') throw new ApiError('invalid_request', `${label} must not carry credentials`);
  if (url.hash !== '' || value.includes('#')) throw new ApiError('invalid_request', `${label} must not carry a fragment`);
  return value;
}

/**
 * Whether two JWKS URLs may name the same document: the scheme's and host's case, a default port
 * and dot segments make no difference (WHATWG URL parsing settles them), and neither does the
 * query, which many servers ignore, so two URLs that differ only there are taken as the same. Used
 * where two URLs must differ (a host's and its agent's, protocol §5.1), where the stricter reading
 * is the safe one; lookups compare the exact spelling. A redirect from one URL to the other cannot
 * be seen here.
 */
export function sameJwksUrl(a: string, b: string): boolean {
  return documentOf(a) === documentOf(b);
}

function documentOf(text: string): string {
  const url = new URL(text);
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/** A kid as a caller names it (header `kid`, `agent_kid`): a non-empty string of bounded length. */
export function parseKid(value: unknown, label: string, code: ErrorCode): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_KID_CHARS) {
    throw new ApiError(code, `${label} must be a non-empty string of at most ${MAX_KID_CHARS} characters`);
  }
  return value;
}

interface JwksKeysDeps {
  source: JwksKeySource;
  /** Key types accepted for new keys (discovery `algorithms`). */
  algorithms: readonly string[];
  /** Spends the budget of the caller a fetch would be made for (429 when it is spent). */
  spendFetch: (callerKey: string) => Promise<void>;
}

export class JwksKeys {
  readonly #deps: JwksKeysDeps;
  /** Thumbprints of published keys, by the cache's (frozen, per fetch) key object: one hash per key per fetch, not per call. */
  readonly #thumbprints = new WeakMap<PublicJwk, string>();

  constructor(deps: JwksKeysDeps) {
    this.#deps = deps;
  }

  /**
   * The key `url` publishes under `kid`, checked as an inline key would be, with its kid kept.
   * `callerKey` names whose budget a fetch spends (null: none, the cache's own bounds only); `code`
   * is the refusal's error code (the caller knows whether a missing key makes a token invalid or a
   * request malformed).
   */
  async resolve(url: string, kid: string, options: { callerKey: string | null; label: string; code: ErrorCode }): Promise<PublicJwk> {
    if (options.callerKey !== null && this.#deps.source.peek(url, kid) === undefined) await this.#deps.spendFetch(options.callerKey);
    const found = await this.#deps.source.lookup(url, kid);
    if (found.kind === 'unknown_kid') throw new ApiError(options.code, `${options.label} publishes no key with kid ${JSON.stringify(kid)}`);
    if (found.kind === 'unavailable') throw new ApiError(options.code, `${options.label} could not be used: ${found.reason}`);
    const { jwk } = parsePublicJwk(found.jwk, this.#deps.algorithms, `the key ${JSON.stringify(kid)} of ${options.label}`);
    return { ...jwk, kid };
  }

  /**
   * Whether `url` still publishes, under `kid`, the key whose thumbprint is `thumbprint`. A usable
   * cached set answers without waiting on any fetch (a stale one starts its refresh); only a set
   * past its stale window is waited for. Spends no caller's budget: the URL was fixed when its
   * owner registered, and the cache bounds how often one URL is fetched.
   */
  async published(url: string, kid: string, thumbprint: string): Promise<PublishedKey> {
    const found = await this.#deps.source.lookup(url, kid);
    if (found.kind === 'unknown_kid') return { kind: 'removed' };
    if (found.kind === 'unavailable') return { kind: 'unavailable', reason: found.reason };
    return this.#thumbprintOf(found.jwk) === thumbprint ? { kind: 'published' } : { kind: 'changed' };
  }

  #thumbprintOf(jwk: PublicJwk): string {
    let thumbprint = this.#thumbprints.get(jwk);
    if (thumbprint === undefined) {
      thumbprint = jwkThumbprint(jwk);
      this.#thumbprints.set(jwk, thumbprint);
    }
    return thumbprint;
  }
}
