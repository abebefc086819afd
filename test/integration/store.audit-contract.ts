// The store contract's part for the AuditRecords role (src/store/store.ts), run by storeContract
// (store.contract.ts) on the memory store, Redis and Redis Cluster, as a describe block of its own
// like every other role's: the trail is ordered and bounded by count and by age, reads page newest
// first by cursor, and the forwarding group hands each event to one forwarder at a time, takes
// abandoned ones over, and never hands out an acknowledged one again.
import { describe, expect, it } from 'vitest';
import { AUDIT_ID_PATTERN, compareAuditIds, type AuditEvent, type AuditRecord } from '../../src/audit/events.ts';
import type { Store } from '../../src/store/store.ts';
import type { StoreUnderTest } from './store.contract.ts';

const MAX = 100_000;

function record(n: number, overrides: Partial<AuditRecord> = {}): AuditRecord {
  return { at: new Date(1_700_000_000_000 + n).toISOString(), type: 'execute.allowed', actor: 'agent', agent_id: `agt_${n}`, n, capabilities: ['echo'], ...overrides };
}

const ns = (events: AuditEvent[]) => events.map((event) => event.n);
const idsOf = (events: AuditEvent[]) => events.map((event) => event.id);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The age bound the trimming tests pass (maxAgeMs). An event a test appends after its sleep must stay
 * younger than this across the few store calls that follow, which a busy machine can stretch well
 * past the 200 ms this once was; the events before the sleep are older (time passing is the
 * behaviour under test).
 */
const AGE_MS = 1000;
const PAST_AGE_MS = AGE_MS + 100;

/** Every event the trail holds, newest first, read page by page (bounded). */
async function readAll(store: Store): Promise<AuditEvent[]> {
  const all: AuditEvent[] = [];
  let before: string | null = null;
  for (let page = 0; page < 100; page++) {
    const events = await store.readAuditEvents(before, 1000);
    all.push(...events);
    if (events.length < 1000) return all;
    before = events.at(-1)!.id;
  }
  throw new Error('the trail did not end within 100 pages');
}

