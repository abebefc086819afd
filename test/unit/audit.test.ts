// The audit trail's pure rules (src/audit/events.ts) and its writer's queue (src/audit/log.ts)
// against a store stand-in: bounded, never blocking, retried once, flushed on time and at close;
// repeated refusals counted per key and window into one summary, the key table bounded, summaries
// written at close, and the trail trimmed by age once a minute.
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  auditIdMs,
  compareAuditIds,
  earlierBound,
  matchesAuditFilter,
  MAX_AUDIT_FIELDS,
  MAX_AUDIT_LIST,
  MAX_AUDIT_STRING,
  parseAuditTime,
  refusalKey,
  sanitizeAuditEvent,
  typeMatches,
  webhookBackoffMs,
  type AuditEvent,
  type AuditRecord,
} from '../../src/audit/events.ts';
import { createLogger } from '../../src/logger.ts';
import {
  AUDIT_AGE_TRIM_EVERY_MS,
  AUDIT_AGGREGATE_MAX_KEYS,
  AUDIT_FLUSH_CHUNK,
  AuditLog,
  CAPPED_EVENTS_PER_WINDOW,
  CAPPED_WINDOW_MS,
} from '../../src/audit/log.ts';
import { AuditedPolicyReloader, auditedOperatorReload } from '../../src/audit/trail.ts';
import type { Store } from '../../src/store/store.ts';

describe('audit events', () => {
  it('are stamped, keep only defined fields, and stay small whatever a caller passes', () => {
    const record = sanitizeAuditEvent({
      type: 'agent.registered', actor: 'host', agent_id: 'agt_1', host_id: undefined, name: 'x'.repeat(5000),
      granted: Array.from({ length: 500 }, (_, i) => `cap${i}`), count: 3, bad: Number.NaN, flag: true,
    }, Date.UTC(2026, 0, 2, 3, 4, 5, 6));
    expect(record.at).toBe('2026-01-02T03:04:05.006Z');
    expect(record).not.toHaveProperty('host_id');
    expect(record).not.toHaveProperty('bad');
    expect((record.name as string).length).toBe(MAX_AUDIT_STRING);
    expect(record.granted).toHaveLength(MAX_AUDIT_LIST);
    expect(record).toMatchObject({ type: 'agent.registered', actor: 'host', agent_id: 'agt_1', count: 3, flag: true });
    const many = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`f${i}`, i]));
    expect(Object.keys(sanitizeAuditEvent({ type: 't.x', actor: 'system', ...many }, 0))).toHaveLength(MAX_AUDIT_FIELDS);
  });

  it('an event cannot forge its own id or time', () => {
    const record = sanitizeAuditEvent({ type: 'x.y', actor: 'agent', id: '9-9', at: '1999-01-01T00:00:00.000Z' }, 0);
    expect(record).not.toHaveProperty('id');
    expect(record.at).toBe('1970-01-01T00:00:00.000Z');
  });

  it('a type filter is exact with a dot, a family without', () => {
    expect(typeMatches('execute.allowed', 'execute')).toBe(true);
    expect(typeMatches('execute.refused', 'execute.refused')).toBe(true);
    expect(typeMatches('execute.refused', 'execute.allowed')).toBe(false);
    expect(typeMatches('executed.x', 'execute')).toBe(false);
    expect(typeMatches('execute', 'execute')).toBe(true);
  });

  it('filters match every given field, and time bounds are inclusive', () => {
    const event: AuditEvent = { id: '5-0', at: '2026-01-01T00:00:10.000Z', type: 'execute.allowed', actor: 'agent', agent_id: 'a', host_id: 'h' };
    const at = Date.parse(event.at);
    expect(matchesAuditFilter(event, {})).toBe(true);
    expect(matchesAuditFilter(event, { agentId: 'a', hostId: 'h', type: 'execute', sinceMs: at, untilMs: at })).toBe(true);
    expect(matchesAuditFilter(event, { agentId: 'b' })).toBe(false);
    expect(matchesAuditFilter(event, { sinceMs: at + 1 })).toBe(false);
    expect(matchesAuditFilter(event, { untilMs: at - 1 })).toBe(false);
  });

  it('ids order as the stream does, numerically', () => {
    expect(compareAuditIds('10-0', '9-5')).toBe(1);
    expect(compareAuditIds('10-2', '10-10')).toBe(-1);
    expect(compareAuditIds('7-1', '7-1')).toBe(0);
    expect(auditIdMs('1700000000000-3')).toBe(1_700_000_000_000);
    expect(earlierBound(null, '5-0')).toBe('5-0');
    expect(earlierBound('4-9', '5-0')).toBe('4-9');
    expect(() => compareAuditIds('x', '1-0')).toThrow();
  });

  it('query times are ISO 8601 or epoch milliseconds, nothing else', () => {
    expect(parseAuditTime('1700000000000')).toBe(1_700_000_000_000);
    expect(parseAuditTime('2026-01-01T00:00:00.000Z')).toBe(Date.UTC(2026, 0, 1));
    expect(parseAuditTime('2026-01-01T01:00:00+01:00')).toBe(Date.UTC(2026, 0, 1));
    expect(parseAuditTime('2026-01-01')).toBe(Date.UTC(2026, 0, 1));
    for (const bad of ['yesterday', 'Jan 1 2026', '2026-13-45T00:00:00Z', '-5', '1e12', '']) expect(parseAuditTime(bad)).toBeNull();
  });

  it('webhook retries back off from 1 s doubling to 60 s, jittered between half and all of it', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 30].map((n) => webhookBackoffMs(n, 1))).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000]);
    expect([1, 2, 7].map((n) => webhookBackoffMs(n, 0))).toEqual([500, 1000, 30_000]);
  });
});

