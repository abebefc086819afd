// The plugin sandbox (SECURITY.md): plugin operators run in worker threads with a
// budget they cannot exceed, and no answer but `true` allows, whatever shape the answer has.
// Real worker threads, real plugin files in a temporary directory.
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LogThrottle } from '../../src/logger.ts';
import { loadPlugins } from '../../src/operators/plugin-loader.ts';
import { SandboxUnavailableError } from '../../src/operators/sandbox.ts';
import { pluginSandboxes } from '../support/plugins.ts';

const sandboxes = pluginSandboxes('agentgate-sandbox-');

const plugin = (name: string, evaluate: string, prelude = '') =>
  `import { z } from 'zod';\n${prelude}\nexport const name = ${JSON.stringify(name)};\nexport const description = 'test';\nexport const operand = z.unknown();\nexport ${evaluate}\n`;

function start(files: Record<string, string>, options: { budgetMs?: number; queueMax?: number; queueWaitMaxMs?: number } = {}) {
  return sandboxes.start(files, {
    budgetMs: options.budgetMs ?? 200, workers: 1, queueMax: options.queueMax ?? 100, tripMs: 60_000,
    ...(options.queueWaitMaxMs ? { queueWaitMaxMs: options.queueWaitMaxMs } : {}),
  });
}

// Calls of no grant: nothing here is tripped (test/integration/plugin-isolation.test.ts covers trips).
const call = (name: string, actual: unknown = 'x', operand: unknown = 'op') => ({ name, operand, actual, grantIds: [] });
const AGENT = 'agt_sandbox';

describe('a plugin that never returns cannot hold the server', () => {
  it('is stopped at the budget, its calls count as violations, and a fresh worker answers the next decision', async () => {
    const s = await start({
      'spin.mjs': plugin('spin', 'function evaluate(operand, actual) { if (actual === "loop") for (;;) {} return true; }'),
    });
    // The event loop stays free while the worker spins: a timer set now fires before the decision is
    // answered. Had evaluate() held the thread until the budget ended, its answer would come first.
    // (An order, not a duration, so a busy machine that runs the timer late cannot fail it.)
    let answered = false;
    let timerFiredBeforeAnswer = false;
    setTimeout(() => { timerFiredBeforeAnswer = !answered; }, 10);
    const outcomes = await s.evaluate([call('spin', 'loop')], AGENT);
    answered = true;
    expect(outcomes).toEqual([{ kind: 'timeout', budgetMs: 200 }]);
    expect(timerFiredBeforeAnswer).toBe(true);
    expect(await s.evaluate([call('spin', 'fine')], AGENT)).toEqual([{ kind: 'allowed' }]);
    expect(sandboxes.logLines.some((l) => l.msg === 'plugin operator failed; the argument counts as a violation' && l.operator === 'spin')).toBe(true);
  });

  it('decisions queued behind a stuck one are answered once it is stopped', async () => {
    const s = await start({
      'spin.mjs': plugin('spin', 'function evaluate(operand, actual) { if (actual === "loop") for (;;) {} return actual === "yes"; }'),
    });
    const stuck = s.evaluate([call('spin', 'loop')], AGENT);
    const queued = [s.evaluate([call('spin', 'yes')], AGENT), s.evaluate([call('spin', 'no')], AGENT)];
    expect(await stuck).toEqual([{ kind: 'timeout', budgetMs: 200 }]);
    expect(await Promise.all(queued)).toEqual([[{ kind: 'allowed' }], [{ kind: 'refused' }]]);
  });

  it('a full queue is refused with SandboxUnavailableError instead of growing without bound', async () => {
    const s = await start({ 'spin.mjs': plugin('spin', 'function evaluate(operand, actual) { if (actual === "loop") for (;;) {} return true; }') }, { queueMax: 2 });
    const stuck = s.evaluate([call('spin', 'loop')], AGENT);
    // Two agents: one agent alone may hold only half the queue (plugin-isolation.test.ts).
    const waiting = [s.evaluate([call('spin')], 'agt_other'), s.evaluate([call('spin')], 'agt_third')];
    await expect(s.evaluate([call('spin')], 'agt_fourth')).rejects.toBeInstanceOf(SandboxUnavailableError);
    await stuck;
    await Promise.all(waiting);
  });
});

