// Budgets under concurrency (protocol §11.5; DESIGN §2 step 6 and §10): two agentgate instances on one
// Redis deployment share every budget exactly, on one Redis as on a Redis Cluster of three masters.
// Requests race: every token is signed first, then all of them are sent at once, spread over both
// instances. rate-limiter-flexible spends a request's points with one atomic INCRBY per budget key
// (one key, one slot, so one master on a cluster), and a refused spend still counts; nothing in these
// races gives a point back, so the counter only grows: the requests it admits are exactly those whose
// running total stays within the budget, whatever order they arrive in. That is what makes every
// count below exact rather than "about N".
//
// The per-minute budgets are fixed windows that open with their first point: each case uses its own
// instances on a fresh key prefix (so fresh agents, hosts and counters), and checks that it finished
// well within the window, since a window that rolled over mid-test would admit a second budget.
// The last case holds a replay in flight (a point that is given back) while the agent calls.
// Slow (two Redis topologies, fourteen server starts): the `.slow.test.ts` name puts it in the slow project.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, type HttpResult, type TestAgent } from '../support/client.ts';
import { clusterForTests, type TestCluster } from '../support/redis-cluster.ts';
import { startFaultProxy } from '../support/redis-faults.ts';
import { redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { startTestServer, type TestServer, type TestServerOptions } from '../support/server.ts';
import { within } from '../support/within.ts';

/** Where both instances keep their state: the options each startTestServer call gets. */
interface Target {
  label: string;
  start(): Promise<{ options: TestServerOptions; stop(): Promise<void> }>;
}

const TARGETS: Target[] = [
  {
    label: 'one Redis',
    start: async () => ({ options: { redisUrl: await redisUrlForTests() }, stop: async () => {} }),
  },
  {
    label: 'a Redis Cluster of three masters',
    start: async () => {
      const cluster: TestCluster = await clusterForTests();
      const nodes = cluster.nodes.map((node) => `${node.host}:${node.port}`).join(',');
      return { options: { env: { REDIS_CLUSTER_NODES: nodes } }, stop: () => cluster.stop() };
    },
  },
];

/** The per-minute budgets' window; a case must finish well inside it for its counts to be exact. */
const WINDOW_MS = 60_000;
/** Each case starts two instances and sends up to a few dozen requests at once on a busy machine. */
const CASE_TIMEOUT_MS = 45_000;

/** The per-minute budget (agent's or host's) the cases race against. */
const PER_MINUTE_BUDGET = 20;
/** The budget of `metered`, its own, per agent per hour. */
const METERED_POINTS = 5;
const CAPABILITIES = [
  { name: 'echo', description: 'echo', input: { type: 'object' }, handler: { type: 'echo' } },
  { name: 'metered', description: 'a budget of its own', input: { type: 'object' }, rateLimit: { points: METERED_POINTS, durationSeconds: 3600 }, handler: { type: 'echo' } },
];

/** Two agentgate instances on one key prefix of the target: one shared state, two processes' worth of limiters. */
interface Instances {
  /** A client bound to each instance; `clients[i % 2]` spreads requests over both. */
  clients: [Client, Client];
  close(): Promise<void>;
}

async function startInstances(target: TestServerOptions, env: Record<string, string>): Promise<Instances> {
  const redisPrefix = uniquePrefix('limits-concurrency');
  const options: TestServerOptions = { ...target, store: 'redis', redisPrefix, capabilities: CAPABILITIES, env: { ...target.env, ...env } };
  // Both are closed even when one failed to start.
  const settled = await Promise.allSettled([startTestServer(options), startTestServer(options)]);
  const servers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const close = async () => {
    await Promise.all(servers.map((server: TestServer) => server.close()));
  };
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) {
    await close();
    throw failed.reason;
  }
  return { clients: [new Client(servers[0]!), new Client(servers[1]!)], close };
}

/** One request, signed ahead: `send` only goes on the wire. */
interface Prepared {
  send(): Promise<HttpResult>;
}

/** An execute of `capability` by `agent` on `client`'s instance, its token signed now. */
async function preparedExecute(client: Client, agent: TestAgent, capability: string): Promise<Prepared> {
  const token = await client.agentToken(agent, { aud: client.executeUrl });
  return { send: () => client.execute(agent, capability, {}, { token }) };
}

/** A batch of `items` by `agent` on `client`'s instance, its token signed now. */
async function preparedBatch(client: Client, agent: TestAgent, items: unknown[]): Promise<Prepared> {
  const token = await client.agentToken(agent, { aud: client.executeUrl });
  return { send: () => client.batchExecute(agent, items, { token }) };
}