// ---- the writer ------------------------------------------------------------------------------------

/** A store stand-in that records appends, answering each as `answer` says. */
function fakeStore(answer: (records: readonly AuditRecord[]) => Promise<boolean[]> = async (r) => r.map(() => true)) {
  const appended: AuditRecord[][] = [];
  const maxAges: Array<number | undefined> = [];
  const store = {
    appendAuditEvents(records: readonly AuditRecord[], _maxEvents: number, maxAgeMs?: number) {
      appended.push([...records]);
      maxAges.push(maxAgeMs);
      return answer(records);
    },
  } as unknown as Store;
  return { store, appended, maxAges };
}

const logLines: string[] = [];
const logger = createLogger('warn', (line) => logLines.push(line));

function auditLog(store: Store, overrides: Partial<ConstructorParameters<typeof AuditLog>[0]> = {}) {
  return new AuditLog({ store, enabled: true, maxEvents: 1000, flushMs: 1000, queueMax: 100, writeDeadlineMs: 1000, logger, ...overrides });
}

afterEach(() => {
  vi.useRealTimers();
  logLines.length = 0;
});

describe('the audit log', () => {
  it('flushNow issues the appends at once, in the same tick, and never waits for them', () => {
    const { store, appended } = fakeStore(() => new Promise(() => {}));
    const log = auditLog(store);
    log.record({ type: 'execute.allowed', actor: 'agent', agent_id: 'a' });
    log.record({ type: 'execute.refused', actor: 'agent', agent_id: 'a', code: 'grant_revoked' });
    expect(appended).toEqual([]);
    log.flushNow();
    expect(appended.map((batch) => batch.map((r) => r.type))).toEqual([['execute.allowed', 'execute.refused']]);
    expect(log.queued).toBe(0);
  });

  it('a flush sends at most AUDIT_FLUSH_CHUNK appends; the rest wait for the next', () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store, { queueMax: 1000 });
    for (let i = 0; i < AUDIT_FLUSH_CHUNK + 10; i++) log.record({ type: 'x.y', actor: 'system', i });
    log.flushNow();
    expect(appended[0]).toHaveLength(AUDIT_FLUSH_CHUNK);
    expect(log.queued).toBe(10);
  });

  it('a full queue drops its oldest events, counts them, and logs once per 10 s', () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store, { queueMax: 100 });
    for (let i = 0; i < 250; i++) log.record({ type: 'x.y', actor: 'system', i });
    expect(log.counters.droppedQueueFull).toBe(150);
    log.flushNow();
    expect(appended[0]!.map((r) => r.i)).toEqual(Array.from({ length: 100 }, (_, k) => 150 + k));
    expect(logLines.filter((line) => line.includes('audit queue is full'))).toHaveLength(1);
  });

  it('a failed append is retried once with the next flush, then dropped and counted', async () => {
    let attempts = 0;
    const { store, appended } = fakeStore(async (records) => {
      attempts++;
      return records.map(() => false);
    });
    const log = auditLog(store);
    log.record({ type: 'x.y', actor: 'system' });
    await log.flush();
    expect(log.queued).toBe(1);
    await log.flush();
    expect(attempts).toBe(2);
    expect(appended).toHaveLength(2);
    expect(log.queued).toBe(0);
    expect(log.counters.droppedWriteFailed).toBe(1);
    await log.flush();
    expect(attempts).toBe(2);
    expect(logLines.filter((line) => line.includes('could not append'))).toHaveLength(1);
  });

  it('only the events that failed are retried', async () => {
    let round = 0;
    const { store, appended } = fakeStore(async (records) => {
      const first = round++ === 0;
      return records.map((_, i) => !first || i === 0);
    });
    const log = auditLog(store);
    log.record({ type: 'a.a', actor: 'system' });
    log.record({ type: 'b.b', actor: 'system' });
    await log.flush();
    await log.flush();
    expect(appended.map((batch) => batch.map((r) => r.type))).toEqual([['a.a', 'b.b'], ['b.b']]);
    expect(log.counters.written).toBe(2);
  });

  it('an append that throws instead of rejecting neither throws nor loses the event', async () => {
    let calls = 0;
    const store = { appendAuditEvents: () => { if (calls++ === 0) throw new Error('boom'); return Promise.resolve([true]); } } as unknown as Store;
    const log = auditLog(store);
    log.record({ type: 'x.y', actor: 'system' });
    expect(() => log.flushNow()).not.toThrow();
    await log.flush();
    await log.flush();
    expect(log.counters.written).toBe(1);
  });

  it('the idle timer writes what nothing carried, AUDIT_FLUSH_MS after the first event', async () => {
    vi.useFakeTimers();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { flushMs: 1000 });
    log.record({ type: 'x.y', actor: 'system' });
    await vi.advanceTimersByTimeAsync(999);
    expect(appended).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(appended).toHaveLength(1);
  });

  it('close writes what is queued; a later record is dropped, counted and logged, never silently', async () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store);
    log.record({ type: 'x.y', actor: 'system' });
    await log.close();
    expect(appended).toHaveLength(1);
    log.record({ type: 'late.event', actor: 'system' });
    expect(log.queued).toBe(0);
    expect(log.counters.droppedWriteFailed).toBe(1);
    expect(logLines.filter((line) => line.includes('after shutdown began') && line.includes('late.event'))).toHaveLength(1);
  });

  it('disabled, it records nothing', () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store, { enabled: false });
    log.record({ type: 'x.y', actor: 'system' });
    log.flushNow();
    expect(appended).toEqual([]);
  });

  it('an unknown caller\'s refusals are capped per window and summarised, so volume cannot flush the trail', async () => {
    let nowMs = 1_000_000;
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now: () => nowMs, queueMax: 10_000 });
    for (let i = 0; i < CAPPED_EVENTS_PER_WINDOW + 50; i++) log.record({ type: 'admin.call', actor: 'admin', code: 'unauthorized' }, { capped: true });
    log.record({ type: 'agent.revoked', actor: 'admin', agent_id: 'a' });
    expect(log.counters.suppressed).toBe(50);
    nowMs += CAPPED_WINDOW_MS;
    await log.flush();
    const types = appended.flat().map((r) => r.type);
    expect(types.filter((t) => t === 'admin.call')).toHaveLength(CAPPED_EVENTS_PER_WINDOW);
    expect(types).toContain('agent.revoked');
    expect(appended.flat().find((r) => r.type === 'audit.suppressed')).toMatchObject({ actor: 'system', count: 50 });
  });
});

