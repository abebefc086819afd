// The store contract's part for the DecisionRecords role (src/store/store.ts), run by storeContract
// (store.contract.ts) on the memory store, Redis and Redis Cluster, as a describe block of its own
// like every other role's: records are kept as the JSON text they were given, read newest first,
// paged by an exclusive cursor with no overlap and no gap, bounded by count, and a read out of its
// bounds is refused rather than served. The round trip that carries records stands with the
// AgentRecords block (store.contract.ts), whose method it is.
import { describe, expect, it } from 'vitest';
import { decisionPages } from '../../src/store/decision-pages.ts';
import { openDecisionStreamReader } from '../../src/store/redis/decision-records.ts';
import { MAX_DECISION_READ, type StoredDecision } from '../../src/store/store.ts';
import type { StoreUnderTest } from './store.contract.ts';

const MAX = 100_000;
const STREAM_ID = /^\d+-\d+$/;

/** A record's JSON text, numbered; non-ASCII so that a byte-for-byte round trip is checked too. */
const record = (n: number) => JSON.stringify({ at: new Date(1_700_000_000_000 + n).toISOString(), entrypoint: 'agentgate/execute', n, note: 'größe ✓' });
const ns = (decisions: StoredDecision[]) => decisions.map((decision) => (JSON.parse(decision.json) as { n: number }).n);

/** Compares two stream ids by position: -1, 0 or 1. */
function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split('-').map(BigInt) as [bigint, bigint];
  if (am !== bm) return am < bm ? -1 : 1;
  return as === bs ? 0 : as < bs ? -1 : 1;
}

