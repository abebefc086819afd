// The per-grant circuit of the plugin sandbox (sandbox.ts). A batch of plugin calls that runs past
// PLUGIN_BUDGET_MS costs a worker thread: it is terminated, because nothing else stops synchronous
// code. Without a circuit, an agent whose grant makes such a call (an expensive pattern, say) could
// repeat it at its full rate limit and keep every worker busy dying, and every other agent's plugin
// calls would wait or be refused. So an overrun "trips" each grant whose calls were in the batch:
// for PLUGIN_TRIP_SECONDS that grant's plugin calls are answered as violations at once, without
// reaching a worker. The overrun costs the agent that caused it, never the others.
//
// The table lives in process (each instance trips for what it saw) and is bounded: when it is full
// the entry tripped longest ago is forgotten, so a flood of trips costs memory up to the bound only.
// A trip that ended is remembered until then, so that an overrun soon after it doubles the next one.

/** How many grants the table remembers at most. */
export const MAX_TRIPPED_GRANTS = 10_000;
/** A repeat trip doubles the duration, up to this many times the base duration. */
const MAX_DURATION_FACTOR = 16;
/** The longest a doubled trip may last, whatever the base: a grant is never shut off for days by doubling alone. */
const MAX_DOUBLED_MS = 3_600_000;

interface Trip {
  /** Until when the grant's plugin calls are refused without running. */
  untilMs: number;
  /** How long the last trip lasted: a new overrun within that long after it ended is a repeat. */
  durationMs: number;
}

interface TripTableOptions {
  /** How long one trip lasts (PLUGIN_TRIP_SECONDS in milliseconds). */
  durationMs: number;
  /** The bound on remembered grants (default MAX_TRIPPED_GRANTS). */
  maxEntries?: number;
  /** The clock, for tests; Date.now by default. */
  nowMs?: () => number;
}

export class TripTable {
  readonly #baseMs: number;
  readonly #maxEntries: number;
  readonly #nowMs: () => number;
  /** In the order the grants were last tripped, oldest first: the first entry is the one to forget. */
  readonly #trips = new Map<string, Trip>();

  constructor(options: TripTableOptions) {
    this.#baseMs = options.durationMs;
    this.#maxEntries = Math.max(1, options.maxEntries ?? MAX_TRIPPED_GRANTS);
    this.#nowMs = options.nowMs ?? Date.now;
  }

  /**
   * True while the grant's plugin calls are refused without running. Reading never forgets a trip
   * that ended: an overrun is judged a moment after it happened (sandbox.ts), and the trip it
   * repeats must still be there then. Ended trips go when the bound needs room.
   */
  isTripped(grantId: string): boolean {
    const trip = this.#trips.get(grantId);
    return trip !== undefined && this.#nowMs() < trip.untilMs;
  }

  /**
   * Trips each grant once, however often it is named. A grant tripped again soon after its last
   * trip ended (within that trip's duration) is tripped for twice as long, up to a cap: a grant that
   * overruns every time it is let through costs ever fewer workers. `nowMs` is when the overrun
   * happened (the trip is decided a moment later).
   */
  trip(grantIds: Iterable<string>, nowMs = this.#nowMs()): Array<{ grantId: string; durationMs: number }> {
    const tripped: Array<{ grantId: string; durationMs: number }> = [];
    for (const grantId of new Set(grantIds)) {
      const previous = this.#trips.get(grantId);
      const repeat = previous !== undefined && nowMs < previous.untilMs + previous.durationMs;
      const capMs = Math.max(this.#baseMs, Math.min(this.#baseMs * MAX_DURATION_FACTOR, MAX_DOUBLED_MS));
      const durationMs = repeat ? Math.min(previous.durationMs * 2, capMs) : this.#baseMs;
      // Delete first so the grant moves to the end: the first entry stays the oldest trip.
      this.#trips.delete(grantId);
      while (this.#trips.size >= this.#maxEntries) this.#trips.delete(this.#trips.keys().next().value!);
      this.#trips.set(grantId, { untilMs: nowMs + durationMs, durationMs });
      tripped.push({ grantId, durationMs });
    }
    return tripped;
  }

  /** How many grants the table remembers (tripped now or before). */
  get size(): number {
    return this.#trips.size;
  }
}
