// SECURITY.md, "One agent cannot starve the others through plugin operators", over HTTP: an agent
// (from a self-made host key, no approval) whose plugin call overruns PLUGIN_BUDGET_MS on every
// request, sending at its full rate limit, costs one worker per trip window, and another agent's
// plugin executes keep answering 200. The busy fixture (test/fixtures/plugin-isolation/busy.mjs)
// stands for an expensive pattern. Speed is measured in bench/plugin-isolation.ts, not here.
import { describe, expect, it } from 'vitest';
import { Client, code, http, type HttpResult } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { pluginsFolderForBlock } from '../support/plugins.ts';
import { testServerForBlock } from '../support/server.ts';

const RATE_PER_MINUTE = 600;
const BUDGET_MS = 200;
const METRICS_TOKEN = 'metrics-token-0123456789abcdef';
/** How long the attacker keeps sending; far less than the 60 s trip, so one trip covers it. */
const ATTACK_MS = 2_000;
// `echo` declaring its one argument: constraints may name only declared arguments.
const ECHO_X = { name: 'echo', description: 'echoes x', input: { type: 'object', properties: { x: {} } }, handler: { type: 'echo' } };

const plugins = pluginsFolderForBlock('agentgate-plugin-isolation-', { copies: ['test/fixtures/plugin-isolation/busy.mjs', 'plugins/regex.ts'] });
const server = testServerForBlock(() => ({
  store: 'redis', pluginsDir: plugins.path, capabilities: [ECHO_X],
  env: { RATE_LIMIT_AGENT_PER_MINUTE: String(RATE_PER_MINUTE), PLUGIN_BUDGET_MS: String(BUDGET_MS), METRICS_TOKEN },
}));
const c = new Client(server);

/** An autonomous agent of a brand-new host key: what anyone on the network can make, no approval. */
async function autonomousAgent(constraints: Record<string, unknown>) {
  const { res, agent } = await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'echo', constraints }] });
  expect(res.status, res.text).toBe(200);
  return agent!;
}

/** The value of the plugin failure counter for `busy` and this kind (0 when absent). */
async function busyFailures(kind: string): Promise<number> {
  const res = await http('GET', `${server.baseUrl}/metrics`, { token: METRICS_TOKEN });
  expect(res.status).toBe(200);
  const line = res.text.split('\n').find((l) => l.startsWith('agentgate_plugin_operator_failures_total{') && l.includes('operator="busy"') && l.includes(`kind="${kind}"`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('one agent cannot starve the others through plugin operators', () => {
  it("an agent whose plugin call always overruns, at its full rate limit, costs one worker kill per trip; another agent's plugin executes all answer 200", async () => {
    const attacker = await autonomousAgent({ x: { busy: 5_000 } });
    const victim = await autonomousAgent({ x: { busy: 0 } });
    expect((await c.execute(victim, 'echo', { x: 'warm' })).status).toBe(200);

    // Both send one request every 60000 / RATE_PER_MINUTE ms (their full rate limit), without
    // waiting for answers: the attacker its overrunning call, the victim an ordinary one.
    const attacks: Array<Promise<HttpResult>> = [];
    const victims: Array<Promise<HttpResult>> = [];
    const intervalMs = 60_000 / RATE_PER_MINUTE;
    for (let i = 0; i < ATTACK_MS / intervalMs; i++) {
      attacks.push(c.execute(attacker, 'echo', { x: `attack-${i}` }));
      victims.push(c.execute(victim, 'echo', { x: `victim-${i}` }));
      await new Promise((r) => setTimeout(r, intervalMs));
    }
    const attackAnswers = (await Promise.all(attacks)).map(code);
    const victimAnswers = (await Promise.all(victims)).map(code);

    expect(victimAnswers.filter((answer) => answer !== '200')).toEqual([]);
    // Every attack is refused as a violation (or by the attacker's own rate limit), never allowed, never a 503.
    expect(attackAnswers.filter((answer) => answer !== '403 constraint_violated' && answer !== '429 rate_limited')).toEqual([]);
    expect(attackAnswers.filter((answer) => answer === '403 constraint_violated').length).toBeGreaterThan(10);
    // One overrun terminated one worker; every later attack was answered without reaching one.
    expect(await busyFailures('timeout')).toBe(1);
    expect(await busyFailures('tripped')).toBe(attackAnswers.filter((answer) => answer === '403 constraint_violated').length - 1);
  });
});

describe('regex patterns whose worst case exceeds the budget are refused when the grant is requested', () => {
  const FINDING = '(?i)(?:[a-z]|[0-9]|_){100,1000}@';

  it("the finding's pattern is 400 invalid_request naming the reason, at registration and at request-capability", async () => {
    const { res } = await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'echo', constraints: { x: { regex: FINDING } } }] });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(/regex.*too costly to match: its counted repetitions add up to 1000, so it would compile to more than 500 RE2 instructions/);

    const agent = await autonomousAgent({ x: { regex: '^[A-Z]{3}$' } });
    const requested = await c.requestCapability(agent, { capabilities: [{ name: 'echo', constraints: { x: { regex: FINDING } } }] });
    expect(code(requested)).toBe('400 invalid_request');
    expect(requested.json.message).toMatch(/too costly to match/);
  });

  it('ordinary patterns are granted and matched', async () => {
    const agent = await autonomousAgent({ x: { regex: '^[a-z0-9._%+-]+@example\\.com$' } });
    expect((await c.execute(agent, 'echo', { x: 'ann@example.com' })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', { x: 'ann@elsewhere.org' }))).toBe('403 constraint_violated');
  });
});