export function decisionContract(current: () => StoreUnderTest): void {
  describe('DecisionRecords', () => {
    const store = () => current().store;
    const peer = async () => current().peer?.() ?? store();

    /** Every record the stream holds, newest first, read page by page (bounded). */
    async function readAll(): Promise<StoredDecision[]> {
      const all: StoredDecision[] = [];
      let before: string | undefined;
      for (let page = 0; page < 100; page++) {
        const decisions = await store().readDecisionRecords(MAX_DECISION_READ, before);
        all.push(...decisions);
        if (decisions.length < MAX_DECISION_READ) return all;
        before = decisions.at(-1)!.id;
      }
      throw new Error('the stream did not end within 100 pages');
    }

    it('appended records are read back newest first, as the JSON text given, under strictly increasing ids', async () => {
      expect(await store().appendDecisionRecords([record(1), record(2)], MAX)).toEqual([true, true]);
      expect(await store().appendDecisionRecords([record(3)], MAX)).toEqual([true]);
      const decisions = await store().readDecisionRecords(10);
      expect(ns(decisions)).toEqual([3, 2, 1]);
      expect(decisions.map((decision) => decision.json)).toEqual([record(3), record(2), record(1)]);
      for (const decision of decisions) expect(decision.id).toMatch(STREAM_ID);
      expect(compareIds(decisions[0]!.id, decisions[1]!.id)).toBe(1);
      expect(compareIds(decisions[1]!.id, decisions[2]!.id)).toBe(1);
    });

    it('an empty stream reads as empty, an empty append writes nothing, and a peer reads what another connection appended', async () => {
      expect(await store().readDecisionRecords(10)).toEqual([]);
      expect(await store().appendDecisionRecords([], MAX)).toEqual([]);
      expect(await store().readDecisionRecords(10)).toEqual([]);
      await store().appendDecisionRecords([record(7)], MAX);
      expect(ns(await (await peer()).readDecisionRecords(10))).toEqual([7]);
    });

    it('paging with beforeId gives the next older page: no record twice, none left out', async () => {
      await store().appendDecisionRecords([1, 2, 3, 4, 5, 6, 7].map(record), MAX);
      const first = await store().readDecisionRecords(3);
      expect(ns(first)).toEqual([7, 6, 5]);
      const second = await store().readDecisionRecords(3, first.at(-1)!.id);
      expect(ns(second)).toEqual([4, 3, 2]);
      const third = await store().readDecisionRecords(3, second.at(-1)!.id);
      expect(ns(third)).toEqual([1]);
      expect(await store().readDecisionRecords(3, third[0]!.id)).toEqual([]);
      // The pages together are exactly the whole stream, in order.
      expect([...first, ...second, ...third]).toEqual(await store().readDecisionRecords(10));
    });

    it('a store that can be read from another process says where, as plain data; a reader opened there pages as the store does', async () => {
      await store().appendDecisionRecords([1, 2, 3, 4, 5, 6, 7].map(record), MAX);
      const address = store().decisionStreamAddress();
      if (store().kind === 'memory') {
        // The ring is this process's memory: nothing else can read it.
        expect(address).toBeNull();
        return;
      }
      expect(address).not.toBeNull();
      // Plain data: what a structured clone (the IPC channel's) carries unchanged, no callback in it.
      expect(structuredClone(address)).toEqual(address);
      const reader = await openDecisionStreamReader(address!);
      try {
        const pages: StoredDecision[][] = [];
        for await (const page of decisionPages(reader, 6, 4)) pages.push(page);
        expect(pages.map(ns)).toEqual([[7, 6, 5, 4], [3, 2]]);
        expect(pages.flat()).toEqual(await store().readDecisionRecords(6));
      } finally {
        await reader.close();
      }
    });

    it('beforeId is exclusive and need not name a stored record: past every record reads all, 0-0 reads none', async () => {
      await store().appendDecisionRecords([record(1), record(2)], MAX);
      const all = await store().readDecisionRecords(10);
      expect(ns(await store().readDecisionRecords(10, all[0]!.id))).toEqual([1]);
      expect(ns(await store().readDecisionRecords(10, '18446744073709551615-18446744073709551615'))).toEqual([2, 1]);
      expect(await store().readDecisionRecords(10, '0-0')).toEqual([]);
      expect(await store().readDecisionRecords(10, '1-0')).toEqual([]);
    });

    it('the stream keeps the newest maxRecords and not many more (Redis trims approximately)', async () => {
      const appended = Array.from({ length: 350 }, (_, i) => record(i));
      expect(await store().appendDecisionRecords(appended, 10)).toEqual(appended.map(() => true));
      const kept = await readAll();
      expect(kept.length).toBeGreaterThanOrEqual(10);
      expect(kept.length).toBeLessThanOrEqual(110);
      expect(ns(kept.slice(0, 10))).toEqual([349, 348, 347, 346, 345, 344, 343, 342, 341, 340]);
    });

    it('a read refuses a count outside 1..MAX_DECISION_READ and a cursor that is not a stream id, rather than read other than asked', async () => {
      await store().appendDecisionRecords([record(1)], MAX);
      for (const count of [0, -1, 1.5, Number.NaN, MAX_DECISION_READ + 1]) {
        await expect(store().readDecisionRecords(count)).rejects.toThrow(RangeError);
      }
      const malformed = ['', 'abc', '1', '1-', '-1', '1-2-3', ' 1-0', '1-0 ', '+', '-', '(1-0', '1.5-0', '123456789012345678901-0', '18446744073709551616-0', '0-18446744073709551616'];
      for (const beforeId of malformed) await expect(store().readDecisionRecords(10, beforeId)).rejects.toThrow(RangeError);
      expect(ns(await store().readDecisionRecords(MAX_DECISION_READ))).toEqual([1]);
    });

    it('an append refuses a maxRecords that is not a positive integer', async () => {
      for (const maxRecords of [0, -1, 1.5, Number.NaN]) await expect(store().appendDecisionRecords([record(1)], maxRecords)).rejects.toThrow(/maxRecords/);
      expect(await store().readDecisionRecords(10)).toEqual([]);
    });
  });
}
