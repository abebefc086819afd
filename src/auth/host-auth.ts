// Host JWT verification (protocol §5.2, DESIGN §4). The host is identified by the RFC 7638
// thumbprint in `iss`, never by `kid`; a known host is verified only with its stored key.
import type { Clock } from '../common/clock.ts';
import { hostRefusal } from '../domain/lifecycle.ts';
import type { HostRecord, PublicJwk } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { CallerBudgets } from './budgets.ts';
import { noteHost } from '../request-context.ts';
import type { HostRecords, ReplayRecords } from '../store/store.ts';
import { checkAudience, checkTimeAndJti, decodeJwt, jtiTtlMs, timeRulesAt, verifySignature, type DecodedJwt } from './jwt.ts';
import { parseJwksUrl, parseKid, type JwksKeys } from './jwks-keys.ts';
import { jwkThumbprint, parsePublicJwk, type KeyImporter } from './keys.ts';

/** A base64url SHA-256 thumbprint: 43 characters (braces could never reach a Redis hash tag). */
const THUMBPRINT = /^[A-Za-z0-9_-]{43}$/;

export interface AuthSettings {
  issuer: string;
  executeUrl: string;
  maxLifetimeSeconds: number;
  skewSeconds: number;
  /** Key types accepted for new keys (discovery `algorithms`). */
  algorithms: readonly string[];
}

export interface VerifiedHost {
  /** The stored host, or null for an unknown host whose self-signed JWT verified (register only). */
  host: HostRecord | null;
  thumbprint: string;
  /** The key an unknown host presented (`host_public_key`, or its JWKS's key under the header kid). */
  presentedJwk: PublicJwk | null;
  /** The JWKS URL an unknown host presented its key by; absent for an inline key. */
  presentedJwksUrl?: string;
  claims: Record<string, unknown>;
}

export interface HostAuthOptions {
  /** Registration may come from an unknown host (dynamic host registration). */
  allowUnknown: boolean;
  /** Pending hosts may register and poll status only (docs/stances.md). */
  allowPending: boolean;
  /**
   * A revoked host may repeat its own revocation (POST /host/revoke) and nothing else: the repeat
   * changes nothing and is how it confirms a revocation answered "not yet durable" (docs/stances.md).
   */
  allowRevoked?: boolean;
  /** Which budget a known host spends: status polling has its own, higher one. */
  limit?: 'host' | 'status';
  /** The caller's address: an unknown host's JWKS fetch spends its budget (registration passes it). */
  clientIp?: string;
}

/**
 * Moves a JWKS host's stored key to the one it now signs with (the use cases' rotation, which also
 * tells the host's agents): injected, since who is calling is decided below the use cases.
 */
export type JwksKeyMove = (host: HostRecord, next: { thumbprint: string; publicJwk: PublicJwk }) => Promise<HostRecord>;

/** What a host's token is checked against, and what a known host spends. */
interface HostAuthDeps {
  store: HostRecords & ReplayRecords;
  clock: Clock;
  settings: AuthSettings;
  budgets: CallerBudgets;
  importer: KeyImporter;
  jwks: JwksKeys;
  moveJwksKey: JwksKeyMove;
}

export class HostAuthenticator {
  readonly #deps: HostAuthDeps;

  constructor(deps: HostAuthDeps) {
    this.#deps = deps;
  }

