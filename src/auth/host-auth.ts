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
  /** The key an unknown host presented in `host_public_key`. */
  presentedJwk: PublicJwk | null;
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
}

/** What a host's token is checked against, and what a known host spends. */
interface HostAuthDeps {
  store: HostRecords & ReplayRecords;
  clock: Clock;
  settings: AuthSettings;
  budgets: CallerBudgets;
  importer: KeyImporter;
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

    const host = await this.#deps.store.findHostByThumbprint(iss);
    let presentedJwk: PublicJwk | null = null;
    if (host) {
      await verifySignature(decoded, await this.#deps.importer.import(host.publicJwk));
      // The signature proves which host calls: from here the request's access line names it.
      noteHost(host.id);
    } else {
      presentedJwk = await this.verifySelfSigned(decoded, iss);
      if (!options.allowUnknown) throw new ApiError('host_not_found', 'no host is registered with this key');
    }
    // Recorded only after the signature verified, so a forgery cannot burn a real host's jti.
    if (!(await this.#deps.store.recordHostJti(iss, jti, jtiTtlMs(this.#deps.settings)))) {
      throw new ApiError('invalid_jwt', 'JWT jti has already been used (replay)');
    }
    if (host) {
      await this.#deps.budgets.host(host.id, options.limit ?? 'host');
      const refusal = host.status === 'revoked' && options.allowRevoked === true ? null : hostRefusal(host.status, options.allowPending);
      if (refusal) throw refusal;
    }
    return { host, thumbprint: iss, presentedJwk, claims };
  }

  /** An unknown host proves possession of `host_public_key`, whose thumbprint must be `iss`. */
  private async verifySelfSigned(decoded: DecodedJwt, iss: string): Promise<PublicJwk> {
    const { claims } = decoded;
    if (claims.host_public_key === undefined) {
      if (claims.host_jwks_url !== undefined) throw new ApiError('invalid_request', 'host_jwks_url is not supported; send host_public_key');
      throw new ApiError('invalid_jwt', 'unknown host: the JWT must carry host_public_key');
    }
    const { jwk } = parsePublicJwk(claims.host_public_key, this.#deps.settings.algorithms, 'host_public_key');
    if (jwkThumbprint(jwk) !== iss) throw new ApiError('invalid_jwt', 'host JWT iss is not the thumbprint of host_public_key');
    await verifySignature(decoded, await this.#deps.importer.import(jwk));
    return jwk;
  }

  private timeRules() {
    return timeRulesAt(this.#deps.clock.nowMs(), this.#deps.settings);
  }
}
