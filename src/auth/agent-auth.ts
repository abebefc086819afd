// Agent JWT verification (protocol §5.3, DESIGN §4): full verification for every endpoint but
// execute, and the pieces execute's one-round-trip path uses (precheck, cached-key signature
// check, issuer rule), so every rule about agent tokens lives here.
import type { Clock } from '../common/clock.ts';
import type { AgentSnapshot, AgentStatus } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { CallerBudgets } from './budgets.ts';
import { noteAgent } from '../request-context.ts';
import type { AgentRecords, ReplayRecords } from '../store/store.ts';
import type { AuthSettings } from './host-auth.ts';
import { checkAudience, checkTimeAndJti, decodeJwt, ed25519SignatureVerifies, jtiTtlMs, timeRulesAt, verifySignature, type DecodedJwt } from './jwt.ts';
import type { JwksKeys } from './jwks-keys.ts';
import type { AgentKeyCache, CachedAgentKey } from './key-cache.ts';

export interface VerifiedAgent {
  snapshot: AgentSnapshot;
  claims: Record<string, unknown>;
  /** The JWT's `capabilities` claim, when present: the token is restricted to these. */
  capabilityClaim: string[] | null;
}

/** What an agent's token is checked against, and what it spends once it is used up. */
interface AgentAuthDeps {
  store: AgentRecords & ReplayRecords;
  clock: Clock;
  settings: AuthSettings;
  keys: AgentKeyCache;
  budgets: CallerBudgets;
  jwks: JwksKeys;
}

export class AgentAuthenticator {
  readonly #deps: AgentAuthDeps;

  constructor(deps: AgentAuthDeps) {
    this.#deps = deps;
  }

  /**
   * Decodes and checks the claims that need no key: typ, sub, aud, exp/iat/jti, capabilities.
   * Cheap refusals come before any store read.
   */
  precheck(token: string | null, audiences: readonly string[]): { decoded: DecodedJwt; agentId: string; jti: string; capabilityClaim: string[] | null } {
    if (!token) throw new ApiError('invalid_jwt', 'an agent JWT is required (Authorization: Bearer)');
    const decoded = decodeJwt(token, 'agent+jwt');
    const { claims } = decoded;
    if (typeof claims.sub !== 'string' || !AGENT_ID.test(claims.sub)) throw new ApiError('invalid_jwt', 'agent JWT sub must be the agent id');
    if (claims.iss !== undefined && typeof claims.iss !== 'string') throw new ApiError('invalid_jwt', 'agent JWT iss must be a string');
    checkAudience(claims, audiences);
    const { jti } = checkTimeAndJti(claims, this.timeRules());
    return { decoded, agentId: claims.sub, jti, capabilityClaim: parseCapabilityClaim(claims.capabilities) };
  }

  /**
   * Full verification; `consumeJti` false for introspection, which must neither burn the token
   * nor spend the agent's or host's rate budget (a resource server is asking, not the agent).
   */
  async verify(token: string | null, options: { audiences: readonly string[]; consumeJti: boolean }): Promise<VerifiedAgent> {
    const { decoded, agentId, jti, capabilityClaim } = this.precheck(token, options.audiences);
    const snapshot = await this.#deps.store.getAgent(agentId);
    if (!snapshot) throw new ApiError('invalid_jwt', 'agent JWT names an unknown agent');
    const { agent } = snapshot;
    const cached = this.#deps.keys.get(agentId);
    const key = cached?.keyVersion === agent.keyVersion ? cached : await this.#deps.keys.put(agent);
    await verifySignature(decoded, key);
    if (key.jwks) await this.#stillPublished(key);
    // The signature proves who calls: from here the request's access line names the agent.
    noteAgent(agentId, agent.hostId);
    assertIssuer(decoded.claims, agent.hostThumbprint);
    if (options.consumeJti) {
      if (!(await this.#deps.store.recordAgentJti(agentId, jti, this.jtiTtlMs()))) {
        throw new ApiError('invalid_jwt', 'JWT jti has already been used (replay)');
      }
      await this.#deps.budgets.agent(agentId, agent.hostId);
    }
    return { snapshot, claims: decoded.claims, capabilityClaim };
  }

  /**
   * The execute path's signature check (DESIGN §2 step 3): the cached key when the signature
   * verifies with it; on a miss or a failure (the key may have been rotated on another instance
   * before the invalidation arrived), the stored key, once. Nothing is written.
   *
   * A cached Ed25519 key that verifies the token (every execute of a known agent, but for a
   * rotation) is answered at once, not as a promise: its verification is synchronous, and on the
   * hot path a promise and a suspension per call were allocations for nothing. Every other case
   * answers a promise. Either way, a refusal is an ApiError (thrown at once, or the rejection).
   */
  verifyWithCachedKey(agentId: string, decoded: DecodedJwt): CachedAgentKey | Promise<CachedAgentKey> {
    const cached = this.#deps.keys.get(agentId);
    if (cached?.alg === 'EdDSA') {
      if (ed25519SignatureVerifies(decoded, cached)) {
        noteAgent(agentId, cached.hostId);
        return cached.jwks ? this.#stillPublished(cached) : cached;
      }
      // Refused: the key may be stale, so the stored one is tried (as below, for a refused signature).
      this.#deps.keys.invalidate(agentId);
      return this.#verifyWithStoredKey(agentId, decoded, cached);
    }
    return this.#verifyWithCachedKeyLater(agentId, decoded, cached);
  }

  /** verifyWithCachedKey for a cached key that is not Ed25519 (verified through jose), or none. */
  async #verifyWithCachedKeyLater(agentId: string, decoded: DecodedJwt, cached: CachedAgentKey | undefined): Promise<CachedAgentKey> {
    if (cached) {
      try {
        await verifySignature(decoded, cached);
        noteAgent(agentId, cached.hostId);
        return cached.jwks ? this.#stillPublished(cached) : cached;
      } catch (err) {
        // Only a refused signature means the key may be stale; anything else (a 503) stands.
        if (!(err instanceof ApiError) || err.code !== 'invalid_jwt') throw err;
        this.#deps.keys.invalidate(agentId);
      }
    }
    return this.#verifyWithStoredKey(agentId, decoded, cached);
  }

