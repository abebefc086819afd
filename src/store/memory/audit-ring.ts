// The memory store's audit trail (the AuditRecords role of store.ts), with the Redis stream's
// semantics: a ring of events bounded by count and, when asked, by age, ordered by `<ms>-<sequence>`
// ids, read newest first, and forwarded through one in-process "consumer group" (a cursor past the
// last event handed out, plus the events handed out and not yet acknowledged), so the same
// forwarder code runs on either store. It shares nothing with the other role objects but the gate
// (shared-state.ts): the clock, and whether the store is closed.
import { parseAuditId, type AuditEvent, type AuditRecord } from '../../audit/events.ts';
import { MAX_AUDIT_READ, type AuditClaim, type AuditRecords } from '../store.ts';
import type { MemoryGate } from './shared-state.ts';

interface Entry {
  id: string;
  ms: number;
  seq: number;
  /** The event as JSON: a string is a fraction of the memory a parsed object takes. */
  json: string;
}

interface Held {
  consumer: string;
  /** When it was handed out or renewed (-Infinity: given back, anyone may take it). */
  heldSinceMs: number;
}

/** Dropped entries at the front are cut off the array once they are this many and half of it. */
const COMPACT_AFTER = 1024;

const before = (a: { ms: number; seq: number }, b: { ms: number; seq: number }) => a.ms < b.ms || (a.ms === b.ms && a.seq < b.seq);

export class MemoryAuditRecords implements AuditRecords {
  readonly #gate: MemoryGate;
  readonly #now: () => number;
  /** Oldest first; entries before `#start` were trimmed and are cut off now and then. */
  #entries: Entry[] = [];
  #start = 0;
  #last = { ms: 0, seq: -1 };
  /** The newest event handed to a forwarder (null: none yet, start from the oldest kept). */
  #cursor: { ms: number; seq: number } | null = null;
  readonly #held = new Map<string, Held>();

  constructor(gate: MemoryGate) {
    this.#gate = gate;
    this.#now = gate.now;
  }