/** Signs every request first, then sends them all at once, so they race in both instances and in Redis. */
async function race(prepare: Array<() => Promise<Prepared>>): Promise<HttpResult[]> {
  const prepared = await Promise.all(prepare.map((p) => p()));
  return Promise.all(prepared.map((p) => p.send()));
}

/** How many answers had each `status error` (e.g. `{ '200': 20, '429 rate_limited': 40 }`). */
function tally(results: HttpResult[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const res of results) counts[code(res)] = (counts[code(res)] ?? 0) + 1;
  return counts;
}

/** The counts that are not zero, as tally() reports them. */
function withoutZeros(counts: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0));
}

/** A 429 names a whole number of seconds to wait, no longer than the budget's window. */
function expectLimited(res: HttpResult, windowSeconds: number) {
  expect(code(res), res.text).toBe('429 rate_limited');
  expect(typeof res.json.message).toBe('string');
  const retryAfter = res.headers.get('retry-after');
  expect(retryAfter).toMatch(/^[1-9]\d*$/);
  expect(Number(retryAfter)).toBeLessThanOrEqual(windowSeconds);
}

/** The case finished inside the window its budget opened at `openedAtMs`, so only one budget was on offer. */
function expectWithinWindow(openedAtMs: number) {
  const elapsedMs = Date.now() - openedAtMs;
  expect(elapsedMs, `the case took ${elapsedMs} ms; a budget window is ${WINDOW_MS} ms`).toBeLessThan(WINDOW_MS - 5_000);
}

interface BatchItem {
  id: string;
  status: 'completed' | 'failed';
  error?: { code: string; error: string; retry_after?: unknown };
}

const echoItems = (k: number) => Array.from({ length: k }, (_, i) => ({ id: `e${i}`, capability: 'echo', arguments: { i } }));

