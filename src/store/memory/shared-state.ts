// What every role object of one memory store shares (memory-store.ts builds one of each per store):
// the clock and whether the store is closed (MemoryGate), the expiring map that the replay marks,
// the user-code index and people's sessions are each kept in, and the two errors that mean the
// store cannot serve right now (the backend role's isUnavailable answers true for them).

/** What every call of a closed memory store throws (the Redis store's closed connection, here). */
export class MemoryStoreClosedError extends Error {
  constructor() {
    super('the memory store is closed');
    this.name = 'MemoryStoreClosedError';
  }
}

/**
 * The clock and the open state of one memory store. Every role object holds the same one, so closing
 * the store (the backend role's close) closes every role at once, as closing the Redis store's
 * connection makes every command reject whichever role issues it.
 */
export class MemoryGate {
  /** Wall clock (epoch ms), as Redis's own clock would be. */
  readonly now: () => number;
  #closed = false;

  constructor(now: () => number) {
    this.now = now;
  }

  close(): void {
    this.#closed = true;
  }

  /** After close the Redis store's commands reject; this one behaves the same. */
  assertOpen(): void {
    if (this.#closed) throw new MemoryStoreClosedError();
  }
}

/** A bounded map is full of live entries: the store cannot take more right now (a 503, not a bug). */
export class ReplayCacheFullError extends Error {
  constructor(maxRecords: number) {
    super(`the in-memory replay cache holds ${maxRecords} live jtis; refusing rather than forgetting one`);
    this.name = 'ReplayCacheFullError';
  }
}

const MAX_ENTRIES = 100_000;

/**
 * A map whose entries expire as Redis keys with an expiry do; sweeps on write and refuses past
 * MAX_ENTRIES (as an outage) rather than grow without limit.
 */
export class ExpiringMap<V> {
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
