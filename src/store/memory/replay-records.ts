// The memory store's replay records (the ReplayRecords role of store.ts): JWT ids, status polls and
// WebAuthn challenges, each remembered until its ttl passes, as the Redis store's SET PX NX keys are.
// Jtis are kept in ReplayCache: a bounded map pruned lazily, so memory stays bounded under any load.
// When the bound is reached and nothing has expired, recording refuses (throws) instead of
// forgetting a live jti, which would re-open a replay window.
import { assertTaggable, normalizeTtlMs } from '../checks.ts';
import type { ReplayRecords } from '../store.ts';
import { ExpiringMap, ReplayCacheFullError, type MemoryGate } from './shared-state.ts';

const DEFAULT_MAX_RECORDS = 1_000_000;
/** Entries checked at the front of the map on every insert; jtis with equal ttls expire in order. */
const PRUNE_STEP = 4;

/**
 * Jtis (key -> expiry). Named for what it holds, not ReplayRecords, which is the role of store.ts
 * that MemoryReplayRecords below implements with it.
 */
export class ReplayCache {
  readonly #now: () => number;
  readonly #maxRecords: number;
  /** key -> expiry (wall-clock ms). Map iteration is insertion order, roughly expiry order. */
  readonly #expiresAtMs = new Map<string, number>();

  constructor(now: () => number, maxRecords = DEFAULT_MAX_RECORDS) {
    this.#now = now;
    this.#maxRecords = maxRecords;
  }

  /** Records the key for ttlMs; false when it is already recorded and not yet expired. */
  record(key: string, ttlMs: number): boolean {
    const nowMs = this.#now();
    this.#pruneFront(nowMs);
    const expiresAtMs = this.#expiresAtMs.get(key);
    if (expiresAtMs !== undefined && expiresAtMs > nowMs) return false;
    // Re-inserting moves the key to the back, keeping the map roughly ordered by expiry.
    this.#expiresAtMs.delete(key);
    if (this.#expiresAtMs.size >= this.#maxRecords) this.#pruneAll(nowMs);
    if (this.#expiresAtMs.size >= this.#maxRecords) {
      throw new ReplayCacheFullError(this.#maxRecords);
    }
    this.#expiresAtMs.set(key, nowMs + ttlMs);
    return true;
  }

  get size(): number {
    return this.#expiresAtMs.size;
  }

  /** Cheap, constant work per insert: drop expired entries from the front of the map. */
  #pruneFront(nowMs: number): void {
    let checked = 0;
    for (const [key, expiresAtMs] of this.#expiresAtMs) {
      if (checked++ >= PRUNE_STEP || expiresAtMs > nowMs) return;
      this.#expiresAtMs.delete(key);
    }
  }

  /** A full sweep, only when the bound is reached (entries with long ttls can shield short ones). */
  #pruneAll(nowMs: number): void {
    for (const [key, expiresAtMs] of this.#expiresAtMs) {
      if (expiresAtMs <= nowMs) this.#expiresAtMs.delete(key);
    }
  }
}

/** One key per (agent, jti), shared by executeRoundTrip and recordAgentJti. */
export function agentJtiKey(agentId: string, jti: string): string {
  return JSON.stringify(['agent', agentId, jti]);
}

/**
 * The ReplayRecords role. Its jti cache is not its own: the store hands the same one to the agent
 * records (agent-records.ts), because executeRoundTrip records the agent's jti in the same step
 * that reads the agent, and one jti must be accepted once across both.
 */
export class MemoryReplayRecords implements ReplayRecords {
  readonly #gate: MemoryGate;
  readonly #jtis: ReplayCache;
  readonly #polls: ExpiringMap<true>;
  readonly #usedChallenges: ExpiringMap<true>;

  constructor(gate: MemoryGate, jtis: ReplayCache) {
    this.#gate = gate;
    this.#jtis = jtis;
    this.#polls = new ExpiringMap(gate.now);
    this.#usedChallenges = new ExpiringMap(gate.now);
  }

  async recordAgentJti(agentId: string, jti: string, ttlMs: number): Promise<boolean> {
    this.#gate.assertOpen();
    assertTaggable('agent id', agentId);
    return this.#jtis.record(agentJtiKey(agentId, jti), normalizeTtlMs(ttlMs));
  }

  async recordHostJti(hostThumbprint: string, jti: string, ttlMs: number): Promise<boolean> {
    this.#gate.assertOpen();
    assertTaggable('host thumbprint', hostThumbprint);
    return this.#jtis.record(JSON.stringify(['host', hostThumbprint, jti]), normalizeTtlMs(ttlMs));
  }

  async recordStatusPoll(agentId: string, windowMs: number): Promise<boolean> {
    return this.#markOnce(this.#polls, agentId, windowMs);
  }

  async useChallenge(challengeKey: string, ttlMs: number): Promise<boolean> {
    return this.#markOnce(this.#usedChallenges, challengeKey, ttlMs);
  }

  /** True, and marked for ttlMs, unless the key is marked already (as SET PX NX answers). */
  #markOnce(marks: ExpiringMap<true>, key: string, ttlMs: number): boolean {
    this.#gate.assertOpen();
    if (marks.get(key)) return false;
    marks.set(key, true, this.#gate.now() + normalizeTtlMs(ttlMs));
    return true;
  }
}