describe('anything but true is a violation, and nothing a plugin answers can end the process', () => {
  it('promises (rejected or not), thenables, throwing getters and non-booleans are violations', async () => {
    const s = await start({
      'shapes.mjs': plugin('shapes', `function evaluate(operand, actual) {
        switch (actual) {
          case 'rejected': return Promise.reject(new Error('async failure'));
          case 'resolved-true': return Promise.resolve(true);
          case 'thenable': return { then(_ok, fail) { fail(new Error('thenable failure')); } };
          case 'throwing-then': return { then() { throw new Error('then throws'); } };
          case 'then-getter': return Object.defineProperty({}, 'then', { get() { throw new Error('getter throws'); } });
          case 'proxy': return new Proxy({}, { get() { throw new Error('proxy trap'); } });
          case 'string': return 'true';
          case 'one': return 1;
          case 'object': return {};
          case 'undefined': return undefined;
          case 'throws': throw new Error('sync failure');
          case 'throws-string': throw 'a string';
          default: return true;
        }
      }`),
    });
    const actuals = ['rejected', 'resolved-true', 'thenable', 'throwing-then', 'then-getter', 'proxy', 'string', 'one', 'object', 'undefined', 'throws', 'throws-string', 'ok'];
    const outcomes = await s.evaluate(actuals.map((a) => call('shapes', a)), AGENT);
    expect(outcomes.map((o) => o.kind)).toEqual([
      'promise', 'promise', 'promise', 'promise', 'not_boolean', 'not_boolean', 'not_boolean', 'not_boolean', 'not_boolean', 'not_boolean', 'threw', 'threw', 'allowed',
    ]);
    // Give the rejections time to surface: none may go unhandled (the worker would report it).
    await new Promise((r) => setTimeout(r, 100));
    expect(sandboxes.logLines.filter((l) => String(l.msg).includes('unhandled'))).toEqual([]);
    expect(await s.evaluate([call('shapes', 'ok')], AGENT)).toEqual([{ kind: 'allowed' }]);
  });

  it('a plugin that crashes its worker from a timer gets its calls refused and the worker replaced', async () => {
    const s = await start({
      'crash.mjs': plugin('crash', 'function evaluate(operand, actual) { if (actual === "crash") setTimeout(() => { throw new Error("late crash"); }, 0); if (actual === "crash") for (let i = 0; i < 1e7; i++); return true; }'),
    });
    await s.evaluate([call('crash', 'crash')], AGENT);
    await expect.poll(() => sandboxes.logLines.some((l) => l.msg === 'plugin worker stopped; starting another'), { timeout: 5000 }).toBe(true);
    await expect.poll(async () => (await s.evaluate([call('crash', 'fine')], AGENT))[0]?.kind, { timeout: 5000 }).toBe('allowed');
  });

  it("a promise a plugin leaves unhandled is logged and the worker keeps serving", async () => {
    const s = await start({
      'stray.mjs': plugin('stray', 'function evaluate() { Promise.reject(new Error("forgotten")); return true; }'),
    });
    expect(await s.evaluate([call('stray')], AGENT)).toEqual([{ kind: 'allowed' }]);
    await expect.poll(() => sandboxes.logLines.some((l) => String(l.msg).includes('left a promise rejection unhandled')), { timeout: 5000 }).toBe(true);
    expect(await s.evaluate([call('stray')], AGENT)).toEqual([{ kind: 'allowed' }]);
  });

  it('an operand that no longer fits the plugin schema is refused in the worker too', async () => {
    const s = await start({
      'strict.mjs': `import { z } from 'zod';\nexport const name = 'strict';\nexport const description = 'd';\nexport const operand = z.string();\nexport function evaluate() { return true; }\n`,
    });
    expect(await s.evaluate([call('strict', 'x', 'fits'), call('strict', 'x', 42)], AGENT)).toEqual([{ kind: 'allowed' }, { kind: 'refused' }]);
  });
});

describe('loading', () => {
  it('async and generator evaluate functions are refused at load, naming the file', async () => {
    await writeFile(join(sandboxes.dir, 'async.mjs'), plugin('async_op', 'async function evaluate() { return true; }'));
    await expect(loadPlugins(sandboxes.dir)).rejects.toThrow(/async\.mjs: .*must be a plain synchronous function/);
    await rm(join(sandboxes.dir, 'async.mjs'));
    await writeFile(join(sandboxes.dir, 'gen.mjs'), plugin('gen_op', 'function* evaluate() { yield true; }'));
    await expect(loadPlugins(sandboxes.dir)).rejects.toThrow(/gen\.mjs: .*must be a plain synchronous function/);
  });

  it('a plugin set the worker cannot load is refused and the previous set keeps serving', async () => {
    const s = await start({ 'good.mjs': plugin('good', 'function evaluate() { return true; }') });
    await expect(s.setModules([{ name: 'ghost', url: 'file:///nonexistent/ghost.mjs' }])).rejects.toThrow(/could not load the plugins/);
    expect(await s.evaluate([call('good')], AGENT)).toEqual([{ kind: 'allowed' }]);
  });
});

describe('failure log', () => {
  it('logs one line per operator and kind per window, counting the ones it left out', () => {
    let nowMs = 0;
    const log = new LogThrottle(10_000, () => nowMs);
    expect(log.admit('regex:threw')).toBe(0);
    expect(log.admit('regex:threw')).toBeNull();
    expect(log.admit('regex:threw')).toBeNull();
    expect(log.admit('cidr:threw')).toBe(0);
    nowMs = 10_000;
    expect(log.admit('regex:threw')).toBe(2);
  });
});
