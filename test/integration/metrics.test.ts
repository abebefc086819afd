// GET /metrics: guarded by a bearer token or served on a port of its own, off (404, and
// nothing recorded) with neither; every family present after real traffic, with the values that
// traffic must have produced. Metrics reveal traffic and refusal patterns, so the guard tests are
// named after what they refuse.
import { afterAll, describe, expect, it } from 'vitest';
import { shippedCatalogWithEchoArguments } from '../support/catalog.ts';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { startAgentgate, STARTUP_BOUND_MS, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { freePort } from '../support/net.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { pluginsFolderForBlock } from '../support/plugins.ts';
import { testServerForBlock, type TestServer } from '../support/server.ts';

const METRICS_TOKEN = 'metrics-token-0123456789abcdef';

/** The samples of an exposition, keyed `name{label="value",...}` exactly as written. */
function samples(text: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    found.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return found;
}

/** One sample's value (0 when absent), labels given in any order. */
function value(all: Map<string, number>, name: string, labels: Record<string, string> = {}): number {
  for (const [key, v] of all) {
    const brace = key.indexOf('{');
    const keyName = brace === -1 ? key : key.slice(0, brace);
    if (keyName !== name) continue;
    const keyLabels = brace === -1 ? {} : Object.fromEntries([...key.slice(brace + 1, -1).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.keys(keyLabels).length === Object.keys(labels).length && Object.entries(labels).every(([k, l]) => keyLabels[k] === l)) return v;
  }
  return 0;
}

const scrape = async (server: TestServer) => {
  const res = await http('GET', `${server.baseUrl}/metrics`, { token: METRICS_TOKEN });
  expect(res.status).toBe(200);
  return samples(res.text);
};

describe('metrics that are off', () => {
  const server = testServerForBlock();

  it('without METRICS_TOKEN or METRICS_PORT, /metrics does not exist (404), with or without a token, and nothing is recorded', async () => {
    expect(code(await http('GET', `${server.baseUrl}/metrics`))).toBe('404 not_found');
    expect(code(await http('GET', `${server.baseUrl}/metrics`, { token: METRICS_TOKEN }))).toBe('404 not_found');
    expect(server.app.metrics.enabled).toBe(false);
  });
});

describe('metrics behind METRICS_TOKEN', () => {
  // A plugin operator that throws, to be counted.
  const plugins = pluginsFolderForBlock('agentgate-metrics-plugins-', {
    files: {
      'explodes.mjs': `import { z } from 'zod';
export const name = 'explodes';
export const description = 'throws on every call';
export const operand = z.boolean();
export function evaluate() { throw new Error('boom'); }
`,
    },
  });
  // Echo declares `flag`, the argument the throwing plugin constrains.
  const server = testServerForBlock(() => ({
    store: 'redis', pluginsDir: plugins.path, capabilities: shippedCatalogWithEchoArguments(['flag']), env: { METRICS_TOKEN, RATE_LIMIT_IP_PER_MINUTE: '2' },
  }));
  const c = new Client(server);

  it('a scraper without a token is refused 401 and told to bring a bearer token', async () => {
    const res = await http('GET', `${server.baseUrl}/metrics`);
    expect(code(res)).toBe('401 authentication_required');
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    expect(res.text).not.toContain('agentgate_');
  });

  it('a scraper with a wrong token (the admin token, say) is refused 403', async () => {
    const res = await http('GET', `${server.baseUrl}/metrics`, { token: 'test-admin-token-0123456789' });
    expect(code(res)).toBe('403 unauthorized');
    expect(res.text).not.toContain('agentgate_');
  });

  it('with the token, the exposition is Prometheus text and is never cached', async () => {
    const res = await http('GET', `${server.baseUrl}/metrics`, { token: METRICS_TOKEN });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.text).toMatch(/^# HELP /m);
    expect(res.text).toMatch(/^process_cpu_seconds_total /m);
  });

  it('an execute refused with constraint_violated increments exactly that decision series, and the request series of its route and status', async () => {
    const agent = await c.activeAgent([{ name: 'transfer_money', constraints: { amount: { max: 100 } } }]);
    const before = await scrape(server);
    expect(code(await c.execute(agent, 'transfer_money', { amount: 500, currency: 'USD' }))).toBe('403 constraint_violated');
    const after = await scrape(server);
    const decision = { endpoint: 'execute', outcome: 'refused', code: 'constraint_violated' };
    expect(value(after, 'agentgate_decisions_total', decision) - value(before, 'agentgate_decisions_total', decision)).toBe(1);
    // No other decision series moved.
    for (const [key, v] of after) {
      if (key.startsWith('agentgate_decisions_total{') && !key.includes('code="constraint_violated"')) expect(v, key).toBe(before.get(key) ?? 0);
    }
    const request = { method: 'POST', route: '/capability/execute', status: '403' };
    expect(value(after, 'agentgate_http_requests_total', request) - value(before, 'agentgate_http_requests_total', request)).toBe(1);
    const latency = { method: 'POST', route: '/capability/execute' };
    expect(value(after, 'agentgate_http_request_duration_seconds_count', latency) - value(before, 'agentgate_http_request_duration_seconds_count', latency)).toBe(1);
    expect(value(after, 'agentgate_http_request_duration_seconds_sum', latency)).toBeGreaterThan(value(before, 'agentgate_http_request_duration_seconds_sum', latency));
  });

  it('every family is present after real traffic, with sensible values', async () => {
    const agent = await c.activeAgent([{ name: 'echo', constraints: { flag: { explodes: true } } }, 'weather_lookup']);
    const before = await scrape(server);
    expect((await c.execute(agent, 'weather_lookup', { city: 'Oslo' })).status).toBe(200);
    expect((await c.execute(agent, 'weather_lookup', { city: 'Rome' })).status).toBe(200);
    // The throwing plugin is a violation, and counted by operator.
    expect(code(await c.execute(agent, 'echo', { flag: true }))).toBe('403 constraint_violated');
    // Anonymous listing spends the caller address's budget (2 a minute here): the third is refused.
    const listed = [];
    for (let i = 0; i < 3; i++) listed.push((await http('GET', c.url('/capability/list'))).status);
    expect(listed).toEqual([200, 200, 429]);
    // An agent waiting for approval (an unlinked host asking for a capability that needs one).
    const { res } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    const after = await scrape(server);
    const delta = (name: string, labels: Record<string, string> = {}) => value(after, name, labels) - value(before, name, labels);

    expect(delta('agentgate_decisions_total', { endpoint: 'execute', outcome: 'allowed', code: 'none' })).toBe(2);
    expect(delta('agentgate_decisions_total', { endpoint: 'register', outcome: 'allowed', code: 'none' })).toBe(1);
    expect(delta('agentgate_http_requests_total', { method: 'GET', route: '/capability/list', status: '429' })).toBe(1);
    expect(delta('agentgate_rate_limit_refusals_total', { dimension: 'ip' })).toBe(1);
    expect(delta('agentgate_plugin_operator_failures_total', { operator: 'explodes', kind: 'threw' })).toBe(1);
    expect(delta('agentgate_policy_evaluation_duration_seconds_count', { entrypoint: 'agentgate/execute' })).toBe(3);
    expect(delta('agentgate_policy_evaluation_duration_seconds_count', { entrypoint: 'agentgate/grants' })).toBeGreaterThanOrEqual(1);
    expect(value(after, 'agentgate_policy_evaluation_duration_seconds_bucket', { entrypoint: 'agentgate/execute', le: '+Inf' }))
      .toBe(value(after, 'agentgate_policy_evaluation_duration_seconds_count', { entrypoint: 'agentgate/execute' }));
    const { sha256, generation } = server.app.deps.policy.info();
    expect(value(after, 'agentgate_policy_generation', { sha256 })).toBe(generation);
    expect(value(after, 'agentgate_policy_loaded_timestamp_seconds')).toBeCloseTo(server.app.deps.policy.info().loadedAtMs / 1000, 3);
    expect(after.get('agentgate_policy_instance_replacements_total')).toBe(0);
    // The agent's key was read once into the cache, then found there.
    expect(delta('agentgate_key_cache_lookups_total', { result: 'hit' })).toBeGreaterThanOrEqual(2);
    expect(value(after, 'agentgate_key_cache_lookups_total', { result: 'miss' })).toBeGreaterThanOrEqual(1);
    // Each execute is one round trip to Redis, timed.
    expect(delta('agentgate_store_call_duration_seconds_count', { call: 'executeRoundTrip' })).toBe(3);
    expect(after.get('agentgate_redis_connection_errors_total')).toBe(0);
    expect(value(after, 'agentgate_pending_approvals', { kind: 'approval' })).toBeGreaterThanOrEqual(1);
    expect(value(after, 'agentgate_pending_approvals', { kind: 'agent' })).toBeGreaterThanOrEqual(1);
    expect([...after.keys()].some((k) => k.startsWith('agentgate_store_call_failures_total'))).toBe(false);
  });

  it('ids and raw paths never become label values: a probe of an unknown path and an admin URL are labelled by pattern', async () => {
    await http('GET', c.url('/admin/agents/agt_not_a_label/approve'));
    await http('GET', c.url('/no/such/path/agt_not_a_label'));
    const res = await http('GET', `${server.baseUrl}/metrics`, { token: METRICS_TOKEN });
    expect(res.text).not.toContain('agt_not_a_label');
    expect(res.text).toContain('route="(unmatched)"');
  });
});

describe('metrics on METRICS_PORT (src/main.ts)', () => {
  const servers: Agentgate[] = [];
  afterAll(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop()));
  });

  /** Starts the real server; it resolves once every worker has logged its start-up line. */
  const start = async (env: Record<string, string>) => {
    const server = await startAgentgate({ env: { ADMIN_TOKEN: '', METRICS_TOKEN: '', METRICS_PORT: '', ...env } });
    servers.push(server);
    return server;
  };
  /** The status of GET /metrics on `port` (0 while nothing listens there yet). */
  const scrapeStatus = async (port: number) => (await http('GET', `http://127.0.0.1:${port}/metrics`).catch(() => ({ status: 0 }))).status;

  it('with METRICS_PORT, /metrics is served on that port to anyone who reaches it, and not on the main port', async () => {
    const metricsPort = await freePort();
    const { port, startup } = await start({ METRICS_PORT: String(metricsPort) });
    expect(startup.metrics).toBe(`on 127.0.0.1:${metricsPort}/metrics`);
    await expect.poll(() => scrapeStatus(metricsPort), { timeout: STARTUP_BOUND_MS }).toBe(200);
    // Traffic on the main port shows on the metrics port.
    expect((await http('GET', `http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    const exposition = samples((await http('GET', `http://127.0.0.1:${metricsPort}/metrics`)).text);
    expect(value(exposition, 'agentgate_http_requests_total', { method: 'GET', route: '/healthz', status: '200' })).toBe(1);
    expect(code(await http('GET', `http://127.0.0.1:${port}/metrics`))).toBe('404 not_found');
    expect(code(await http('GET', `http://127.0.0.1:${metricsPort}/healthz`))).toBe('404 not_found');
  }, WITH_SERVERS_TIMEOUT_MS);

  it('with METRICS_PORT and METRICS_TOKEN, the port asks for the token too', async () => {
    const metricsPort = await freePort();
    const { startup } = await start({ METRICS_PORT: String(metricsPort), METRICS_TOKEN });
    expect(startup.metrics).toBe(`on 127.0.0.1:${metricsPort}/metrics (bearer METRICS_TOKEN)`);
    await expect.poll(() => scrapeStatus(metricsPort), { timeout: STARTUP_BOUND_MS }).toBe(401);
    expect((await http('GET', `http://127.0.0.1:${metricsPort}/metrics`, { token: METRICS_TOKEN })).status).toBe(200);
  }, WITH_SERVERS_TIMEOUT_MS);

  it("with several workers, the primary serves every worker's metrics added up on METRICS_PORT", async () => {
    const redisUrl = await redisUrlForTests();
    const prefix = uniquePrefix('metrics-cluster');
    const metricsPort = await freePort();
    try {
      const { port } = await start({ METRICS_PORT: String(metricsPort), WORKERS: '2', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix });
      await expect.poll(() => scrapeStatus(metricsPort), { timeout: STARTUP_BOUND_MS }).toBe(200);
      // Connections spread over both workers; the scrape counts all of them once.
      for (let i = 0; i < 12; i++) expect((await http('GET', `http://127.0.0.1:${port}/healthz`, { headers: { connection: 'close' } })).status).toBe(200);
      const exposition = samples((await http('GET', `http://127.0.0.1:${metricsPort}/metrics`)).text);
      expect(value(exposition, 'agentgate_http_requests_total', { method: 'GET', route: '/healthz', status: '200' })).toBe(12);
      // State every worker reports alike is not multiplied by the number of workers.
      const generations = [...exposition].filter(([k]) => k.startsWith('agentgate_policy_generation{'));
      expect(generations.map(([, v]) => v)).toEqual([1]);
    } finally {
      // The workers' keys are deleted once every process has stopped writing them.
      await Promise.all(servers.splice(0).map((server) => server.stop()));
      await deletePrefix(redisUrl, prefix);
    }
  }, WITH_SERVERS_TIMEOUT_MS);

  it('with neither, the start-up line says metrics are off', async () => {
    const { port, startup } = await start({});
    expect(startup.metrics).toMatch(/^off \(set METRICS_TOKEN or METRICS_PORT\)/);
    expect(code(await http('GET', `http://127.0.0.1:${port}/metrics`))).toBe('404 not_found');
  }, WITH_SERVERS_TIMEOUT_MS);
});
