// The memory store's records outside agents and hosts (as redis/side-records.ts keeps them): the
// approval page's user-code index, people's sessions, status-poll marks and shared secrets. Each
// entry expires as its Redis key would, and the maps are bounded: expired entries are swept on
// writes, and a full map refuses (as an outage) rather than grow without limit.
import { randomBytes } from 'node:crypto';
import { normalizeTtlMs } from '../checks.ts';
import { MemoryAuditRecords, MemoryStoreClosedError } from './audit-ring.ts';
import { ReplayCacheFullError } from './replay-records.ts';
import type { PendingKind } from '../store.ts';

export { MemoryStoreClosedError };

const MAX_ENTRIES = 100_000;

/** A map whose entries expire; sweeps on write and refuses past MAX_ENTRIES. */
class ExpiringMap<V> {
  readonly #entries = new Map<string, { value: V; untilMs: number }>();
  readonly #now: () => number;

  constructor(now: () => number) {
    this.#now = now;
  }

  get(key: string): V | null {
    const entry = this.#entries.get(key);
    if (!entry) return null;
    if (entry.untilMs <= this.#now()) {
      this.#entries.delete(key);
      return null;
    }
    return entry.value;
  }

  set(key: string, value: V, untilMs: number): void {
    if (!this.#entries.has(key) && this.#entries.size >= MAX_ENTRIES) {
      const nowMs = this.#now();
      for (const [k, entry] of this.#entries) if (entry.untilMs <= nowMs) this.#entries.delete(k);
      if (this.#entries.size >= MAX_ENTRIES) throw new ReplayCacheFullError(MAX_ENTRIES);
    }
    this.#entries.set(key, { value, untilMs });
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }
}

/**
 * The memory store's records outside agents and hosts, as the Redis store keeps them in
 * redis/side-records.ts. MemoryStore extends it, so these methods need no forwarding; it extends the
 * audit ring (audit-ring.ts), which holds the closed flag every method checks.
 */
export class MemorySideRecords extends MemoryAuditRecords {
  readonly #now: () => number;
  readonly #userCodes: ExpiringMap<string>;
  readonly #sessions: ExpiringMap<string>;
  readonly #polls: ExpiringMap<true>;
  readonly #usedChallenges: ExpiringMap<true>;
  readonly #secrets = new Map<string, string>();
  /** People's host links and records (not short-lived: kept as long as the process). */
  readonly #personHosts = new Map<string, Set<string>>();
  /** Each person's passkeys: credential id -> JSON. */
  readonly #passkeys = new Map<string, Map<string, string>>();
  /** Agents and hosts waiting for approval, by creation time (for the clean-up job). */
  readonly #pendingSince: Record<PendingKind, Map<string, number>> = { agent: new Map(), host: new Map(), approval: new Map() };

  constructor(now: () => number) {
    super(now);
    this.#now = now;
    this.#userCodes = new ExpiringMap(now);
    this.#sessions = new ExpiringMap(now);
    this.#polls = new ExpiringMap(now);
    this.#usedChallenges = new ExpiringMap(now);
  }

  async indexUserCode(lookupKey: string, agentId: string, untilMs: number): Promise<void> {
    this.assertOpen();
    this.#userCodes.set(lookupKey, agentId, untilMs);
  }

  async findAgentIdByUserCode(lookupKey: string): Promise<string | null> {
    this.assertOpen();
    return this.#userCodes.get(lookupKey);
  }

  async sharedSecret(name: string): Promise<string> {
    this.assertOpen();
    let secret = this.#secrets.get(name);
    if (secret === undefined) {
      secret = randomBytes(32).toString('base64url');
      this.#secrets.set(name, secret);
    }
    return secret;
  }

  async useChallenge(challengeKey: string, ttlMs: number): Promise<boolean> {
    this.assertOpen();
    if (this.#usedChallenges.get(challengeKey)) return false;
    this.#usedChallenges.set(challengeKey, true, this.#now() + normalizeTtlMs(ttlMs));
    return true;
  }

  async recordStatusPoll(agentId: string, windowMs: number): Promise<boolean> {
    this.assertOpen();
    if (this.#polls.get(agentId)) return false;
    this.#polls.set(agentId, true, this.#now() + normalizeTtlMs(windowMs));
    return true;
  }

  async saveSession(key: string, json: string, ttlMs: number): Promise<void> {
    this.assertOpen();
    this.#sessions.set(key, json, this.#now() + normalizeTtlMs(ttlMs));
  }

  async loadSession(key: string): Promise<string | null> {
    this.assertOpen();
    return this.#sessions.get(key);
  }

  async deleteSession(key: string): Promise<void> {
    this.assertOpen();
    this.#sessions.delete(key);
  }

  async trackPending(kind: PendingKind, id: string, atMs: number): Promise<void> {
    this.assertOpen();
    this.#pendingSince[kind].set(id, atMs);
  }

  async untrackPending(kind: PendingKind, id: string): Promise<void> {
    this.assertOpen();
    this.#pendingSince[kind].delete(id);
  }

  async listStalePending(kind: PendingKind, beforeMs: number, limit: number): Promise<string[]> {
    this.assertOpen();
    return [...this.#pendingSince[kind]].filter(([, at]) => at < beforeMs).sort((a, b) => a[1] - b[1]).slice(0, limit).map(([id]) => id);
  }

  async addPersonHost(personId: string, hostId: string): Promise<void> {
    this.assertOpen();
    const hosts = this.#personHosts.get(personId) ?? new Set<string>();
    hosts.add(hostId);
    this.#personHosts.set(personId, hosts);
  }

  async removePersonHost(personId: string, hostId: string): Promise<void> {
    this.assertOpen();
    this.#personHosts.get(personId)?.delete(hostId);
  }

  async listPersonHostIds(personId: string): Promise<string[]> {
    this.assertOpen();
    return [...(this.#personHosts.get(personId) ?? [])].sort();
  }

  async listPasskeys(personId: string): Promise<Array<{ id: string; json: string }>> {
    this.assertOpen();
    return [...(this.#passkeys.get(personId) ?? new Map<string, string>())].map(([id, json]) => ({ id, json }));
  }

  async addPasskey(personId: string, passkeyId: string, json: string, max: number): Promise<'added' | 'exists' | 'full'> {
    this.assertOpen();
    const held = this.#passkeys.get(personId) ?? new Map<string, string>();
    if (held.has(passkeyId)) return 'exists';
    if (held.size >= max) return 'full';
    held.set(passkeyId, json);
    this.#passkeys.set(personId, held);
    return 'added';
  }

  async updatePasskey(personId: string, passkeyId: string, json: string): Promise<boolean> {
    this.assertOpen();
    const held = this.#passkeys.get(personId);
    if (!held?.has(passkeyId)) return false;
    held.set(passkeyId, json);
    return true;
  }

  async removePasskey(personId: string, passkeyId: string): Promise<boolean> {
    this.assertOpen();
    return this.#passkeys.get(personId)?.delete(passkeyId) ?? false;
  }
}
