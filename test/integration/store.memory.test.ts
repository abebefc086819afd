// The memory store against the shared store contract, plus what only it has: a bounded replay map.
import { describe, expect, it } from 'vitest';
import { MemoryStore } from '../../src/store/memory/memory-store.ts';
import { storeContract } from './store.contract.ts';

storeContract('memory', async () => {
  const store = new MemoryStore();
  return { store, cleanup: () => store.close() };
});

describe('memory store: replay records stay bounded', () => {
  it('expired jtis are pruned, so a full map accepts new ones once the old have expired', async () => {
    let nowMs = 1_000;
    const store = new MemoryStore({ now: () => nowMs, maxReplayRecords: 3 });
    for (const jti of ['a', 'b', 'c']) expect(await store.recordHostJti('thp', jti, 100)).toBe(true);
    nowMs += 101;
    // a, b and c have expired: they are pruned to make room, and forgotten.
    for (const jti of ['d', 'e']) expect(await store.recordHostJti('thp', jti, 100)).toBe(true);
    expect(await store.recordHostJti('thp', 'a', 100)).toBe(true);
    expect(await store.recordHostJti('thp', 'd', 100)).toBe(false);
  });

  it('a full map of live jtis refuses to record rather than forget one (a replay window)', async () => {
    const store = new MemoryStore({ now: () => 5_000, maxReplayRecords: 2 });
    await store.recordAgentJti('agt_1', 'a', 60_000);
    await store.recordAgentJti('agt_1', 'b', 60_000);
    await expect(store.recordAgentJti('agt_1', 'c', 60_000)).rejects.toThrow(/replay cache/);
    expect(await store.recordAgentJti('agt_1', 'a', 60_000)).toBe(false);
  });

  it('jti expiry follows the injected clock', async () => {
    let nowMs = 0;
    const store = new MemoryStore({ now: () => nowMs });
    expect(await store.recordAgentJti('agt_1', 'j', 1000)).toBe(true);
    nowMs = 999;
    expect(await store.recordAgentJti('agt_1', 'j', 1000)).toBe(false);
    nowMs = 1000;
    expect(await store.recordAgentJti('agt_1', 'j', 1000)).toBe(true);
  });

  it('a closed store refuses calls, as a closed Redis connection does', async () => {
    const store = new MemoryStore();
    await store.close();
    await expect(store.ping()).rejects.toThrow(/closed/);
  });

  it('a listener that throws is reported, not dropped silently (as the Redis store reports it)', async () => {
    const reported: Error[] = [];
    const store = new MemoryStore({ onListenerError: (error) => reported.push(error) });
    const delivered: string[] = [];
    store.onAgentInvalidation(() => {
      throw new Error('listener bug');
    });
    store.onAgentInvalidation((agentId) => delivered.push(agentId));
    await store.publishAgentInvalidation('agt_1');
    await expect.poll(() => delivered).toEqual(['agt_1']);
    expect(reported.map((e) => e.message)).toEqual(['listener bug']);
  });

  it('tells an outage (closed, replay cache full) from a bug, for the 503/500 split', async () => {
    const store = new MemoryStore({ now: () => 5_000, maxReplayRecords: 1 });
    await store.recordAgentJti('agt_1', 'a', 60_000);
    const full = await store.recordAgentJti('agt_1', 'b', 60_000).catch((e: unknown) => e);
    expect(store.isUnavailable(full)).toBe(true);
    expect(store.isUnavailable(new TypeError('a bug'))).toBe(false);
    await store.close();
    expect(store.isUnavailable(await store.ping().catch((e: unknown) => e))).toBe(true);
  });
});

describe('memory store: enrollments expire on the injected clock', () => {
  it('an enrollment is found until its time to be kept has passed on the clock, then never', async () => {
    let nowMs = 10_000;
    const store = new MemoryStore({ now: () => nowMs });
    const enrollment = {
      id: 'enr_1', personId: 'dev|a', name: 'runner', defaultCapabilities: [], tokenHash: 'h'.repeat(43), createdAtMs: nowMs, expiresAtMs: nowMs + 3_600_000, state: 'pending' as const,
    };
    expect(await store.createEnrollment(enrollment, 86_400_000)).toBe(true);
    nowMs += 86_399_999;
    expect(await store.findEnrollment(enrollment.tokenHash)).toEqual(enrollment);
    nowMs += 1;
    expect(await store.findEnrollment(enrollment.tokenHash)).toBeNull();
    expect(await store.completeEnrollment(enrollment.tokenHash, 'hst_1', nowMs)).toBe('not_found');
    // Forgotten, the hash is free again.
    expect(await store.createEnrollment(enrollment, 1000)).toBe(true);
  });
});