  async verify(token: string | null, options: HostAuthOptions): Promise<VerifiedHost> {
    if (!token) throw new ApiError('invalid_jwt', 'a host JWT is required (Authorization: Bearer)');
    const decoded = decodeJwt(token, 'host+jwt');
    const { claims } = decoded;
    const iss = claims.iss;
    if (typeof iss !== 'string' || !THUMBPRINT.test(iss)) throw new ApiError('invalid_jwt', 'host JWT iss must be the host key thumbprint');
    checkAudience(claims, [this.#deps.settings.issuer]);
    const { jti } = checkTimeAndJti(claims, this.timeRules());
    const delivery = keyDeliveryOf(claims);

    let host: HostRecord | null;
    let presentedJwk: PublicJwk | null = null;
    let presentedJwksUrl: string | undefined;
    let movedKey: { thumbprint: string; publicJwk: PublicJwk } | null = null;
    // A JWT naming a JWKS URL is looked up by that URL first (protocol §5.5: the URL names a JWKS
    // host, whichever of its keys signs): a thumbprint another host took meanwhile (a rotation onto
    // a key that was public before its first use) cannot capture the URL's host's requests.
    const byUrl = delivery.kind === 'jwks' ? await this.#deps.store.findHostByJwksUrl(delivery.url) : null;
    if (byUrl) {
      host = byUrl;
      if (byUrl.thumbprint === iss) await this.verifyStoredJwksKey(byUrl, decoded, iss);
      else movedKey = await this.verifyRotatedJwksHost(byUrl, decoded, iss);
    } else {
      host = await this.#deps.store.findHostByThumbprint(iss);
      if (host) {
        assertSameDelivery(host, delivery);
        if (host.jwksUrl === undefined) await verifySignature(decoded, await this.#deps.importer.import(host.publicJwk));
        else await this.verifyStoredJwksKey(host, decoded, iss);
      } else {
        // Refused before the presented key is read: an endpoint that never accepts unknown hosts must
        // not fetch a URL an unknown caller names.
        if (!options.allowUnknown) throw new ApiError('host_not_found', 'no host is registered with this key');
        presentedJwk = await this.verifySelfSigned(decoded, iss, delivery, options.clientIp ?? 'unknown');
        if (delivery.kind === 'jwks') presentedJwksUrl = delivery.url;
      }
    }
    // The signature proves which host calls: from here the request's access line names it.
    if (host) noteHost(host.id);
    // Recorded only after the signature verified, so a forgery cannot burn a real host's jti.
    if (!(await this.#deps.store.recordHostJti(iss, jti, jtiTtlMs(this.#deps.settings)))) {
      throw new ApiError('invalid_jwt', 'JWT jti has already been used (replay)');
    }
    if (host) {
      await this.#deps.budgets.host(host.id, options.limit ?? 'host');
      const refusal = host.status === 'revoked' && options.allowRevoked === true ? null : hostRefusal(host.status, options.allowPending);
      if (refusal) throw refusal;
      // Only a token that passed every check above may move the stored key, and only a live host's:
      // a revoked host may still repeat its revocation, but its record stays as it was revoked.
      if (movedKey && (host.status === 'active' || host.status === 'pending')) host = await this.#deps.moveJwksKey(host, movedKey);
    }
    return { host, thumbprint: iss, presentedJwk, ...(presentedJwksUrl !== undefined ? { presentedJwksUrl } : {}), claims };
  }

  /**
   * An unknown host proves possession of the key it presents, whose thumbprint must be `iss`. A
   * fetch it causes spends its address's budget: its `iss` is unverified, so a budget kept by
   * thumbprint would be a new one for every made-up key.
   */
  private async verifySelfSigned(decoded: DecodedJwt, iss: string, delivery: KeyDelivery, clientIp: string): Promise<PublicJwk> {
    let jwk: PublicJwk;
    if (delivery.kind === 'inline') jwk = parsePublicJwk(delivery.jwk, this.#deps.settings.algorithms, 'host_public_key').jwk;
    else if (delivery.kind === 'jwks') jwk = await this.jwksKey(delivery.url, decoded, iss, `address:${clientIp}`);
    else throw new ApiError('invalid_jwt', 'unknown host: the JWT must carry host_public_key or host_jwks_url');
    if (jwkThumbprint(jwk) !== iss) throw new ApiError('invalid_jwt', 'host JWT iss is not the thumbprint of the host key');
    await verifySignature(decoded, await this.#deps.importer.import(jwk));
    return jwk;
  }

  /**
   * The key a JWKS host's JWT names by its header kid, which must be the key `iss` names.
   * `callerKey` is whose fetch budget a fetch spends, or null when the cache's own bounds (one
   * kid-miss refetch per URL per interval, the global budget) are the only ones that can apply:
   * before the signature is verified, no host may be charged for a request it did not make.
   */
  private async jwksKey(url: string, decoded: DecodedJwt, iss: string, callerKey: string | null): Promise<PublicJwk> {
    const kid = parseKid(decoded.header.kid, 'a JWT of a host whose keys are at a JWKS URL: the header kid', 'invalid_jwt');
    const key = await this.#deps.jwks.resolve(url, kid, { callerKey, label: 'the host\'s JWKS URL', code: 'invalid_jwt' });
    if (jwkThumbprint(key) !== iss) throw new ApiError('invalid_jwt', 'host JWT iss is not the thumbprint of the key its kid names');
    return key;
  }

  /**
   * A JWKS host signing with its stored key: the signature is checked with the stored key first
   * (its thumbprint is `iss`), and only then whether its JWKS still publishes it under the header
   * kid, which answers from the cache when it can and spends no budget: a forgery naming a host's
   * thumbprint is refused before it can make us fetch anything in that host's name.
   */
  private async verifyStoredJwksKey(host: HostRecord, decoded: DecodedJwt, iss: string): Promise<void> {
    await verifySignature(decoded, await this.#deps.importer.import(host.publicJwk));
    const kid = parseKid(decoded.header.kid, 'a JWT of a host whose keys are at a JWKS URL: the header kid', 'invalid_jwt');
    const found = await this.#deps.jwks.published(host.jwksUrl!, kid, iss);
    if (found.kind === 'removed') throw new ApiError('invalid_jwt', "the host's JWKS URL no longer publishes this key under the header kid");
    if (found.kind === 'changed') throw new ApiError('invalid_jwt', "the host's JWKS URL publishes another key under the header kid");
    if (found.kind === 'unavailable') throw new ApiError('invalid_jwt', `the host's JWKS URL could not be used: ${found.reason}`);
  }

  /**
   * A JWKS host signing with a key other than the stored one (protocol §5.5: publishing a key is
   * how it rotates). The key must be published under the header kid and verify the token. The stored
   * key moves to it only once the stored one is no longer published: while both are, either may
   * sign, and the record is not rewritten back and forth. Answers the key to move to, if any; the
   * caller moves it once the token passed its replay and status checks too.
   */
  private async verifyRotatedJwksHost(host: HostRecord, decoded: DecodedJwt, iss: string): Promise<{ thumbprint: string; publicJwk: PublicJwk } | null> {
    const url = host.jwksUrl!;
    // Unverified until the key is fetched, so nobody's budget is charged (see jwksKey).
    const key = await this.jwksKey(url, decoded, iss, null);
    await verifySignature(decoded, await this.#deps.importer.import(key));
    const storedKid = host.publicJwk.kid;
    const stored = storedKid === undefined ? ({ kind: 'removed' } as const) : await this.#deps.jwks.published(url, storedKid, host.thumbprint);
    return stored.kind === 'removed' || stored.kind === 'changed' ? { thumbprint: iss, publicJwk: key } : null;
  }

  private timeRules() {
    return timeRulesAt(this.#deps.clock.nowMs(), this.#deps.settings);
  }
}

/** How a host JWT delivers its key (protocol §5.2): inline, by a JWKS URL, or not at all (a known host may omit it). */
type KeyDelivery = { kind: 'inline'; jwk: unknown } | { kind: 'jwks'; url: string } | { kind: 'none' };

function keyDeliveryOf(claims: Record<string, unknown>): KeyDelivery {
  // A null claim is an absent one: some clients write every optional field.
  const inline = claims.host_public_key !== undefined && claims.host_public_key !== null;
  const jwks = claims.host_jwks_url !== undefined && claims.host_jwks_url !== null;
  if (inline && jwks) throw new ApiError('invalid_request', 'a host JWT carries host_public_key or host_jwks_url, not both');
  if (inline) return { kind: 'inline', jwk: claims.host_public_key };
  if (jwks) return { kind: 'jwks', url: parseJwksUrl(claims.host_jwks_url, 'host_jwks_url') };
  return { kind: 'none' };
}

/**
 * Protocol §5.1: the key delivery mode is fixed at registration. A host that registered inline and
 * now names a JWKS URL, or the reverse, or another URL than its own, is refused: it must register
 * again as a new host, since otherwise whoever controls the new URL would take over the old identity.
 */
function assertSameDelivery(host: HostRecord, delivery: KeyDelivery): void {
  if (delivery.kind === 'none') return;
  const stored = host.jwksUrl === undefined ? 'an inline key' : 'a JWKS URL';
  if (delivery.kind === 'jwks' && host.jwksUrl === undefined) {
    throw new ApiError('invalid_request', `this host registered with ${stored}; the key delivery mode is fixed at registration (register a new host to use host_jwks_url)`);
  }
  if (delivery.kind === 'inline' && host.jwksUrl !== undefined) {
    throw new ApiError('invalid_request', `this host registered with ${stored}; the key delivery mode is fixed at registration (send host_jwks_url, not host_public_key)`);
  }
  if (delivery.kind === 'jwks' && delivery.url !== host.jwksUrl) {
    throw new ApiError('invalid_request', 'host_jwks_url is not the URL this host registered with; the key delivery is fixed at registration');
  }
}
