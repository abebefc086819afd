// The memory store's recorded policy decisions (the DecisionRecords role of store.ts), with the
// Redis stream's semantics: a ring of JSON texts bounded by count, ordered by `<ms>-<sequence>` ids
// made as Redis makes stream ids, read newest first before a cursor. It shares nothing with the
// other role objects but the gate (shared-state.ts): the clock, and whether the store is closed.
import { assertMaxRecords, decisionReadBounds } from '../checks.ts';
import type { DecisionRecords, StoredDecision } from '../store.ts';
import type { MemoryGate } from './shared-state.ts';

interface Entry {
  id: string;
  ms: number;
  seq: number;
  json: string;
}

/** Dropped entries at the front are cut off the array once they are this many and half of it. */
const COMPACT_AFTER = 1024;

export class MemoryDecisionRecords implements DecisionRecords {
  readonly #gate: MemoryGate;
  /** Oldest first; entries before `#start` were trimmed and are cut off now and then. */
  #entries: Entry[] = [];
  #start = 0;
  #last = { ms: 0, seq: -1 };

  constructor(gate: MemoryGate) {
    this.#gate = gate;
  }

  /** Keeps exactly the newest `maxRecords` (Redis keeps about as many, never fewer). */
  async appendDecisionRecords(records: readonly string[], maxRecords: number): Promise<boolean[]> {
    this.#gate.assertOpen();
    assertMaxRecords(maxRecords);
    for (const json of records) {
      // As Redis makes stream ids: the clock's ms, or the last id's ms when the clock went back.
      const nowMs = Math.max(Math.trunc(this.#gate.now()), this.#last.ms);
      this.#last = { ms: nowMs, seq: nowMs === this.#last.ms ? this.#last.seq + 1 : 0 };
      this.#entries.push({ id: `${this.#last.ms}-${this.#last.seq}`, ...this.#last, json });
    }
    this.#start = Math.max(this.#start, this.#entries.length - maxRecords);
    if (this.#start >= COMPACT_AFTER && this.#start * 2 >= this.#entries.length) {
      this.#entries = this.#entries.slice(this.#start);
      this.#start = 0;
    }
    return records.map(() => true);
  }

  /** The ring lives in this process's memory: nothing else can read it. */
  decisionStreamAddress(): null {
    return null;
  }

  async readDecisionRecords(count: number, beforeId?: string): Promise<StoredDecision[]> {
    this.#gate.assertOpen();
    const before = decisionReadBounds(count, beforeId);
    const end = before === null ? this.#entries.length : this.#firstNotBefore(before);
    const decisions: StoredDecision[] = [];
    for (let i = end - 1; i >= this.#start && decisions.length < count; i--) {
      const entry = this.#entries[i]!;
      decisions.push({ id: entry.id, json: entry.json });
    }
    return decisions;
  }

  /**
   * Index of the first kept entry at or after `at` (binary search: ids only grow). Compared as
   * bigints, since a cursor may name a time past what a number holds exactly.
   */
  #firstNotBefore(at: { ms: bigint; seq: bigint }): number {
    let low = this.#start;
    let high = this.#entries.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      const entry = this.#entries[middle]!;
      const ms = BigInt(entry.ms);
      if (ms < at.ms || (ms === at.ms && BigInt(entry.seq) < at.seq)) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}