// ---- repeated refusals ----------------------------------------------------------------------------

const WINDOW_MS = 60_000;

/** An agent's execute refused with `code`; `capability` varies freely and must not make keys. */
const refused = (agentId: string, code: string, capability = 'echo') =>
  ({ type: 'execute.refused', actor: 'agent', agent_id: agentId, host_id: `hst_of_${agentId}`, capability, outcome: 'refused', code }) as const;

describe('refusal keys (audit/events.ts)', () => {
  it('name who was refused and for what: type, actor, agent (with its host), code; never the capability', () => {
    const one = refusalKey(refused('agt_1', 'agent_revoked', 'echo'), false);
    expect(one?.fields).toEqual({ type: 'execute.refused', actor: 'agent', outcome: 'refused', code: 'agent_revoked', agent_id: 'agt_1', host_id: 'hst_of_agt_1' });
    expect(refusalKey(refused('agt_1', 'agent_revoked', 'transfer_money'), false)?.key).toBe(one?.key);
    expect(refusalKey(refused('agt_2', 'agent_revoked'), false)?.key).not.toBe(one?.key);
    expect(refusalKey(refused('agt_1', 'capability_not_granted'), false)?.key).not.toBe(one?.key);
    expect(refusalKey({ ...refused('agt_1', 'agent_revoked'), type: 'capability.requested' }, false)?.key).not.toBe(one?.key);
  });

  it('an agent refused for its host\'s status is keyed by the host, so a host\'s agents share one key', () => {
    const a = refusalKey({ ...refused('agt_a', 'host_pending'), host_id: 'hst_x' }, false);
    const b = refusalKey({ ...refused('agt_b', 'host_pending'), host_id: 'hst_x' }, false);
    expect(a?.key).toBe(b?.key);
    expect(a?.fields).not.toHaveProperty('agent_id');
    expect(a?.fields.host_id).toBe('hst_x');
  });

  it('only refusals of a caller that holds a key are aggregated: not allowed events, unknown callers or the system', () => {
    expect(refusalKey({ type: 'execute.allowed', actor: 'agent', agent_id: 'a', outcome: 'completed' }, false)).toBeNull();
    expect(refusalKey({ type: 'execute.refused', actor: 'agent', outcome: 'refused', code: 'invalid_jwt' }, true)).toBeNull();
    expect(refusalKey({ type: 'admin.call', actor: 'admin', outcome: 'refused', code: 'unauthorized', path: '/admin/x' }, true)).toBeNull();
    expect(refusalKey({ type: 'policy.reloaded', actor: 'system', outcome: 'refused', code: 'reload_rejected' }, false)).toBeNull();
    // The admin whose token verified: its refusals are keyed by type and code, never by the path it names.
    const admin = refusalKey({ type: 'admin.call', actor: 'admin', outcome: 'refused', code: 'agent_not_found', path: '/admin/agents/agt_1', agent_id: 'agt_1' }, false);
    expect(admin?.fields).toEqual({ type: 'admin.call', actor: 'admin', outcome: 'refused', code: 'agent_not_found' });
    expect(refusalKey({ type: 'admin.call', actor: 'admin', outcome: 'refused', code: 'agent_not_found', path: '/admin/agents/agt_2', agent_id: 'agt_2' }, false)?.key).toBe(admin?.key);
    // A replayed token is capped (anyone holding a copy can send it), yet names its agent: keyed too.
    expect(refusalKey(refused('agt_1', 'invalid_jwt'), true)).not.toBeNull();
  });
});