export function auditContract(current: () => StoreUnderTest): void {
  describe('AuditRecords', () => {
    const store = () => current().store;
    const peer = async () => current().peer?.() ?? store();

    it('appended events are read back newest first, as they were recorded, under increasing ids', async () => {
      expect(await store().appendAuditEvents([record(1), record(2)], MAX)).toEqual([true, true]);
      await store().appendAuditEvents([record(3)], MAX);
      const events = await store().readAuditEvents(null, 10);
      expect(ns(events)).toEqual([3, 2, 1]);
      expect(events[2]).toEqual({ ...record(1), id: events[2]!.id });
      for (const event of events) expect(event.id).toMatch(AUDIT_ID_PATTERN);
      expect(compareAuditIds(events[0]!.id, events[1]!.id)).toBe(1);
      expect(compareAuditIds(events[1]!.id, events[2]!.id)).toBe(1);
    });

    it('a read goes on strictly before its cursor, and count bounds it', async () => {
      await store().appendAuditEvents([1, 2, 3, 4, 5].map((n) => record(n)), MAX);
      const first = await store().readAuditEvents(null, 2);
      expect(ns(first)).toEqual([5, 4]);
      const second = await store().readAuditEvents(first[1]!.id, 2);
      expect(ns(second)).toEqual([3, 2]);
      const third = await store().readAuditEvents(second[1]!.id, 10);
      expect(ns(third)).toEqual([1]);
      expect(await store().readAuditEvents(third[0]!.id, 10)).toEqual([]);
    });

    it('an empty trail reads as empty, and a peer reads what another connection appended', async () => {
      expect(await store().readAuditEvents(null, 10)).toEqual([]);
      await store().appendAuditEvents([record(7)], MAX);
      expect(ns(await (await peer()).readAuditEvents(null, 10))).toEqual([7]);
    });

    it('the trail keeps the newest maxEvents and not many more (Redis trims approximately)', async () => {
      const appended = Array.from({ length: 350 }, (_, i) => record(i));
      await store().appendAuditEvents(appended, 10);
      const kept = await readAll(store());
      expect(kept.length).toBeGreaterThanOrEqual(10);
      expect(kept.length).toBeLessThanOrEqual(110);
      expect(ns(kept.slice(0, 10))).toEqual([349, 348, 347, 346, 345, 344, 343, 342, 341, 340]);
    });

    it('with maxAgeMs, an append drops every event appended longer ago than that, however few the trail holds', async () => {
      await store().appendAuditEvents([record(1), record(2)], MAX);
      await sleep(PAST_AGE_MS);
      await store().appendAuditEvents([record(3)], MAX);
      // Without an age nothing is trimmed by age.
      expect(ns(await readAll(store()))).toEqual([3, 2, 1]);
      await store().appendAuditEvents([record(4), record(5)], MAX, AGE_MS);
      expect(ns(await readAll(store()))).toEqual([5, 4, 3]);
      await store().appendAuditEvents([record(6)], MAX, AGE_MS);
      expect(ns(await readAll(store()))).toEqual([6, 5, 4, 3]);
      expect(ns(await (await peer()).readAuditEvents(null, 10))).toEqual([6, 5, 4, 3]);
    });

    it('an append of no events with maxAgeMs only trims by age (the writer trims an idle trail so)', async () => {
      await store().appendAuditEvents([record(1), record(2)], MAX);
      await sleep(PAST_AGE_MS);
      await store().appendAuditEvents([record(3)], MAX);
      expect(await store().appendAuditEvents([], MAX, AGE_MS)).toEqual([]);
      expect(ns(await readAll(store()))).toEqual([3]);
      expect(await store().appendAuditEvents([], MAX)).toEqual([]);
      expect(ns(await readAll(store()))).toEqual([3]);
    });

    it('the count bound and the age bound apply together', async () => {
      await store().appendAuditEvents([record(1)], MAX);
      await sleep(250);
      await store().appendAuditEvents(Array.from({ length: 350 }, (_, i) => record(100 + i)), 10, 200);
      const kept = await readAll(store());
      expect(ns(kept)).not.toContain(1);
      expect(kept.length).toBeGreaterThanOrEqual(10);
      expect(kept.length).toBeLessThanOrEqual(110);
    });

    it('a trimmed-by-age event held by a forwarder is not handed out again', async () => {
      await store().appendAuditEvents([record(1)], MAX);
      const [held] = await store().claimAuditEvents({ consumer: 'a', count: 1, reclaimIdleMs: 60_000 });
      await sleep(250);
      await store().appendAuditEvents([], MAX, 200);
      const taken = await store().claimAuditEvents({ consumer: 'b', count: 1000, reclaimIdleMs: 0 });
      expect(idsOf(taken)).not.toContain(held!.id);
    });

    it('the forwarding group hands each event to one forwarder, and never again once acknowledged', async () => {
      await store().appendAuditEvents([1, 2, 3].map((n) => record(n)), MAX);
      const other = await peer();
      const a = await store().claimAuditEvents({ consumer: 'a', count: 2, reclaimIdleMs: 60_000 });
      const b = await other.claimAuditEvents({ consumer: 'b', count: 10, reclaimIdleMs: 60_000 });
      expect(ns(a)).toEqual([1, 2]);
      expect(ns(b)).toEqual([3]);
      expect(a[0]).toEqual({ ...record(1), id: a[0]!.id });
      expect(await store().claimAuditEvents({ consumer: 'a', count: 10, reclaimIdleMs: 60_000 })).toEqual([]);
      await store().acknowledgeAuditEvents(idsOf(a));
      await other.acknowledgeAuditEvents(idsOf(b));
      expect(await other.claimAuditEvents({ consumer: 'c', count: 10, reclaimIdleMs: 0 })).toEqual([]);
      await store().appendAuditEvents([record(4)], MAX);
      expect(ns(await other.claimAuditEvents({ consumer: 'c', count: 10, reclaimIdleMs: 0 }))).toEqual([4]);
    });

    it('events a forwarder held too long without renewing are taken over; renewing keeps only what is still its own', async () => {
      await store().appendAuditEvents([1, 2].map((n) => record(n)), MAX);
      const held = await store().claimAuditEvents({ consumer: 'a', count: 10, reclaimIdleMs: 60_000 });
      expect(ns(held)).toEqual([1, 2]);
      expect(await store().renewAuditClaims('a', idsOf(held))).toEqual(idsOf(held));
      expect(await store().claimAuditEvents({ consumer: 'b', count: 10, reclaimIdleMs: 60_000 })).toEqual([]);
      await sleep(80);
      const taken = await store().claimAuditEvents({ consumer: 'b', count: 10, reclaimIdleMs: 50 });
      expect(ns(taken)).toEqual([1, 2]);
      expect(await store().renewAuditClaims('a', idsOf(held))).toEqual([]);
      expect(await store().renewAuditClaims('b', idsOf(held))).toEqual(idsOf(held));
    });

    it('events given back are taken over at once, and only their holder can give them back', async () => {
      await store().appendAuditEvents([1, 2].map((n) => record(n)), MAX);
      const held = await store().claimAuditEvents({ consumer: 'a', count: 10, reclaimIdleMs: 60_000 });
      await store().releaseAuditClaims('b', idsOf(held));
      expect(await store().claimAuditEvents({ consumer: 'b', count: 10, reclaimIdleMs: 60_000 })).toEqual([]);
      await store().releaseAuditClaims('a', idsOf(held));
      const other = await peer();
      expect(ns(await other.claimAuditEvents({ consumer: 'b', count: 10, reclaimIdleMs: 60_000 }))).toEqual([1, 2]);
    });

    it('an event trimmed away while held is not handed out again', async () => {
      await store().appendAuditEvents([record(1)], MAX);
      const [held] = await store().claimAuditEvents({ consumer: 'a', count: 1, reclaimIdleMs: 60_000 });
      await store().appendAuditEvents(Array.from({ length: 400 }, (_, i) => record(100 + i)), 10);
      const kept = await readAll(store());
      expect(idsOf(kept)).not.toContain(held!.id);
      const taken = await store().claimAuditEvents({ consumer: 'b', count: 1000, reclaimIdleMs: 0 });
      expect(idsOf(taken)).not.toContain(held!.id);
    });

    it('forgetting idle forwarders never loses an event one of them holds', async () => {
      await store().appendAuditEvents([1, 2].map((n) => record(n)), MAX);
      const done = await store().claimAuditEvents({ consumer: 'done', count: 1, reclaimIdleMs: 60_000 });
      await store().acknowledgeAuditEvents(idsOf(done));
      const held = await store().claimAuditEvents({ consumer: 'holding', count: 1, reclaimIdleMs: 60_000 });
      expect(ns(held)).toEqual([2]);
      await sleep(80);
      const forgotten = await store().forgetIdleAuditConsumers(50);
      expect(forgotten).toBeLessThanOrEqual(1);
      if (store().kind === 'redis') expect(forgotten).toBe(1);
      expect(ns(await store().claimAuditEvents({ consumer: 'next', count: 10, reclaimIdleMs: 50 }))).toEqual([2]);
      expect(await store().forgetIdleAuditConsumers(60_000)).toBe(0);
    });

    it('refuses a count or maxEvents outside its bounds rather than read or trim without limit', async () => {
      await expect(store().readAuditEvents(null, 0)).rejects.toThrow(/count/);
      await expect(store().readAuditEvents(null, 1001)).rejects.toThrow(/count/);
      await expect(store().appendAuditEvents([record(1)], 0)).rejects.toThrow(/maxEvents/);
      for (const maxAgeMs of [0, -1, 1.5, Number.NaN]) await expect(store().appendAuditEvents([record(1)], MAX, maxAgeMs)).rejects.toThrow(/maxAgeMs/);
    });
  });
}
