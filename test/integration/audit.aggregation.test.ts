// SECURITY.md ("The audit trail"): a caller within its limits cannot flush the trail. An agent that
// can do nothing but be refused (revoked, or pending under a host anyone can make) is refused for
// its status before the budgets' verdict is read, so it never hears 429; before this was fixed each
// of its refusals was one `execute.refused` event (1,500 in 5.5 s, the default 100,000-event trail
// flushed in about 6 minutes). Now its refusals are counted per key and window and recorded as one
// summary (audit/log.ts), and they still spend its host's per-minute budget, so the host's
// live agents hear 429 once it is spent. Real server, real HTTP, both stores.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, type TestAgent } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

type Event = Record<string, any> & { id: string; type: string };

const WINDOW_SECONDS = 2;
const CALLS = 300;

/** How many refusals the events stand for: a first refusal is one, a summary its `count`. */
const refusalsIn = (events: Event[]) => events.reduce((sum, event) => sum + (typeof event.count === 'number' ? event.count : 1), 0);

/** Most events `calls` refusals of one key may add while they span `elapsedMs`: a first and a summary per window. */
const mostEvents = (elapsedMs: number) => 2 * (Math.ceil(elapsedMs / (WINDOW_SECONDS * 1000)) + 1);

forEachStore('an unusable agent cannot flush the audit trail', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { AUDIT_AGGREGATE_WINDOW_SECONDS: String(WINDOW_SECONDS), AUDIT_FLUSH_MS: '100' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  /** Every execute.refused event matching `query`, once they stand for `calls` refusals (summaries come when windows end). */
  const refusalsFor = async (query: string, calls: number): Promise<Event[]> => {
    let events: Event[] = [];
    await expect.poll(async () => {
      const res = await c.admin('GET', `/admin/audit?type=execute.refused&limit=500&${query}`);
      expect(res.status, res.text).toBe(200);
      events = res.json.events as Event[];
      return refusalsIn(events);
    }, { timeout: (WINDOW_SECONDS + 5) * 1000, interval: 200 }).toBe(calls);
    return events;
  };

  /** Sends `calls` executes, round robin over `agents`, each refused with `expected`; answers how long they took. */
  const hammer = async (agents: TestAgent[], expected: string, calls = CALLS): Promise<number> => {
    const startMs = Date.now();
    for (let i = 0; i < calls; i++) expect(code(await c.execute(agents[i % agents.length]!, 'echo', { i }))).toBe(expected);
    return Date.now() - startMs;
  };

  it('a revoked agent hammering execute adds one event per window, with its count, not one per call', async () => {
    const agent = await c.activeAgent(['echo']);
    expect((await c.admin('POST', `/admin/agents/${agent.id}/revoke`)).status).toBe(200);
    const elapsedMs = await hammer([agent], '403 agent_revoked');

    const events = await refusalsFor(`agent_id=${agent.id}`, CALLS);
    expect(events.length).toBeLessThanOrEqual(mostEvents(elapsedMs));
    expect(events.length).toBeLessThan(CALLS / 10);
    const [first] = events.slice(-1);
    expect(first).toMatchObject({ actor: 'agent', agent_id: agent.id, outcome: 'refused', code: 'agent_revoked', capability: 'echo' });
    expect(first).not.toHaveProperty('count');
    const summaries = events.filter((event) => typeof event.count === 'number');
    expect(summaries.length).toBeGreaterThanOrEqual(1);
    for (const summary of summaries) {
      expect(summary).toMatchObject({
        type: 'execute.refused', actor: 'agent', agent_id: agent.id, host_id: first!.host_id, outcome: 'refused', code: 'agent_revoked',
        first_at: expect.any(String), last_at: expect.any(String), window_ms: WINDOW_SECONDS * 1000,
      });
      // Who and what, never what the caller varies freely.
      expect(summary).not.toHaveProperty('capability');
      expect(summary).not.toHaveProperty('request_id');
      expect(Date.parse(summary.first_at)).toBeLessThanOrEqual(Date.parse(summary.last_at));
      expect(Date.parse(summary.last_at)).toBeLessThanOrEqual(Date.parse(summary.at));
    }
  });

  it('a pending agent of a self-made host hammering execute adds one event per window, with its count, not one per call', async () => {
    // Anyone can make this host: a delegated registration from a key nobody knows (pending host, pending agents).
    const selfMade = await newEd25519();
    const one = (await c.register(selfMade, { mode: 'delegated', capabilities: ['echo'] })).agent!;
    const two = (await c.register(selfMade, { mode: 'delegated', capabilities: ['echo'] })).agent!;
    expect(one.registration.status).toBe('pending');
    const hostId = one.registration.host_id as string;
    expect(two.registration.host_id).toBe(hostId);
    const elapsedMs = await hammer([one, two], '403 host_pending');

    // Refused for the host's status, the host's agents share one key: more agents, no more events.
    const events = await refusalsFor(`host_id=${hostId}`, CALLS);
    expect(events.length).toBeLessThanOrEqual(mostEvents(elapsedMs));
    expect(events.length).toBeLessThan(CALLS / 10);
    for (const summary of events.filter((event) => typeof event.count === 'number')) {
      expect(summary).toMatchObject({ type: 'execute.refused', actor: 'agent', host_id: hostId, code: 'host_pending', window_ms: WINDOW_SECONDS * 1000 });
      expect(summary).not.toHaveProperty('agent_id');
    }
  });

  it('repeats of different refusals are counted apart: each code has its own key', async () => {
    const agent = await c.activeAgent(['echo']);
    for (let i = 0; i < 20; i++) expect(code(await c.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 capability_not_granted');
    for (let i = 0; i < 20; i++) expect(code(await c.execute(agent, 'no_such_capability', {}))).toBe('404 capability_not_found');
    const events = await refusalsFor(`agent_id=${agent.id}`, 40);
    const byCode = (wanted: string) => refusalsIn(events.filter((event) => event.code === wanted));
    expect(byCode('capability_not_granted')).toBe(20);
    expect(byCode('capability_not_found')).toBe(20);
    expect(events.length).toBeLessThanOrEqual(8);
  });
});

forEachStore('an unusable agent\'s refusals spend its host\'s budget', (storeKind) => {
  const HOST_PER_MINUTE = 30;
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { RATE_LIMIT_HOST_PER_MINUTE: String(HOST_PER_MINUTE) } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  /** A linked host with one live agent and one that is `kind`. */
  const hostWith = async (kind: 'revoked' | 'pending') => {
    const host = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: 'user-1' })).status).toBe(201);
    const live = (await c.register(host, { mode: 'delegated', capabilities: ['echo'] })).agent!;
    expect(live.registration.status).toBe('active');
    // weather_lookup is not among the host's defaults, so this agent waits for a person's approval.
    const unusable = (await c.register(host, { mode: 'delegated', capabilities: kind === 'pending' ? ['echo', 'weather_lookup'] : ['echo'] })).agent!;
    if (kind === 'revoked') expect((await c.admin('POST', `/admin/agents/${unusable.id}/revoke`)).status).toBe(200);
    else expect(unusable.registration.status).toBe('pending');
    return { live, unusable };
  };

  it.each(['revoked', 'pending'] as const)('after a %s agent\'s refusals spent its host\'s per-minute budget, the host\'s live agent hears 429', async (kind) => {
    const { live, unusable } = await hostWith(kind);
    expect((await c.execute(live, 'echo', {})).status).toBe(200);
    // Refused for its status every time (never 429: that verdict is read after the lifecycle's), yet each spends a point of the host's budget.
    for (let i = 0; i < HOST_PER_MINUTE; i++) expect(code(await c.execute(unusable, 'echo', {}))).toBe(kind === 'revoked' ? '403 agent_revoked' : '403 agent_pending');
    const refused = await c.execute(live, 'echo', {});
    expect(code(refused)).toBe('429 rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});