describe('the audit log aggregates repeated refusals', () => {
  const clock = (startMs = 1_000_000) => {
    const state = { nowMs: startMs };
    return { state, now: () => state.nowMs };
  };

  it('a revoked agent hammering execute adds one event per window, with its count, not one per call', async () => {
    const { state, now } = clock();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now, aggregateWindowMs: WINDOW_MS, queueMax: 10_000 });
    for (let i = 0; i < 1500; i++) {
      log.record(refused('agt_revoked', 'agent_revoked', `cap_${i}`));
      state.nowMs += 10;
    }
    // 1500 calls 10 ms apart span 15 s: one window.
    await log.flush();
    expect(appended.flat()).toEqual([expect.objectContaining({ type: 'execute.refused', agent_id: 'agt_revoked', code: 'agent_revoked', capability: 'cap_0' })]);
    expect(log.counters.aggregated).toBe(1499);
    state.nowMs = 1_000_000 + WINDOW_MS;
    await log.flush();
    const summary = appended.flat()[1];
    expect(summary).toEqual({
      at: new Date(state.nowMs).toISOString(), type: 'execute.refused', actor: 'agent', agent_id: 'agt_revoked', host_id: 'hst_of_agt_revoked',
      outcome: 'refused', code: 'agent_revoked', count: 1499,
      first_at: new Date(1_000_010).toISOString(), last_at: new Date(1_000_000 + 1499 * 10).toISOString(), window_ms: WINDOW_MS,
    });
    expect(summary).not.toHaveProperty('capability');
    // The next window starts with its first refusal recorded again.
    log.record(refused('agt_revoked', 'agent_revoked'));
    await log.flush();
    expect(appended.flat()).toHaveLength(3);
  });

  it('a window with no repeats ends without a summary, and each key and code has a window of its own', async () => {
    const { state, now } = clock();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now, aggregateWindowMs: WINDOW_MS });
    log.record(refused('agt_1', 'agent_revoked'));
    log.record(refused('agt_1', 'capability_not_granted'));
    log.record(refused('agt_1', 'capability_not_granted'));
    log.record(refused('agt_2', 'agent_revoked'));
    log.record({ type: 'execute.allowed', actor: 'agent', agent_id: 'agt_1', outcome: 'completed' });
    log.record({ type: 'execute.allowed', actor: 'agent', agent_id: 'agt_1', outcome: 'completed' });
    state.nowMs += WINDOW_MS;
    await log.flush();
    expect(appended.flat().map((r) => `${r.type} ${r.agent_id} ${r.code ?? ''} ${r.count ?? ''}`.trim())).toEqual([
      'execute.refused agt_1 agent_revoked',
      'execute.refused agt_1 capability_not_granted',
      'execute.refused agt_2 agent_revoked',
      'execute.allowed agt_1',
      'execute.allowed agt_1',
      'execute.refused agt_1 capability_not_granted 1',
    ]);
    expect(log.openRefusalWindows).toBe(0);
  });

  it('the sweep writes a window\'s summary when it ends, without waiting for another refusal or for shutdown', async () => {
    vi.useFakeTimers();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { aggregateWindowMs: 1000, flushMs: 100 });
    for (let i = 0; i < 5; i++) log.record(refused('agt_1', 'agent_pending'));
    await vi.advanceTimersByTimeAsync(200);
    expect(appended.flat().map((r) => r.count)).toEqual([undefined]);
    await vi.advanceTimersByTimeAsync(1500);
    expect(appended.flat().map((r) => r.count)).toEqual([undefined, 4]);
    expect(log.openRefusalWindows).toBe(0);
  });

  it('the key table is bounded: beyond AUDIT_AGGREGATE_MAX_KEYS, new keys\' refusals fall into one overflow summary', async () => {
    const { state, now } = clock();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now, aggregateWindowMs: WINDOW_MS, queueMax: AUDIT_AGGREGATE_MAX_KEYS + 100 });
    for (let i = 0; i < AUDIT_AGGREGATE_MAX_KEYS + 50; i++) log.record(refused(`agt_${i}`, 'agent_revoked'));
    expect(log.openRefusalWindows).toBe(AUDIT_AGGREGATE_MAX_KEYS);
    expect(log.counters.overflowed).toBe(50);
    // A key already in the table still counts its own repeats.
    log.record(refused('agt_0', 'agent_revoked'));
    expect(log.counters.overflowed).toBe(50);
    state.nowMs += WINDOW_MS;
    await log.flush();
    const events = appended.flat();
    expect(events.filter((r) => r.type === 'execute.refused' && r.count === undefined)).toHaveLength(AUDIT_AGGREGATE_MAX_KEYS);
    expect(events.filter((r) => r.type === 'execute.refused' && r.count !== undefined)).toEqual([expect.objectContaining({ agent_id: 'agt_0', count: 1 })]);
    expect(events.filter((r) => r.type === 'audit.suppressed')).toEqual([expect.objectContaining({ actor: 'system', reason: 'refusal_keys_full', count: 50, window_ms: WINDOW_MS })]);
    expect(log.openRefusalWindows).toBe(0);
  });

  it('summaries still open are written at close: counted refusals and capped events are never lost at shutdown', async () => {
    const { now } = clock();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now, aggregateWindowMs: WINDOW_MS, queueMax: 1000 });
    for (let i = 0; i < 10; i++) log.record(refused('agt_1', 'agent_revoked'));
    for (let i = 0; i < CAPPED_EVENTS_PER_WINDOW + 7; i++) log.record({ type: 'execute.refused', actor: 'agent', outcome: 'refused', code: 'invalid_jwt' }, { capped: true });
    await log.close();
    const events = appended.flat();
    expect(events.find((r) => r.count === 9)).toMatchObject({ type: 'execute.refused', agent_id: 'agt_1', code: 'agent_revoked' });
    expect(events.find((r) => r.type === 'audit.suppressed')).toMatchObject({ reason: 'capped', count: 7 });
    expect(log.queued).toBe(0);
    expect(log.openRefusalWindows).toBe(0);
  });

  it('a capped refusal that names its agent (a replayed token) is aggregated too, before the cap counts it', async () => {
    const { state, now } = clock();
    const { store, appended } = fakeStore();
    const log = auditLog(store, { now, aggregateWindowMs: WINDOW_MS, queueMax: 1000 });
    for (let i = 0; i < CAPPED_EVENTS_PER_WINDOW * 3; i++) log.record(refused('agt_1', 'invalid_jwt'), { capped: true });
    expect(log.counters.suppressed).toBe(0);
    state.nowMs += WINDOW_MS;
    await log.flush();
    expect(appended.flat().map((r) => r.count)).toEqual([undefined, CAPPED_EVENTS_PER_WINDOW * 3 - 1]);
  });
});

