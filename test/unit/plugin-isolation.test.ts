// The pure parts of plugin isolation (SECURITY.md, "One agent cannot starve the others through
// plugin operators"): the trip table that makes an overrun cost only the grants that caused it, and
// the plugin calls that know which grants need them. No workers, no I/O.
import { describe, expect, it } from 'vitest';
import { pluginCalls } from '../../src/operators/plugin-calls.ts';
import { MAX_TRIPPED_GRANTS, TripTable } from '../../src/operators/trips.ts';

const MINUTE_MS = 60_000;

function table(options: { maxEntries?: number } = {}) {
  const clock = { nowMs: 0 };
  const trips = new TripTable({ durationMs: MINUTE_MS, nowMs: () => clock.nowMs, ...options });
  return { trips, clock };
}

describe('trip table', () => {
  it('a tripped grant stays tripped for the trip duration, then is served again', () => {
    const { trips, clock } = table();
    expect(trips.trip(['grt_a'])).toEqual([{ grantId: 'grt_a', durationMs: MINUTE_MS }]);
    expect(trips.isTripped('grt_a')).toBe(true);
    expect(trips.isTripped('grt_b')).toBe(false);
    clock.nowMs = MINUTE_MS - 1;
    expect(trips.isTripped('grt_a')).toBe(true);
    clock.nowMs = MINUTE_MS;
    expect(trips.isTripped('grt_a')).toBe(false);
  });

  it('a grant that overruns again right after its trip is tripped twice as long, up to a cap; a late one starts over', () => {
    const { trips, clock } = table();
    const durations: number[] = [];
    for (let i = 0; i < 8; i++) {
      const [trip] = trips.trip(['grt_a']);
      durations.push(trip!.durationMs);
      clock.nowMs += trip!.durationMs;
    }
    expect(durations).toEqual([1, 2, 4, 8, 16, 16, 16, 16].map((n) => n * MINUTE_MS));
    // Long after the last trip ended, a new overrun is a first one again.
    clock.nowMs += 16 * MINUTE_MS;
    expect(trips.trip(['grt_a'])[0]!.durationMs).toBe(MINUTE_MS);
  });

  it('a grant named twice in one overrun is tripped once, not doubled', () => {
    const { trips } = table();
    expect(trips.trip(['grt_a', 'grt_a', 'grt_b'])).toEqual([
      { grantId: 'grt_a', durationMs: MINUTE_MS }, { grantId: 'grt_b', durationMs: MINUTE_MS },
    ]);
  });

  it('a flood of trips cannot grow the table past its bound: the oldest trip is forgotten first', () => {
    const { trips } = table();
    for (let i = 0; i <= MAX_TRIPPED_GRANTS; i++) trips.trip([`grt_${i}`]);
    expect(trips.size).toBe(MAX_TRIPPED_GRANTS);
    expect(trips.isTripped('grt_0')).toBe(false);
    expect(trips.isTripped('grt_1')).toBe(true);
    expect(trips.isTripped(`grt_${MAX_TRIPPED_GRANTS}`)).toBe(true);
  });

  it('a grant tripped again moves to the end, so a fresh trip is not the one forgotten', () => {
    const { trips } = table({ maxEntries: 2 });
    trips.trip(['grt_a']);
    trips.trip(['grt_b']);
    trips.trip(['grt_a']);
    trips.trip(['grt_c']);
    expect([trips.isTripped('grt_a'), trips.isTripped('grt_b'), trips.isTripped('grt_c')]).toEqual([true, false, true]);
  });
});

describe('plugin calls know their grants', () => {
  it('one call needed by two grants names both, once each; built-in operators make no call', () => {
    const isPlugin = (name: string) => name === 'regex';
    const grants = [
      { id: 'grt_1', constraints: { code: { regex: '^A', max: 3 } } },
      { id: 'grt_2', constraints: { code: { regex: '^A' }, other: { regex: 'x' } } },
    ];
    expect(pluginCalls(grants, { code: 'ABC' }, isPlugin)).toEqual([
      { name: 'regex', operand: '^A', actual: 'ABC', grantIds: ['grt_1', 'grt_2'] },
      { name: 'regex', operand: 'x', actual: null, grantIds: ['grt_2'] },
    ]);
  });
});
