// One access line per request: who asked (agent and host, once a signature proved them),
// what (method and route pattern, never the URL with its ids), the answer (status, the refusal's
// error code) and how long it took; the request id in X-Request-Id on every answer and in 5xx
// bodies, so a failure a client reports can be found in the log. Debug lines only at debug.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, type LogLevel } from '../../src/logger.ts';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

type Entry = Record<string, unknown>;

async function serverLoggingAt(level: LogLevel) {
  const entries: Entry[] = [];
  const server = await startTestServer({ logger: createLogger(level, (line) => entries.push(JSON.parse(line) as Entry)) });
  return { server, entries, c: new Client(server) };
}

/** The access line of the request with this id (there must be exactly one). */
function accessLine(entries: Entry[], requestId: string | null): Entry {
  const found = entries.filter((e) => e.msg === 'request' && e.requestId === requestId);
  expect(found, `access lines for ${requestId}`).toHaveLength(1);
  return found[0]!;
}

describe('access lines and request ids (LOG_LEVEL info)', () => {
  let server: TestServer;
  let entries: Entry[];
  let c: Client;
  beforeAll(async () => {
    ({ server, entries, c } = await serverLoggingAt('info'));
  });
  afterAll(() => server.close());

  it('every answer carries its own X-Request-Id, and its access line names method, route, status and time', async () => {
    const answers = await Promise.all([http('GET', c.url('/healthz')), http('GET', c.url('/no/such/path')), http('GET', c.url('/admin/hosts/hst_1'))]);
    const ids = answers.map((a) => a.headers.get('x-request-id'));
    expect(new Set(ids).size).toBe(3);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-z]+$/);
    const [health, missing, admin] = ids.map((id) => accessLine(entries, id!));
    expect(health).toMatchObject({ level: 'info', method: 'GET', route: '/healthz', status: 200 });
    expect(health!.durationMs).toEqual(expect.any(Number));
    expect(missing).toMatchObject({ route: '(unmatched)', status: 404, code: 'not_found' });
    // Refused by the admin guard before any route ran, still labelled with the route's pattern.
    expect(admin).toMatchObject({ route: '/admin/hosts/:hostId', status: 401, code: 'authentication_required' });
  });

  it("an agent's execute is logged with the agent and its host; a refusal with its error code", async () => {
    const agent = await c.activeAgent([{ name: 'transfer_money', constraints: { amount: { max: 10 } } }]);
    const refused = await c.execute(agent, 'transfer_money', { amount: 50, currency: 'USD' });
    expect(code(refused)).toBe('403 constraint_violated');
    const line = accessLine(entries, refused.headers.get('x-request-id'));
    const hostId = (await c.status(agent.host, agent.id)).json.host_id;
    expect(line).toMatchObject({ method: 'POST', route: '/capability/execute', status: 403, code: 'constraint_violated', agentId: agent.id, hostId });
  });

  it('a body that is not JSON is logged under the route it was sent to, as invalid_request, with no agent (nothing was verified)', async () => {
    const res = await http('POST', c.executeUrl, { token: 'not-a-jwt', body: '{"capability":' });
    expect(code(res)).toBe('400 invalid_request');
    const line = accessLine(entries, res.headers.get('x-request-id'));
    expect(line).toMatchObject({ route: '/capability/execute', status: 400, code: 'invalid_request' });
    expect(line.agentId).toBeUndefined();
  });

  it('a registration by a host new to the server is logged with the agent and host it created', async () => {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    expect(res.status).toBe(200);
    expect(accessLine(entries, res.headers.get('x-request-id'))).toMatchObject({ route: '/agent/register', status: 200, agentId: agent!.id, hostId: res.json.host_id });
  });

  it('a 5xx body carries the request id of its X-Request-Id header, so a client can quote it; a 4xx body does not', async () => {
    const agent = await c.activeAgent(['flaky_backend']);
    const failed = await c.execute(agent, 'flaky_backend', {});
    expect(failed.status).toBe(500);
    expect(failed.json).toEqual({ error: 'internal_error', message: 'the capability backend failed', request_id: failed.headers.get('x-request-id') });
    expect(entries.some((e) => e.msg === 'capability backend failed' && e.level === 'error')).toBe(true);
    const refused = await http('GET', c.url('/no/such/path'));
    expect(refused.json.request_id).toBeUndefined();
  });

  it('at info, none of the debug lines are written', () => {
    expect(entries.filter((e) => e.level === 'debug')).toEqual([]);
  });
});

describe('debug lines (LOG_LEVEL debug)', () => {
  let server: TestServer;
  let entries: Entry[];
  let c: Client;
  beforeAll(async () => {
    ({ server, entries, c } = await serverLoggingAt('debug'));
  });
  afterAll(() => server.close());

  it('say what the policy was asked (argument keys, not values), what the budgets answered and when the key cache missed', async () => {
    const agent = await c.activeAgent([{ name: 'transfer_money', constraints: { amount: { max: 1000 } } }]);
    entries.length = 0;
    expect((await c.execute(agent, 'transfer_money', { amount: 250, currency: 'USD', note: 'rent for march' })).status).toBe(200);
    const input = entries.find((e) => e.msg === 'policy input' && e.entrypoint === 'agentgate/execute') as { input: { arguments: unknown; agent: unknown } };
    expect(input.input.arguments).toEqual({ amount: '[number]', currency: '[string]', note: '[string]' });
    expect(input.input.agent).toMatchObject({ id: agent.id });
    expect(JSON.stringify(entries)).not.toContain('rent for march');
    expect(entries.find((e) => e.msg === 'policy decision')).toMatchObject({ entrypoint: 'agentgate/execute', allow: true });
    const verdicts = entries.filter((e) => e.msg === 'rate limit verdict');
    expect(verdicts.map((v) => v.dimension).sort()).toEqual(['agent', 'host']);
    expect(verdicts.every((v) => v.allowed === true && typeof v.remaining === 'number')).toBe(true);
    // The agent was registered on this instance but never executed: its key was not cached yet.
    expect(entries.find((e) => e.msg === 'agent key cache miss')).toMatchObject({ agentId: agent.id, reason: 'absent' });
    expect(entries.filter((e) => e.msg === 'request')).toHaveLength(1);
  });
});
