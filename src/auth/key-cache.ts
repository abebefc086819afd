// In-process cache of imported agent keys (DESIGN §2 step 2). Every JWT is fresh, so signatures
// cannot be cached, but the key import and the Redis read that finds the key can. Entries are
// bounded in number and age and dropped when any instance rotates or revokes the agent (pub/sub).
import type { Clock } from '../common/clock.ts';
import type { AgentRecord } from '../domain/types.ts';
import type { KeyImporter, VerifyKey } from './keys.ts';

export type CachedAgentKey = VerifyKey & {
  agentId: string;
  hostId: string;
  keyVersion: number;
  /**
   * For a key delivered by a JWKS URL: where it is published, under which kid, and its thumbprint.
   * The key verifies only while that URL still publishes it (agent-auth.ts checks on every use).
   */
  jwks: { url: string; kid: string; thumbprint: string } | undefined;
};

/** What the cache needs of an agent's record to cache its key. */
export type AgentKeyRecord = Pick<AgentRecord, 'id' | 'hostId' | 'publicJwk' | 'keyVersion' | 'keyThumbprint' | 'jwksUrl'>;

/** What a lookup found: a live entry, none, or one past its TTL (dropped). For metrics and debug lines. */
type KeyCacheLookup = 'hit' | 'absent' | 'expired';

interface Entry {
  value: CachedAgentKey;
  expiresAtMs: number;
}

export class AgentKeyCache {
  private readonly entries = new Map<string, Entry>();
  private readonly maxEntries: number;
  private readonly ttlMs: number;
  private readonly clock: Clock;
  private readonly importer: KeyImporter;
  private readonly onLookup: ((agentId: string, result: KeyCacheLookup) => void) | undefined;

  constructor(options: {
    maxEntries: number; ttlSeconds: number; clock: Clock; importer: KeyImporter;
    /** Told of every lookup (the composition root counts hits and misses, and logs misses at debug). */
    onLookup?: (agentId: string, result: KeyCacheLookup) => void;
  }) {
    this.importer = options.importer;
    this.onLookup = options.onLookup;
    this.maxEntries = options.maxEntries;
    this.ttlMs = options.ttlSeconds * 1000;
    this.clock = options.clock;
  }

  get(agentId: string): CachedAgentKey | undefined {
    const entry = this.entries.get(agentId);
    if (!entry) {
      this.onLookup?.(agentId, 'absent');
      return undefined;
    }
    if (entry.expiresAtMs <= this.clock.nowMs()) {
      this.entries.delete(agentId);
      this.onLookup?.(agentId, 'expired');
      return undefined;
    }
    this.onLookup?.(agentId, 'hit');
    return entry.value;
  }

  /** Imports and caches the agent's key; with a zero-sized cache it only imports. */
  async put(agent: AgentKeyRecord): Promise<CachedAgentKey> {
    const agentId = agent.id;
    // Every entry has the same members (jwks undefined for an inline key): the hot path reads one shape.
    const jwks = agent.jwksUrl === undefined ? undefined : { url: agent.jwksUrl, kid: agent.publicJwk.kid ?? '', thumbprint: agent.keyThumbprint };
    const value: CachedAgentKey = { ...(await this.importer.import(agent.publicJwk)), agentId, hostId: agent.hostId, keyVersion: agent.keyVersion, jwks };
    if (this.maxEntries === 0 || this.ttlMs === 0) return value;
    // Map keeps insertion order, so the first key is the oldest entry: evict it when full.
    if (this.entries.size >= this.maxEntries && !this.entries.has(agentId)) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(agentId, { value, expiresAtMs: this.clock.nowMs() + this.ttlMs });
    return value;
  }

  invalidate(agentId: string): void {
    this.entries.delete(agentId);
  }

  get size(): number {
    return this.entries.size;
  }
}
