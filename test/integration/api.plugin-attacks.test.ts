// SECURITY.md's "Plugins cannot stop the server" over HTTP, as an adversarial audit ran it: one request must not freeze the
// server through a plugin operator, and no plugin answer may end the process.
import { describe, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { pluginsFolderForBlock } from '../support/plugins.ts';
import { testServerForBlock } from '../support/server.ts';

// A stuck call ends at the budget, and the server must answer /healthz before that: a whole second
// leaves a busy machine room to serve it.
const BUDGET_MS = 1000;

const SPIN = `import { z } from 'zod';
export const name = 'spin';
export const description = 'busy for 5 s on the argument "loop" (forever, to a request)';
export const operand = z.literal(true);
export function evaluate(_operand, actual) {
  // Bounded so that, run in process as plugins once were, the test fails on its assertions instead of
  // hanging the test run with it.
  if (actual === 'loop') { const until = Date.now() + 5000; while (Date.now() < until); }
  return true;
}
`;

const REJECTING = `import { z } from 'zod';
export const name = 'rejecting';
export const description = 'answers a rejected promise (an async operator in disguise)';
export const operand = z.literal(true);
export function evaluate() { return Promise.reject(new Error('async failure')); }
`;

// `echo` declaring its one argument: constraints may name only declared arguments.
const ECHO_X = { name: 'echo', description: 'echoes x', input: { type: 'object', properties: { x: {} } }, handler: { type: 'echo' } };

const plugins = pluginsFolderForBlock('agentgate-plugin-attacks-', { copies: ['plugins/regex.ts'], files: { 'spin.mjs': SPIN, 'rejecting.mjs': REJECTING } });
const server = testServerForBlock(() => ({ store: 'redis', pluginsDir: plugins.path, capabilities: [ECHO_X], env: { PLUGIN_BUDGET_MS: String(BUDGET_MS) } }));
const c = new Client(server);

/** An autonomous agent of a brand-new key: what anyone on the network can make, no approval. */
async function autonomousAgent(constraints: Record<string, unknown>) {
  const { res, agent } = await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'echo', constraints }] });
  expect(res.status, res.text).toBe(200);
  expect(res.json.status).toBe('active');
  return agent!;
}

/** Starts `slow`, then asks /healthz while it runs; answers which finished first. */
async function healthAnsweredWhile(slow: Promise<unknown>): Promise<{ healthFirst: boolean; healthStatus: number }> {
  let slowDone = false;
  void slow.then(() => { slowDone = true; });
  await new Promise((r) => setTimeout(r, 30));
  const health = await http('GET', c.url('/healthz'));
  return { healthFirst: !slowDone, healthStatus: health.status };
}

describe('one request cannot freeze the server', () => {
  it("ReDoS: the audit's regex constraint is refused at grant time for its size, and its shape under the bound is matched at once", async () => {
    const audit = await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'echo', constraints: { x: { regex: '^a{0,99}a{0,99}a{0,99}a{0,99}a{0,99}b$' } } }] });
    expect(code(audit.res)).toBe('400 invalid_request');
    expect(audit.res.json.message).toMatch(/too costly to match/);
    const pattern = '^a{0,20}a{0,20}a{0,20}a{0,20}a{0,20}b$';
    const agent = await autonomousAgent({ x: { regex: pattern } });
    const refused = await c.execute(agent, 'echo', { x: 'a'.repeat(256) });
    expect(code(refused)).toBe('403 constraint_violated');
    expect(refused.json.violations).toEqual([{ field: 'x', constraint: { regex: pattern }, actual: 'a'.repeat(256) }]);
    expect((await c.execute(agent, 'echo', { x: `${'a'.repeat(90)}b` })).status).toBe(200);
  });

  it('a plugin stuck in a loop is stopped at PLUGIN_BUDGET_MS: its execute is refused and others are answered meanwhile', async () => {
    const agent = await autonomousAgent({ x: { spin: true } });
    const startedMs = Date.now();
    const stuck = c.execute(agent, 'echo', { x: 'loop' });
    const { healthFirst, healthStatus } = await healthAnsweredWhile(stuck);
    expect(healthStatus).toBe(200);
    expect(healthFirst).toBe(true);
    const refused = await stuck;
    expect(code(refused)).toBe('403 constraint_violated');
    expect(refused.json.violations).toEqual([{ field: 'x', constraint: { spin: true }, actual: 'loop' }]);
    expect(Date.now() - startedMs).toBeGreaterThanOrEqual(BUDGET_MS);
    // The stuck worker was replaced: the same operator answers another agent's call. The grant that
    // overran is tripped (plugins/README.md), so its own next call is refused without running.
    const other = await autonomousAgent({ x: { spin: true } });
    expect((await c.execute(other, 'echo', { x: 'fine' })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', { x: 'fine' }))).toBe('403 constraint_violated');
  });
});

describe('no plugin answer can end the process', () => {
  it('an evaluate that answers a rejected promise is a violation, and the server keeps serving', async () => {
    const agent = await autonomousAgent({ x: { rejecting: true } });
    for (let i = 0; i < 3; i++) {
      const refused = await c.execute(agent, 'echo', { x: 'anything' });
      expect(code(refused)).toBe('403 constraint_violated');
    }
    await new Promise((r) => setTimeout(r, 100));
    expect((await http('GET', c.url('/healthz'))).status).toBe(200);
  });
});
