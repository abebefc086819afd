// The memory store's short-lived records (as redis/short-lived.ts keeps them in Redis): the
// approval page's user-code index, people's sessions, status-poll marks and shared secrets. Each
// entry expires as its Redis key would, and the maps are bounded: expired entries are swept on
// writes, and a full map refuses (as an outage) rather than grow without limit.
import { randomBytes } from 'node:crypto';
import { normalizeTtlMs } from '../checks.ts';
import { ReplayCacheFullError } from './replay-records.ts';

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

export class MemoryShortLived {
  readonly #now: () => number;
  readonly #userCodes: ExpiringMap<string>;
  readonly #sessions: ExpiringMap<string>;
  readonly #polls: ExpiringMap<true>;
  readonly #secrets = new Map<string, string>();

  constructor(now: () => number) {
    this.#now = now;
    this.#userCodes = new ExpiringMap(now);
    this.#sessions = new ExpiringMap(now);
    this.#polls = new ExpiringMap(now);
  }

  indexUserCode(lookupKey: string, agentId: string, untilMs: number): void {
    this.#userCodes.set(lookupKey, agentId, untilMs);
  }

  findAgentIdByUserCode(lookupKey: string): string | null {
    return this.#userCodes.get(lookupKey);
  }

  sharedSecret(name: string): string {
    let secret = this.#secrets.get(name);
    if (secret === undefined) {
      secret = randomBytes(32).toString('base64url');
      this.#secrets.set(name, secret);
    }
    return secret;
  }

  recordStatusPoll(agentId: string, windowMs: number): boolean {
    if (this.#polls.get(agentId)) return false;
    this.#polls.set(agentId, true, this.#now() + normalizeTtlMs(windowMs));
    return true;
  }

  saveSession(key: string, json: string, ttlMs: number): void {
    this.#sessions.set(key, json, this.#now() + normalizeTtlMs(ttlMs));
  }

  loadSession(key: string): string | null {
    return this.#sessions.get(key);
  }

  deleteSession(key: string): void {
    this.#sessions.delete(key);
  }
}
