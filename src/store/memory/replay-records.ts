// Replay records (jti -> expiry) for the memory store: a bounded map pruned lazily, so memory stays
// bounded under any load. When the bound is reached and nothing has expired, recording refuses
// (throws) instead of forgetting a live jti, which would re-open a replay window.

const DEFAULT_MAX_RECORDS = 1_000_000;
/** Entries checked at the front of the map on every insert; jtis with equal ttls expire in order. */
const PRUNE_STEP = 4;

/** The replay cache is full of live jtis: the store cannot take more right now (a 503, not a bug). */
export class ReplayCacheFullError extends Error {
  constructor(maxRecords: number) {
    super(`the in-memory replay cache holds ${maxRecords} live jtis; refusing rather than forgetting one`);
    this.name = 'ReplayCacheFullError';
  }
}

export class ReplayRecords {
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