describe.each(TARGETS)('budgets under concurrency, two instances on $label', (target) => {
  let options: TestServerOptions;
  let stopTarget: () => Promise<void> = async () => {};

  beforeAll(async () => {
    const started = await target.start();
    options = started.options;
    stopTarget = () => started.stop();
  }, 30_000);
  afterAll(() => stopTarget());

  // One pair of instances for every case under the agent's budget: each case has an agent of its
  // own, so a budget of its own, whose window opens with the case's first execute.
  describe(`under an agent budget of ${PER_MINUTE_BUDGET} a minute`, () => {
    const N = PER_MINUTE_BUDGET;
    let instances: Instances | undefined;
    const pair = () => instances!;
    beforeAll(async () => {
      instances = await startInstances(options, { RATE_LIMIT_AGENT_PER_MINUTE: String(N), RATE_LIMIT_HOST_PER_MINUTE: '100000' });
    }, 30_000);
    afterAll(() => instances?.close());

    it("an agent's budget of N admits exactly N of 3N concurrent executes spread over both instances; every other one is 429 rate_limited with Retry-After", async () => {
      const instances = pair();
      const [a] = instances.clients;
      const agent = await a.activeAgent(['echo']);
      const openedAtMs = Date.now();
      const results = await race(Array.from({ length: 3 * N }, (_, i) => () => preparedExecute(instances.clients[i % 2]!, agent, 'echo')));
      expectWithinWindow(openedAtMs);
      expect(tally(results)).toEqual({ '200': N, '429 rate_limited': 2 * N });
      for (const res of results.filter((r) => r.status === 429)) expectLimited(res, 60);
      // Spent whole: the next execute, on either instance, is refused too.
      for (const client of instances.clients) expectLimited(await (await preparedExecute(client, agent, 'echo')).send(), 60);
    }, CASE_TIMEOUT_MS);

    it('a batch is admitted whole or refused whole: concurrent batches of 3 under an agent budget of 20 run exactly 6 batches (18 items) and refuse every other batch whole with 429', async () => {
      const k = 3;
      const batches = 14; // 42 items, over twice the budget
      const admitted = Math.floor(N / k);
      const instances = pair();
      const [a] = instances.clients;
      const agent = await a.activeAgent(['echo']);
      const openedAtMs = Date.now();
      const results = await race(Array.from({ length: batches }, (_, i) => () => preparedBatch(instances.clients[i % 2]!, agent, echoItems(k))));
      expectWithinWindow(openedAtMs);
      expect(tally(results)).toEqual({ '200': admitted, '429 rate_limited': batches - admitted });
      const itemsRun = results.filter((r) => r.status === 200).flatMap((r) => r.json.responses as BatchItem[]);
      // Admitted whole: every item of an admitted batch ran, and N - 18 = 2 points were left unspendable by a batch of 3.
      expect(itemsRun.map((item) => item.status)).toEqual(Array.from({ length: admitted * k }, () => 'completed'));
      for (const refused of results.filter((r) => r.status === 429)) {
        // Refused whole: execute's 429 body, no item answered (so none ran).
        expectLimited(refused, 60);
        expect(refused.json.responses).toBeUndefined();
      }
    }, CASE_TIMEOUT_MS);

    it('executes and batches of one agent racing on both instances never run more than its budget of N calls, and leave less than one batch of it unspent', async () => {
      const k = 4;
      const instances = pair();
      const [a] = instances.clients;
      const agent = await a.activeAgent(['echo']);
      const openedAtMs = Date.now();
      // 10 batches of 4 and 20 executes, alternating: 60 calls for a budget of 20.
      const prepare = Array.from({ length: 30 }, (_, i) => () => (i % 3 === 0
        ? preparedBatch(instances.clients[i % 2]!, agent, echoItems(k))
        : preparedExecute(instances.clients[i % 2]!, agent, 'echo')));
      const results = await race(prepare);
      expectWithinWindow(openedAtMs);
      for (const res of results.filter((r) => r.status !== 200)) {
        expectLimited(res, 60);
        expect(res.json.responses).toBeUndefined();
      }
      const callsRun = results.filter((r) => r.status === 200).reduce((sum, r) => sum + (r.json.responses ? (r.json.responses as BatchItem[]).length : 1), 0);
      // Which requests win depends on arrival order, but the counter only grows, so the admitted
      // ones are a prefix of the arrivals whose total fits: at most N, and the request that did
      // not fit needed more than what was left, so less than one batch (k) is left unspent.
      expect(callsRun).toBeLessThanOrEqual(N);
      expect(callsRun).toBeGreaterThan(N - k);
      for (const res of results.filter((r) => r.status === 200 && r.json.responses)) {
        expect((res.json.responses as BatchItem[]).every((item) => item.status === 'completed')).toBe(true);
      }
    }, CASE_TIMEOUT_MS);
  });

  it("a host's budget of N admits exactly N calls in total from two of its agents racing on both instances, however the calls are spread among them", async () => {
    const N = PER_MINUTE_BUDGET;
    const instances = await startInstances(options, { RATE_LIMIT_HOST_PER_MINUTE: String(N), RATE_LIMIT_AGENT_PER_MINUTE: '100000' });
    try {
      const [a, b] = instances.clients;
      // Each registration (host JWT) spends one of the host's points and opens its window: one on
      // each instance, so the executes can have N - 2.
      const openedAtMs = Date.now();
      const first = await a.activeAgent(['echo']);
      const { res: registered, agent: second } = await b.register(first.host, { mode: 'delegated', capabilities: ['echo'] });
      expect(registered.json?.status, registered.text).toBe('active');
      const agents = [first, second!];
      const left = N - 2;
      // Agent i % 2 on instance (i >> 1) % 2: each agent calls on both instances.
      const results = await race(Array.from({ length: 3 * N }, (_, i) => () => preparedExecute(instances.clients[(i >> 1) % 2]!, agents[i % 2]!, 'echo')));
      expectWithinWindow(openedAtMs);
      expect(tally(results)).toEqual({ '200': left, '429 rate_limited': 3 * N - left });
      for (const res of results.filter((r) => r.status === 429)) expectLimited(res, 60);
      for (const agent of agents) expectLimited(await (await preparedExecute(b, agent, 'echo')).send(), 60);
    } finally {
      await instances.close();
    }
  }, CASE_TIMEOUT_MS);

  it("a capability's own budget admits exactly its points among calls racing on both instances as executes and batch items; refused executes are 429, refused items fail alone", async () => {
    const instances = await startInstances(options, {});
    try {
      const [a] = instances.clients;
      const agent = await a.activeAgent(['metered', 'echo']);
      // 10 executes and 5 batches of [metered, echo, metered]: 20 metered calls for 5 points.
      const prepare = Array.from({ length: 15 }, (_, i) => () => (i % 3 === 2
        ? preparedBatch(instances.clients[i % 2]!, agent, [{ id: 'm1', capability: 'metered' }, { id: 'e', capability: 'echo' }, { id: 'm2', capability: 'metered' }])
        : preparedExecute(instances.clients[i % 2]!, agent, 'metered')));
      const results = await race(prepare);
      const executes = results.filter((_, i) => i % 3 !== 2);
      const batches = results.filter((_, i) => i % 3 === 2);
      // A batch is never refused whole for an item's own budget.
      expect(batches.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
      const items = batches.flatMap((r) => r.json.responses as BatchItem[]);
      const meteredItems = items.filter((item) => item.id !== 'e');
      expect(items.filter((item) => item.id === 'e').map((item) => item.status)).toEqual(['completed', 'completed', 'completed', 'completed', 'completed']);
      const executesRun = executes.filter((r) => r.status === 200).length;
      const itemsRun = meteredItems.filter((item) => item.status === 'completed').length;
      expect(executesRun + itemsRun).toBe(METERED_POINTS);
      expect(tally(executes)).toEqual(withoutZeros({ '200': executesRun, '429 rate_limited': 10 - executesRun }));
      for (const res of executes.filter((r) => r.status === 429)) expectLimited(res, 3600);
      for (const item of meteredItems.filter((m) => m.status === 'failed')) {
        expect(item.error?.code).toBe('rate_limited');
        expect(item.error?.error).toBe('rate_limited');
        expect(Number.isInteger(item.error?.retry_after) && (item.error!.retry_after as number) >= 1).toBe(true);
      }
      // Spent whole, on both instances: the sixth call of the hour is refused, echo is not.
      for (const client of instances.clients) {
        expectLimited(await (await preparedExecute(client, agent, 'metered')).send(), 3600);
        expect((await (await preparedExecute(client, agent, 'echo')).send()).status).toBe(200);
      }
    } finally {
      await instances.close();
    }
  }, CASE_TIMEOUT_MS);
});

// A replay is refused only once the round trip has read its jti, but its point of the capability's
// own budget was spent in that same round trip (DESIGN §2 step 6 rides with step 4), and is given
// back only after. docs/stances.md ("What spends a capability's own budget") promises that a captured
// token cannot drain a small, long budget. Here the replay is held in flight, on one instance, at the
// moment its point has reached Redis and before it is given back (a fault proxy freezes that
// instance's Redis traffic just after the capability's command), while the agent calls on the other
// instance. One Redis: the fault proxy fronts a single server.
describe('a replay in flight on one instance and honest calls on the other (one Redis)', () => {
  it("a captured token replayed while the agent calls cannot cost the agent a point of a capability's own budget: once the replay is refused, every point the agent did not use is still there", async () => {
    const redisUrl = await redisUrlForTests();
    const proxy = await startFaultProxy(redisUrl);
    const redisPrefix = uniquePrefix('limits-replay-in-flight');
    const settled = await Promise.allSettled([
      startTestServer({ store: 'redis', redisUrl, redisPrefix, capabilities: CAPABILITIES }),
      startTestServer({ store: 'redis', redisUrl: proxy.url, redisPrefix, capabilities: CAPABILITIES }),
    ]);
    const servers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    try {
      for (const s of settled) if (s.status === 'rejected') throw s.reason;
      const [direct, proxied] = [new Client(servers[0]!), new Client(servers[1]!)];
      const agent = await direct.activeAgent(['metered']);
      // Four of the five points run honest calls; the token of the fourth is the one captured.
      for (let i = 0; i < 3; i++) expect((await (await preparedExecute(direct, agent, 'metered')).send()).status).toBe(200);
      const captured = await preparedExecute(proxied, agent, 'metered');
      expect((await captured.send()).status).toBe(200);

      // Freeze the proxied instance's Redis at the first command after the replay's capability
      // point: that point has reached Redis, and the replay cannot learn it is one, nor give the point back.
      let pointSent = false;
      const frozen = proxy.arm('freeze', (command) => {
        if (pointSent) return true;
        if (command.key?.includes(':rl:cap:metered:')) pointSent = true;
        return false;
      });
      const replay = captured.send();
      await within(10_000, 'the replay\'s capability point reaching Redis', frozen);
      const duringReplay = await (await preparedExecute(direct, agent, 'metered')).send();
      proxy.restore();
      expect(code(await replay)).toBe('401 invalid_jwt');

      // The agent made 4 calls of its 5 before the replay; of its calls from now on (one during the
      // replay, two after), exactly one more may run, whichever it is.
      const afterReplay = [await (await preparedExecute(direct, agent, 'metered')).send(), await (await preparedExecute(direct, agent, 'metered')).send()];
      const run = [duringReplay, ...afterReplay].filter((res) => res.status === 200).length;
      expect(
        run,
        `calls during and after the replay answered ${[duringReplay, ...afterReplay].map(code).join(', ')}: a budget of ${METERED_POINTS} ran ${4 + run} calls`,
      ).toBe(1);
    } finally {
      proxy.disarm();
      proxy.restore();
      await Promise.all(servers.map((server) => server.close()));
      await proxy.close();
    }
  }, CASE_TIMEOUT_MS);
});