  /** The stored key, once the cached one (`refused`, if there was one) could not verify the token. */
  async #verifyWithStoredKey(agentId: string, decoded: DecodedJwt, refused: CachedAgentKey | undefined): Promise<CachedAgentKey> {
    const snapshot = await this.#deps.store.getAgent(agentId);
    if (!snapshot) throw new ApiError('invalid_jwt', 'agent JWT names an unknown agent');
    const fresh = await this.#deps.keys.put(snapshot.agent);
    if (refused?.keyVersion === fresh.keyVersion) throw new ApiError('invalid_jwt', 'JWT signature verification failed');
    await verifySignature(decoded, fresh);
    noteAgent(agentId, fresh.hostId);
    // An agent that can never execute again (revoked, rejected, claimed) is refused by the execute
    // round trip whatever its key: its JWKS is not fetched on its behalf, and its key is not kept,
    // so its next call comes here again rather than to a cached key that would be checked.
    if (FINAL_STATUSES.has(snapshot.agent.status)) {
      this.#deps.keys.invalidate(agentId);
      return fresh;
    }
    return fresh.jwks ? this.#stillPublished(fresh) : fresh;
  }

  /**
   * A key delivered by a JWKS URL verifies only while the URL still publishes it under its kid
   * (protocol §5.1). A cached set answers without waiting on a fetch, so the hot path waits only
   * when the set is past its stale window; a key removed from the JWKS stops verifying at the
   * latest when the cached set it was read from expires (jwks-cache.ts: ttl plus stale window).
   * Anything but "still published" refuses the token: fail closed.
   */
  async #stillPublished(key: CachedAgentKey): Promise<CachedAgentKey> {
    const { url, kid, thumbprint } = key.jwks!;
    const found = await this.#deps.jwks.published(url, kid, thumbprint);
    if (found.kind === 'published') return key;
    if (found.kind === 'removed') throw new ApiError('invalid_jwt', "the agent's key is no longer published at its JWKS URL");
    if (found.kind === 'changed') throw new ApiError('invalid_jwt', "the agent's JWKS URL now publishes another key under its kid; register the agent again");
    throw new ApiError('invalid_jwt', `the agent's JWKS URL could not be read: ${found.reason}`);
  }

  /** Drops a cached key the store says is stale (another instance rotated it). */
  forgetKey(agentId: string): void {
    this.#deps.keys.invalidate(agentId);
  }

  /** How long an agent jti is remembered (lifetime cap plus skew). */
  jtiTtlMs(): number {
    return jtiTtlMs(this.#deps.settings);
  }

  private timeRules() {
    return timeRulesAt(this.#deps.clock.nowMs(), this.#deps.settings);
  }
}

/** A present `iss` must be the agent's host thumbprint (docs/stances.md); an absent one is accepted. */
export function assertIssuer(claims: Record<string, unknown>, hostThumbprint: string): void {
  if (claims.iss !== undefined && claims.iss !== hostThumbprint) {
    throw new ApiError('invalid_jwt', "agent JWT iss does not match the agent's host");
  }
}

/** Agent statuses no request ever leaves (the execute round trip refuses each). */
const FINAL_STATUSES: ReadonlySet<AgentStatus> = new Set<AgentStatus>(['revoked', 'rejected', 'claimed']);

const MAX_CAPABILITY_CLAIM_ITEMS = 256;
/** Agent ids are opaque but plain: no characters that could escape a Redis hash tag. */
const AGENT_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

function parseCapabilityClaim(value: unknown): string[] | null {
  if (value === undefined) return null;
  if (!Array.isArray(value) || value.length > MAX_CAPABILITY_CLAIM_ITEMS || !value.every((v) => typeof v === 'string')) {
    throw new ApiError('invalid_jwt', 'agent JWT capabilities claim must be an array of capability names');
  }
  return value as string[];
}
