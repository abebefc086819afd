// SECURITY.md, "One agent cannot starve the others through plugin operators": an agent whose plugin
// calls overrun the budget pays for it alone. Its grants are tripped (their calls become violations
// without reaching a worker), it has one batch running at a time, waiting batches are served
// round-robin across agents, and a warm standby takes a terminated worker's place. Real worker
// threads, real plugin files in a temporary directory; no assertion on elapsed time.
import { existsSync, readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { OperatorOutcome } from '../../src/operators/outcome.ts';
import type { PluginCall } from '../../src/operators/plugin-calls.ts';
import { SandboxUnavailableError, type PluginSandbox, type SandboxOptions } from '../../src/operators/sandbox.ts';
import { pluginSandboxes } from '../support/plugins.ts';

const sandboxes = pluginSandboxes('agentgate-isolation-');

/**
 * `busy`: notes every call it starts and ends in calls.log (so a test sees which calls reached a
 * worker, and whether two overlapped), then busy-waits for the operand's milliseconds. While the
 * file `hold` exists, a worker that starts importing it does not finish (bounded at 30 s), which
 * stands for a replacement worker that is still starting.
 */
const BUSY = (logPath: string, holdPath: string) => `import { appendFileSync, existsSync } from 'node:fs';
import { z } from 'zod';
const holdUntil = Date.now() + 30_000;
while (existsSync(${JSON.stringify(holdPath)}) && Date.now() < holdUntil);
export const name = 'busy';
export const description = 'busy-waits for the operand in milliseconds';
export const operand = z.number().int().min(0).max(60_000);
export function evaluate(ms, actual) {
  appendFileSync(${JSON.stringify(logPath)}, 'start ' + actual + '\\n');
  const until = Date.now() + ms;
  while (Date.now() < until);
  appendFileSync(${JSON.stringify(logPath)}, 'end ' + actual + '\\n');
  return true;
}
`;

/**
 * `sleepy`: blocks its thread without computing (as a starved worker looks) for the operand's
 * milliseconds; on the argument "once", only while the file `stall-once` exists, which the first
 * such call removes (a worker that stalls once, then the machine recovers).
 */
const SLEEPY = (stallOncePath: string) => `import { existsSync, unlinkSync } from 'node:fs';
import { z } from 'zod';
export const name = 'sleepy';
export const description = 'blocks for the operand in milliseconds without using the CPU';
export const operand = z.number().int().min(0).max(60_000);
export function evaluate(ms, actual) {
  if (actual === 'once') {
    if (!existsSync(${JSON.stringify(stallOncePath)})) return true;
    unlinkSync(${JSON.stringify(stallOncePath)});
  }
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  return true;
}
`;

let nowMs = 1_000_000;
const TRIP_MS = 60_000;

async function start(options: Partial<SandboxOptions> = {}): Promise<PluginSandbox> {
  const { dir } = sandboxes;
  const files = { 'busy.mjs': BUSY(join(dir, 'calls.log'), join(dir, 'hold')), 'sleepy.mjs': SLEEPY(join(dir, 'stall-once')) };
  nowMs = 1_000_000;
  return sandboxes.start(files, { budgetMs: 300, workers: 1, queueMax: 200, tripMs: TRIP_MS, nowMs: () => nowMs, ...options });
}

/** A call of `busy` for `ms` milliseconds, needed by the given grants. */
const busy = (ms: number, actual: string, ...grantIds: string[]): PluginCall => ({ name: 'busy', operand: ms, actual, grantIds });
/** What reached a worker, in order: "start x", "end x". */
const callsLog = (): string[] => (existsSync(join(sandboxes.dir, 'calls.log')) ? readFileSync(join(sandboxes.dir, 'calls.log'), 'utf8').split('\n').filter(Boolean) : []);
const kinds = (outcomes: OperatorOutcome[]) => outcomes.map((o) => o.kind);
/** How long the busy fixture spins for a call meant to overrun the 300 ms budget: far past it. */
const OVERRUN_MS = 20_000;

describe('an overrun trips the grants whose calls overran', () => {
  it("a tripped grant's calls are violations at once, without reaching a worker", async () => {
    const s = await start();
    expect(kinds(await s.evaluate([busy(OVERRUN_MS, 'slow', 'grt_attacker')], 'agt_attacker'))).toEqual(['timeout']);
    expect(callsLog()).toEqual(['start slow']);
    // The same grant again, even with a call that would be quick: tripped, and no worker saw it.
    expect(await s.evaluate([busy(0, 'quick', 'grt_attacker')], 'agt_attacker')).toEqual([{ kind: 'tripped' }]);
    expect(callsLog()).toEqual(['start slow']);
    expect(sandboxes.logLines.some((l) => l.msg === 'plugin calls overran their budget; the worker was replaced and their grants are tripped' && l.agentId === 'agt_attacker')).toBe(true);
    // Another grant of the same agent is not tripped; a call another grant also needs still runs for it.
    expect(kinds(await s.evaluate([busy(0, 'other-grant', 'grt_other')], 'agt_attacker'))).toEqual(['allowed']);
    expect(kinds(await s.evaluate([busy(0, 'shared', 'grt_attacker', 'grt_other'), busy(0, 'own', 'grt_attacker')], 'agt_attacker'))).toEqual(['allowed', 'tripped']);
    expect(callsLog()).toEqual(['start slow', 'start other-grant', 'end other-grant', 'start shared', 'end shared']);
  });

  it("batches of the grant queued behind the overrunning one are tripped too: one worker kill per trip, not one per request", async () => {
    const s = await start();
    const attacks = Array.from({ length: 5 }, (_, i) => s.evaluate([busy(OVERRUN_MS, `slow-${i}`, 'grt_attacker')], 'agt_attacker'));
    expect((await Promise.all(attacks)).map(kinds)).toEqual([['timeout'], ['tripped'], ['tripped'], ['tripped'], ['tripped']]);
    expect(callsLog()).toEqual(['start slow-0']);
  });

  it('an overrun whose worker was not computing (blocked, or starved by an overloaded machine) is retried once, then a violation, and trips nothing', async () => {
    const s = await start();
    const sleepy = (ms: number, actual: string): PluginCall => ({ name: 'sleepy', operand: ms, actual, grantIds: ['grt_blocked'] });
    expect(kinds(await s.evaluate([sleepy(OVERRUN_MS, 'blocked')], 'agt_blocked'))).toEqual(['timeout']);
    const notComputing = sandboxes.logLines.filter((l) => String(l.msg).startsWith('plugin calls overran their budget while their worker was not computing'));
    expect(notComputing.map((l) => [l.agentId, l.retried])).toEqual([['agt_blocked', false]]);
    // The grant was not tripped: its next call runs.
    expect(kinds(await s.evaluate([sleepy(0, 'next')], 'agt_blocked'))).toEqual(['allowed']);
  });

  it("a cheap call whose worker stalled without computing is run again on another worker and answered (another agent's bad luck is not a violation)", async () => {
    const s = await start();
    await writeFile(join(sandboxes.dir, 'stall-once'), '');
    expect(await s.evaluate([{ name: 'sleepy', operand: OVERRUN_MS, actual: 'once', grantIds: ['grt_unlucky'] }], 'agt_unlucky')).toEqual([{ kind: 'allowed' }]);
    expect(existsSync(join(sandboxes.dir, 'stall-once'))).toBe(false);
  });

  it('a trip expires after PLUGIN_TRIP_SECONDS, and a repeat overrun right after trips for twice as long', async () => {
    const s = await start();
    await s.evaluate([busy(OVERRUN_MS, 'slow', 'grt_attacker')], 'agt_attacker');
    nowMs += TRIP_MS - 1;
    expect(kinds(await s.evaluate([busy(0, 'still-tripped', 'grt_attacker')], 'agt_attacker'))).toEqual(['tripped']);
    nowMs += 1;
    expect(kinds(await s.evaluate([busy(0, 'expired', 'grt_attacker')], 'agt_attacker'))).toEqual(['allowed']);
    expect(kinds(await s.evaluate([busy(OVERRUN_MS, 'slow-again', 'grt_attacker')], 'agt_attacker'))).toEqual(['timeout']);
    nowMs += TRIP_MS;
    expect(kinds(await s.evaluate([busy(0, 'doubled', 'grt_attacker')], 'agt_attacker'))).toEqual(['tripped']);
    nowMs += TRIP_MS;
    expect(kinds(await s.evaluate([busy(0, 'free-again', 'grt_attacker')], 'agt_attacker'))).toEqual(['allowed']);
  });
});

describe("a killed worker does not stall other agents' calls", () => {
  it('with one worker, another agent is served by the standby while the replacement is still starting', async () => {
    const s = await start({ workers: 1 });
    // From here on, a worker that starts never becomes ready: only workers started before can answer.
    await writeFile(join(sandboxes.dir, 'hold'), '');
    expect(kinds(await s.evaluate([busy(OVERRUN_MS, 'slow', 'grt_attacker')], 'agt_attacker'))).toEqual(['timeout']);
    expect(kinds(await s.evaluate([busy(0, 'victim', 'grt_victim')], 'agt_victim'))).toEqual(['allowed']);
    await rm(join(sandboxes.dir, 'hold'));
  });

  it("with two workers, an agent's overrunning batch leaves the other worker to everyone else", async () => {
    const s = await start({ workers: 2 });
    const attack = s.evaluate([busy(OVERRUN_MS, 'slow', 'grt_attacker')], 'agt_attacker');
    const victims = await Promise.all(Array.from({ length: 5 }, (_, i) => s.evaluate([busy(0, `victim-${i}`, 'grt_victim')], `agt_victim_${i}`)));
    expect(victims.map(kinds)).toEqual(Array.from({ length: 5 }, () => ['allowed']));
    expect(kinds(await attack)).toEqual(['timeout']);
  });
});

describe('fairness between agents', () => {
  it("one agent's 50 queued batches do not put another agent's single batch behind all of them (round-robin)", async () => {
    const s = await start({ workers: 1, budgetMs: 10_000 });
    const finished: string[] = [];
    const flood = Array.from({ length: 50 }, (_, i) => s.evaluate([busy(5, `flood-${i}`, 'grt_flood')], 'agt_flood').then(() => finished.push(`flood-${i}`)));
    const victim = s.evaluate([busy(0, 'victim', 'grt_victim')], 'agt_victim').then(() => finished.push('victim'));
    await Promise.all([...flood, victim]);
    // The flood's first batch was running and its second was next in the round when the victim came.
    expect(finished.indexOf('victim')).toBeLessThanOrEqual(2);
  });

  it('an agent never has two batches running, even with a worker free', async () => {
    const s = await start({ workers: 2, budgetMs: 10_000 });
    await Promise.all(Array.from({ length: 6 }, (_, i) => s.evaluate([busy(5, `own-${i}`, 'grt_one')], 'agt_one')));
    const log = callsLog();
    // Strictly start, end, start, end...: no call of the agent started before the previous one ended.
    expect(log).toEqual(Array.from({ length: 6 }, (_, i) => [`start own-${i}`, `end own-${i}`]).flat());
  });

  it("one agent may fill only half the queue: its next batch is refused, another agent's is taken", async () => {
    const s = await start({ workers: 1, queueMax: 4, budgetMs: 10_000 });
    const running = s.evaluate([busy(200, 'running', 'grt_flood')], 'agt_flood');
    const waiting = [s.evaluate([busy(0, 'w1', 'grt_flood')], 'agt_flood'), s.evaluate([busy(0, 'w2', 'grt_flood')], 'agt_flood')];
    await expect(s.evaluate([busy(0, 'w3', 'grt_flood')], 'agt_flood')).rejects.toBeInstanceOf(SandboxUnavailableError);
    expect(kinds(await s.evaluate([busy(0, 'other', 'grt_other')], 'agt_other'))).toEqual(['allowed']);
    await Promise.all([running, ...waiting]);
  });
});
