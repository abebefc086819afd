// The store guard times every store call (metrics, and a debug line past SLOW_CALL_MS) and counts
// failures by kind, without changing what a call answers or throws.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors.ts';
import { createLogger } from '../../src/logger.ts';
import { PrometheusMetrics } from '../../src/metrics/metrics.ts';
import { failClosedStore, SLOW_CALL_MS } from '../../src/store/guard.ts';
import type { Store } from '../../src/store/store.ts';

class Outage extends Error {}

/**
 * Just enough of a store: ping answers after `delayMs` (0: at once, without a timer, which a busy
 * machine could run later than SLOW_CALL_MS), getAgent fails as told.
 */
function fakeStore(delayMs: number, failure?: Error): Store {
  return {
    kind: 'memory',
    isUnavailable: (err: unknown) => err instanceof Outage,
    onAgentInvalidation: () => {},
    ping: () => (delayMs === 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, delayMs))),
    getAgent: () => Promise.reject(failure ?? new Error('not set')),
  } as unknown as Store;
}

describe('the store guard', () => {
  it('times calls by method, and logs one slower than SLOW_CALL_MS at debug', async () => {
    const lines: string[] = [];
    const metrics = new PrometheusMetrics();
    const store = failClosedStore(fakeStore(SLOW_CALL_MS + 15), createLogger('debug', (l) => lines.push(l)), { metrics });
    await store.ping();
    const text = (await metrics.render()).body;
    expect(text).toMatch(/^agentgate_store_call_duration_seconds_count\{call="ping"\} 1$/m);
    const slow = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((e) => e.msg === 'slow storage call');
    expect(slow).toMatchObject({ level: 'debug', call: 'ping' });
    expect(slow!.durationMs).toBeGreaterThan(SLOW_CALL_MS);
  });

  it('a fast call writes no line', async () => {
    const lines: string[] = [];
    const store = failClosedStore(fakeStore(0), createLogger('debug', (l) => lines.push(l)));
    await store.ping();
    expect(lines).toEqual([]);
  });

  it('an outage is counted as unavailable and answered 503; any other failure is counted as error and passes through', async () => {
    const metrics = new PrometheusMetrics();
    const outage = failClosedStore(fakeStore(0, new Outage('down')), createLogger('silent'), { metrics });
    // The answer names what cannot be reached (the store), as /readyz does, not a symptom.
    await expect(outage.getAgent('agt_1')).rejects.toMatchObject({ code: 'service_unavailable', message: expect.stringMatching(/^the (redis|memory) store cannot be reached; retry later$/) });
    const bug = new TypeError('a bug');
    const broken = failClosedStore(fakeStore(0, bug), createLogger('silent'), { metrics });
    await expect(broken.getAgent('agt_1')).rejects.toBe(bug);
    const refusal = new ApiError('conflict', 'raced');
    await expect(failClosedStore(fakeStore(0, refusal), createLogger('silent'), { metrics }).getAgent('agt_1')).rejects.toBe(refusal);
    const text = (await metrics.render()).body;
    expect(text).toMatch(/^agentgate_store_call_failures_total\{call="getAgent",kind="unavailable"\} 1$/m);
    expect(text).toMatch(/^agentgate_store_call_failures_total\{call="getAgent",kind="error"\} 1$/m);
    // A refusal the store decided (an ApiError) is an answer, not a failure.
    expect(text).not.toMatch(/kind="error"\} 2/);
  });
});
