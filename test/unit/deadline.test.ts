// `within` bounds every external call (STYLE); its deadlines share one sweeping interval, so these
// check that sharing changes nothing a caller can see: the call's own outcome wins when it comes
// first, and a late call is refused, never before its deadline.
import { describe, expect, it } from 'vitest';
import { DeadlineError, within } from '../../src/common/deadline.ts';

const after = <T>(ms: number, value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), ms));

describe('within', () => {
  it('answers the value or the rejection of a call that settles in time', async () => {
    await expect(within(after(5, 'done'), 1000, 'a quick call')).resolves.toBe('done');
    await expect(within(Promise.reject(new Error('refused')), 1000, 'a failing call')).rejects.toThrow('refused');
  });

  it('a call that hangs is refused with DeadlineError naming it, not before its deadline', async () => {
    const started = performance.now();
    const hanging = within(new Promise(() => {}), 50, 'storage call getAgent');
    await expect(hanging).rejects.toBeInstanceOf(DeadlineError);
    await expect(hanging).rejects.toThrow('storage call getAgent did not finish within 50 ms');
    // Never early; how late is the interval's slack plus scheduling, which the test's own timeout
    // bounds (no speed is asserted in npm test).
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
  });

  it('many calls in flight each get their own deadline, and the late ones only', async () => {
    const calls = Array.from({ length: 100 }, (_, i) => within(i % 2 === 0 ? after(1, i) : new Promise<number>(() => {}), 30, `call ${i}`));
    const outcomes = await Promise.allSettled(calls);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(50);
    expect(outcomes.filter((o) => o.status === 'rejected').every((o) => (o as PromiseRejectedResult).reason instanceof DeadlineError)).toBe(true);
  });
});