  /** Keeps the newest `maxEvents`, and with `maxAgeMs` drops those appended longer ago (by their ids' time). */
  async appendAuditEvents(records: readonly AuditRecord[], maxEvents: number, maxAgeMs?: number): Promise<boolean[]> {
    this.#gate.assertOpen();
    if (!Number.isSafeInteger(maxEvents) || maxEvents < 1) throw new Error(`maxEvents must be a positive integer, got ${maxEvents}`);
    if (maxAgeMs !== undefined && (!Number.isSafeInteger(maxAgeMs) || maxAgeMs < 1)) throw new Error(`maxAgeMs must be a positive integer, got ${maxAgeMs}`);
    for (const record of records) {
      // As Redis makes stream ids: the clock's ms, or the last id's ms when the clock went back.
      const nowMs = Math.max(Math.trunc(this.#now()), this.#last.ms);
      this.#last = { ms: nowMs, seq: nowMs === this.#last.ms ? this.#last.seq + 1 : 0 };
      this.#entries.push({ id: `${this.#last.ms}-${this.#last.seq}`, ...this.#last, json: JSON.stringify(record) });
    }
    while (this.#entries.length - this.#start > maxEvents) this.#held.delete(this.#entries[this.#start++]!.id);
    if (maxAgeMs !== undefined) {
      // As XTRIM MINID: every event whose id's time is before the cutoff goes, oldest first.
      const cutoffMs = Math.trunc(this.#now()) - maxAgeMs;
      while (this.#start < this.#entries.length && this.#entries[this.#start]!.ms < cutoffMs) this.#held.delete(this.#entries[this.#start++]!.id);
    }
    if (this.#start >= COMPACT_AFTER && this.#start * 2 >= this.#entries.length) {
      this.#entries = this.#entries.slice(this.#start);
      this.#start = 0;
    }
    return records.map(() => true);
  }

  async readAuditEvents(beforeId: string | null, count: number): Promise<AuditEvent[]> {
    this.#gate.assertOpen();
    boundedCount(count);
    let end = this.#entries.length;
    if (beforeId !== null) {
      const bound = position(beforeId);
      end = this.#firstNotBefore(bound);
    }
    const events: AuditEvent[] = [];
    for (let i = end - 1; i >= this.#start && events.length < count; i--) events.push(decode(this.#entries[i]!));
    return events;
  }

  async claimAuditEvents(claim: AuditClaim): Promise<AuditEvent[]> {
    this.#gate.assertOpen();
    boundedCount(claim.count);
    const nowMs = this.#now();
    // Abandoned first, oldest first, as XAUTOCLAIM hands them over.
    const abandoned = [...this.#held].filter(([, held]) => nowMs - held.heldSinceMs >= claim.reclaimIdleMs).map(([id]) => id);
    if (abandoned.length > 0) {
      const ids = abandoned.map(position).sort((a, b) => (before(a, b) ? -1 : 1)).slice(0, claim.count);
      return ids.map((at) => {
        const entry = this.#entries[this.#firstNotBefore(at)]!;
        this.#held.set(entry.id, { consumer: claim.consumer, heldSinceMs: nowMs });
        return decode(entry);
      });
    }
    const from = this.#cursor === null ? this.#start : this.#firstNotBefore({ ms: this.#cursor.ms, seq: this.#cursor.seq + 1 });
    const taken = this.#entries.slice(from, from + claim.count);
    for (const entry of taken) this.#held.set(entry.id, { consumer: claim.consumer, heldSinceMs: nowMs });
    const newest = taken.at(-1);
    if (newest) this.#cursor = { ms: newest.ms, seq: newest.seq };
    return taken.map(decode);
  }

  async acknowledgeAuditEvents(ids: readonly string[]): Promise<void> {
    this.#gate.assertOpen();
    for (const id of ids) this.#held.delete(id);
  }

  async renewAuditClaims(consumer: string, ids: readonly string[]): Promise<string[]> {
    this.#gate.assertOpen();
    return this.#hold(consumer, ids, this.#now());
  }

  async releaseAuditClaims(consumer: string, ids: readonly string[]): Promise<void> {
    this.#gate.assertOpen();
    this.#hold(consumer, ids, Number.NEGATIVE_INFINITY);
  }

  /** The ring keeps no registry of forwarders (what one holds is kept by event), so none to forget. */
  async forgetIdleAuditConsumers(_idleMs: number): Promise<number> {
    this.#gate.assertOpen();
    return 0;
  }

  #hold(consumer: string, ids: readonly string[], heldSinceMs: number): string[] {
    if (ids.length > MAX_AUDIT_READ) throw new Error(`at most ${MAX_AUDIT_READ} audit ids at once`);
    const kept = ids.filter((id) => this.#held.get(id)?.consumer === consumer);
    for (const id of kept) this.#held.set(id, { consumer, heldSinceMs });
    return kept;
  }

  /** Index of the first kept entry at or after `at` (binary search: ids only grow). */
  #firstNotBefore(at: { ms: number; seq: number }): number {
    let low = this.#start;
    let high = this.#entries.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (before(this.#entries[middle]!, at)) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}

function position(id: string): { ms: number; seq: number } {
  const parsed = parseAuditId(id);
  if (!parsed) throw new Error(`not an audit event id: ${id}`);
  return { ms: Number(parsed[0]), seq: Number(parsed[1]) };
}

function boundedCount(count: number): void {
  if (!Number.isSafeInteger(count) || count < 1 || count > MAX_AUDIT_READ) throw new Error(`count must be 1-${MAX_AUDIT_READ}, got ${count}`);
}

function decode(entry: Entry): AuditEvent {
  return { ...(JSON.parse(entry.json) as AuditRecord), id: entry.id };
}