describe('the audit log trims the trail by age', () => {
  it('once a minute, with an append of no events that carries maxAgeMs; appends of events stay as they were', async () => {
    vi.useFakeTimers();
    const { store, appended, maxAges } = fakeStore();
    const log = auditLog(store, { maxAgeMs: 3_600_000, flushMs: 100 });
    log.record({ type: 'x.y', actor: 'system' });
    await vi.advanceTimersByTimeAsync(200);
    expect(maxAges).toEqual([undefined]);
    await vi.advanceTimersByTimeAsync(AUDIT_AGE_TRIM_EVERY_MS);
    expect(appended.at(-1)).toEqual([]);
    expect(maxAges.at(-1)).toBe(3_600_000);
    await log.close();
    const trims = maxAges.length;
    await vi.advanceTimersByTimeAsync(AUDIT_AGE_TRIM_EVERY_MS * 2);
    expect(maxAges).toHaveLength(trims);
  });

  it('a trim that fails is logged, never thrown, and tried again the next minute', async () => {
    vi.useFakeTimers();
    let calls = 0;
    const store = { appendAuditEvents: () => { calls++; return Promise.reject(new Error('down')); } } as unknown as Store;
    auditLog(store, { maxAgeMs: 3_600_000 });
    await vi.advanceTimersByTimeAsync(AUDIT_AGE_TRIM_EVERY_MS * 2);
    expect(calls).toBe(2);
    // One line per failure here: failures a minute apart are more than the log's 10 s apart.
    expect(logLines.filter((line) => line.includes('could not trim the audit trail by age'))).toHaveLength(2);
  });
});

describe('reloads in the audit trail', () => {
  it('a refused policy reload is recorded with what triggered it, and the outcome still answered', async () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store);
    const engine = {
      info: () => ({ sha256: 'old', generation: 1, loadedAtMs: 0 }),
      reload: async () => {
        throw new Error('golden decision 3 changed');
      },
    } as unknown as ConstructorParameters<typeof AuditedPolicyReloader>[0]['engine'];
    const reloader = new AuditedPolicyReloader({ engine, logger: createLogger('silent'), audit: log, watchPaths: [] });
    expect(await reloader.reload('file')).toEqual({ ok: false, error: 'golden decision 3 changed' });
    await log.flush();
    expect(appended.flat()[0]).toMatchObject({ type: 'policy.reloaded', actor: 'system', trigger: 'file', outcome: 'refused', code: 'reload_rejected', error: 'golden decision 3 changed' });
  });

  it('operator plugin reloads are recorded accepted or refused, and a refusal still throws', async () => {
    const { store, appended } = fakeStore();
    const log = auditLog(store);
    const accepted = auditedOperatorReload(log, async () => ['eq', 'regex']);
    expect(await accepted('SIGHUP')).toEqual(['eq', 'regex']);
    const refused = auditedOperatorReload(log, async () => {
      throw new Error('plugins/broken.ts: evaluate must not be async');
    });
    await expect(refused('admin')).rejects.toThrow(/broken/);
    await log.flush();
    expect(appended.flat().map((r) => [r.type, r.actor, r.trigger, r.outcome])).toEqual([
      ['operators.reloaded', 'system', 'SIGHUP', 'accepted'],
      ['operators.reloaded', 'admin', 'admin', 'refused'],
    ]);
  });
});
