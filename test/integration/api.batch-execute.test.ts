// POST /capability/batch-execute (protocol §3.2; docs/stances.md): up to 50 calls under one agent
// JWT, against a real server on loopback with real Ed25519 keys and signed JWTs, on both stores.
// Each item completes or fails on its own, with the code execute would answer for it; identity,
// replay, lifecycle, the agent's and host's budgets and a malformed batch refuse it whole, with the
// status and body execute would answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GrantRecord } from '../../src/domain/types.ts';
import { SandboxUnavailableError } from '../../src/operators/sandbox.ts';
import { Client, code, http, type HttpResult, type TestAgent } from '../support/client.ts';
import { fixturePolicy } from '../support/policies.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

const CAPABILITIES = [
  { name: 'echo', description: 'echo', input: { type: 'object' }, handler: { type: 'echo' } },
  { name: 'other', description: 'other', handler: { type: 'echo' } },
  { name: 'pay', description: 'pay', input: { type: 'object', properties: { amount: { type: 'number' }, to: { type: 'string' } } }, handler: { type: 'echo' } },
  { name: 'broken', description: 'its backend always fails', handler: { type: 'fail' } },
  { name: 'metered', description: 'a budget of its own', rateLimit: { points: 2, durationSeconds: 3600 }, handler: { type: 'echo' } },
];

/** A whole-batch refusal: status, code and the {error, message} body. */
function expectRefused(res: HttpResult, status: number, error: string) {
  expect(code(res), res.text).toBe(`${status} ${error}`);
  expect(typeof res.json.message).toBe('string');
  expect(res.json.responses).toBeUndefined();
}

interface Item {
  id: string;
  status: string;
  data?: unknown;
  error?: { code: string; error: string; message: string; [extra: string]: unknown };
}

/** The items of a 200 answer. */
function itemsOf(res: HttpResult): Item[] {
  expect(res.status, res.text).toBe(200);
  return res.json.responses as Item[];
}

/** A failed item: `code` and `error` carry the same value, and a message says why. */
function expectFailed(item: Item | undefined, errorCode: string) {
  expect(item?.status, JSON.stringify(item)).toBe('failed');
  expect(item?.error?.code).toBe(errorCode);
  expect(item?.error?.error).toBe(errorCode);
  expect(typeof item?.error?.message).toBe('string');
  return item!.error!;
}

forEachStore('POST /capability/batch-execute', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, capabilities: CAPABILITIES });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const echo = (id: string | undefined, args: Record<string, unknown> = {}) => ({ ...(id === undefined ? {} : { id }), capability: 'echo', arguments: args });

  describe('each item completes or fails on its own', () => {
    it('completed: every item answers what execute would answer as data, in request order', async () => {
      const agent = await c.activeAgent(['echo', 'pay']);
      const items = itemsOf(await c.batchExecute(agent, [echo('a', { n: 1 }), { id: 'b', capability: 'pay', arguments: { amount: '7' } }, { id: 'c', capability: 'echo' }]));
      expect(items).toEqual([
        { id: 'a', status: 'completed', data: { capability: 'echo', arguments: { n: 1 } } },
        { id: 'b', status: 'completed', data: { capability: 'pay', arguments: { amount: 7 } } },
        { id: 'c', status: 'completed', data: { capability: 'echo', arguments: {} } },
      ]);
      expect((await c.execute(agent, 'echo', { n: 1 })).json).toEqual({ data: items[0]!.data });
    });

    it('capability_not_found: an item naming no capability fails alone', async () => {
      const agent = await c.activeAgent(['echo']);
      const [missing, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'no_such_capability' }, echo('y')]));
      expectFailed(missing, 'capability_not_found');
      expect(ok?.status).toBe('completed');
    });

    it('capability_not_granted: an item the agent holds no grant for fails alone', async () => {
      const agent = await c.activeAgent(['echo']);
      const [ok, ungranted] = itemsOf(await c.batchExecute(agent, [echo('y'), { id: 'x', capability: 'other' }]));
      expect(ok?.status).toBe('completed');
      expectFailed(ungranted, 'capability_not_granted');
    });

    it('grant_revoked: an item whose grant was revoked fails alone', async () => {
      const agent = await c.activeAgent(['echo', 'other']);
      const revoked = await http('POST', c.url('/agent/revoke-capability'), { token: await c.agentToken(agent), json: { capabilities: ['other'] } });
      expect(revoked.json.revoked).toEqual(['other']);
      const [gone, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'other' }, echo('y')]));
      expectFailed(gone, 'grant_revoked');
      expect(ok?.status).toBe('completed');
    });

    it("invalid_request: an item whose arguments break the capability's input schema fails alone", async () => {
      const agent = await c.activeAgent(['pay', 'echo']);
      const [bad, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'pay', arguments: { amount: 'lots' } }, echo('y')]));
      expect(expectFailed(bad, 'invalid_request').message).toMatch(/input schema of pay/);
      expect(ok?.status).toBe('completed');
    });

    it('unknown_constraint_operator: an item whose grant uses an operator this server no longer knows fails alone, naming it', async () => {
      const agent = await c.activeAgent(['pay', 'echo']);
      const snapshot = (await server.store.getAgent(agent.id))!;
      const pay = snapshot.grants.find((grant) => grant.capability === 'pay')!;
      await server.store.casAgent(agent.id, snapshot.agent.version, { upsertGrants: [{ ...pay, constraints: { to: { soundex: 'A000' } } }] });
      const [unknown, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'pay', arguments: { to: 'alice' } }, echo('y')]));
      expect(expectFailed(unknown, 'unknown_constraint_operator').unknown_operators).toEqual(['soundex']);
      expect(ok?.status).toBe('completed');
    });

    it('constraint_violated: an item breaking its grant\'s constraints fails alone with the violations; its neighbour under the same grant passes', async () => {
      const agent = await c.activeAgent([{ name: 'pay', constraints: { amount: { max: 100 } } }]);
      const [violated, ok] = itemsOf(await c.batchExecute(agent, [
        { id: 'big', capability: 'pay', arguments: { amount: 500 } },
        { id: 'small', capability: 'pay', arguments: { amount: 50 } },
      ]));
      expect(expectFailed(violated, 'constraint_violated').violations).toEqual([{ field: 'amount', constraint: { max: 100 }, actual: 500 }]);
      expect(ok).toEqual({ id: 'small', status: 'completed', data: { capability: 'pay', arguments: { amount: 50 } } });
    });

    it('service_unavailable: an item whose plugin operators cannot be answered fails alone, never allowed', async () => {
      const agent = await c.activeAgent([{ name: 'pay', constraints: { to: { prefix: ['acct-'] } } }, 'echo']);
      const sandbox = server.app.deps.pluginSandbox;
      expect(itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'pay', arguments: { to: 'acct-1' } }]))[0]?.status).toBe('completed');
      sandbox.evaluate = () => Promise.reject(new SandboxUnavailableError('every worker is busy (test)'));
      try {
        const [unavailable, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'pay', arguments: { to: 'acct-1' } }, echo('y')]));
        expectFailed(unavailable, 'service_unavailable');
        expect(ok?.status).toBe('completed');
      } finally {
        delete (sandbox as { evaluate?: unknown }).evaluate;
      }
    });

    it('internal_error: an item whose backend fails fails alone, without the backend\'s detail', async () => {
      const agent = await c.activeAgent(['broken', 'echo']);
      const [failed, ok] = itemsOf(await c.batchExecute(agent, [{ id: 'x', capability: 'broken' }, echo('y')]));
      expect(expectFailed(failed, 'internal_error').message).toBe('the capability backend failed');
      expect(ok?.status).toBe('completed');
    });

    it('a mixed batch: every refused item leaves the others running, and each answers in its place', async () => {
      const agent = await c.activeAgent([{ name: 'pay', constraints: { amount: { max: 100 } } }, 'echo', 'broken']);
      const items = itemsOf(await c.batchExecute(agent, [
        echo('1'),
        { id: '2', capability: 'no_such_capability' },
        { id: '3', capability: 'pay', arguments: { amount: 1000 } },
        echo('4'),
        { id: '5', capability: 'broken' },
        { id: '6', capability: 'other' },
        { id: '7', capability: 'pay', arguments: { amount: 'x' } },
        { id: '8', capability: 'pay', arguments: { amount: 10 } },
      ]));
      expect(items.map((item) => [item.id, item.status, item.error?.code])).toEqual([
        ['1', 'completed', undefined],
        ['2', 'failed', 'capability_not_found'],
        ['3', 'failed', 'constraint_violated'],
        ['4', 'completed', undefined],
        ['5', 'failed', 'internal_error'],
        ['6', 'failed', 'capability_not_granted'],
        ['7', 'failed', 'invalid_request'],
        ['8', 'completed', undefined],
      ]);
    });

    it("a token restricted by its capabilities claim cannot smuggle other capabilities into a batch", async () => {
      const agent = await c.activeAgent(['echo', 'other']);
      const [allowed, smuggled] = itemsOf(await c.batchExecute(agent, [echo('a'), { id: 'b', capability: 'other' }], { capabilities: ['echo'] }));
      expect(allowed?.status).toBe('completed');
      expect(expectFailed(smuggled, 'capability_not_granted').message).toMatch(/capabilities claim/);
      expect(itemsOf(await c.batchExecute(agent, [{ id: 'b', capability: 'other' }]))[0]?.status).toBe('completed');
    });

    it('several grants for one capability: each item is decided against all of them', async () => {
      const agent = await c.activeAgent([{ name: 'pay', constraints: { to: 'alice' } }]);
      const snapshot = (await server.store.getAgent(agent.id))!;
      const second: GrantRecord = { ...snapshot.grants[0]!, id: 'grt_second', constraints: { to: 'bob' } };
      expect((await server.store.casAgent(agent.id, snapshot.agent.version, { upsertGrants: [second] })).ok).toBe(true);
      const items = itemsOf(await c.batchExecute(agent, ['alice', 'bob', 'carol'].map((to) => ({ id: to, capability: 'pay', arguments: { to } }))));
      expect(items.map((item) => item.status)).toEqual(['completed', 'completed', 'failed']);
    });
  });

  describe('ids', () => {
    it('ids are echoed in request order; an item without one gets its index as a string', async () => {
      const agent = await c.activeAgent(['echo']);
      const items = itemsOf(await c.batchExecute(agent, [echo('z'), echo(undefined), echo('a'), echo(undefined)]));
      expect(items.map((item) => item.id)).toEqual(['z', '1', 'a', '3']);
    });

    it('duplicate ids cannot make two responses answer for one request: the batch is refused whole', async () => {
      const agent = await c.activeAgent(['echo']);
      expectRefused(await c.batchExecute(agent, [echo('same'), echo('same')]), 400, 'invalid_request');
      // An explicit id equal to another item's index collides the same way.
      const collision = await c.batchExecute(agent, [echo('1'), echo(undefined)]);
      expectRefused(collision, 400, 'invalid_request');
      expect(collision.json.message).toMatch(/duplicate id "1"/);
    });
  });

  describe('whole-batch refusals: as malformed input', () => {
    it('no items, or more than 50, are refused whole with 400 invalid_request; 50 are fine', async () => {
      const agent = await c.activeAgent(['echo']);
      expectRefused(await c.batchExecute(agent, []), 400, 'invalid_request');
      expectRefused(await c.batchExecute(agent, Array.from({ length: 51 }, (_, i) => echo(`i${i}`))), 400, 'invalid_request');
      const fifty = itemsOf(await c.batchExecute(agent, Array.from({ length: 50 }, (_, i) => echo(`i${i}`))));
      expect(fifty).toHaveLength(50);
      expect(fifty.every((item, i) => item.id === `i${i}` && item.status === 'completed')).toBe(true);
    });

    it('one malformed item refuses the whole batch with 400 invalid_request, before anything runs', async () => {
      const agent = await c.activeAgent(['echo']);
      const malformed: unknown[] = [
        { id: 'a' },
        { capability: 42 },
        { capability: 'echo', arguments: [1, 2] },
        { capability: 'echo', arguments: 'amount=5' },
        { capability: 'x'.repeat(129) },
        { id: 7, capability: 'echo' },
        { id: '', capability: 'echo' },
        'echo',
        null,
      ];
      for (const item of malformed) {
        expectRefused(await c.batchExecute(agent, [echo('ok'), item]), 400, 'invalid_request');
      }
    });

    it('ids longer than 128 characters are refused whole', async () => {
      const agent = await c.activeAgent(['echo']);
      expectRefused(await c.batchExecute(agent, [echo('x'.repeat(129))]), 400, 'invalid_request');
      expect(itemsOf(await c.batchExecute(agent, [echo('x'.repeat(128))]))[0]?.status).toBe('completed');
    });

    it('an unparsable body, or one without requests, is refused with 400 invalid_request', async () => {
      const agent = await c.activeAgent(['echo']);
      const url = c.url('/capability/batch-execute');
      const token = () => c.agentToken(agent, { aud: c.executeUrl });
      expectRefused(await http('POST', url, { token: await token(), body: '{"requests": [' }), 400, 'invalid_request');
      expectRefused(await http('POST', url, { token: await token(), json: { capability: 'echo' } }), 400, 'invalid_request');
      expectRefused(await http('POST', url, { token: await token(), json: { requests: { 0: echo('a') } } }), 400, 'invalid_request');
      expectRefused(await http('POST', url, { token: await token(), json: [echo('a')] }), 400, 'invalid_request');
    });
  });

  describe('whole-batch refusals: identity, replay and lifecycle answer as execute does', () => {
    it('a token for another audience is refused whole; the execute location and the issuer are accepted', async () => {
      const agent = await c.activeAgent(['echo']);
      const wrong = await c.batchExecute(agent, [echo('a')], { aud: 'https://elsewhere.example/capability/execute' });
      expectRefused(wrong, 401, 'invalid_jwt');
      expect(wrong.json).toEqual((await c.execute(agent, 'echo', {}, { aud: 'https://elsewhere.example/capability/execute' })).json);
      expect(itemsOf(await c.batchExecute(agent, [echo('a')], { aud: c.executeUrl }))[0]?.status).toBe('completed');
      expect(itemsOf(await c.batchExecute(agent, [echo('a')], { aud: c.issuer }))[0]?.status).toBe('completed');
    });

    it('a replayed batch token is refused whole, and so is the same token on execute', async () => {
      const agent = await c.activeAgent(['echo']);
      const token = await c.agentToken(agent, { aud: c.executeUrl });
      expect(itemsOf(await c.batchExecute(agent, [echo('a'), echo('b')], { token }))).toHaveLength(2);
      const replay = await c.batchExecute(agent, [echo('a'), echo('b')], { token });
      expectRefused(replay, 401, 'invalid_jwt');
      const onExecute = await c.execute(agent, 'echo', {}, { token });
      expect(onExecute.status).toBe(401);
      expect(replay.json).toEqual(onExecute.json);
    });

    it('a forged signature is refused whole before anything is written', async () => {
      const agent = await c.activeAgent(['echo']);
      const other = await c.activeAgent(['echo']);
      expectRefused(await c.batchExecute(agent, [echo('a')], { signWith: other.key }), 401, 'invalid_jwt');
    });

    it('a revoked agent is refused whole with the body execute answers', async () => {
      const agent = await c.activeAgent(['echo']);
      expect((await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).status).toBe(200);
      const batch = await c.batchExecute(agent, [echo('a'), echo('b')]);
      expectRefused(batch, 403, 'agent_revoked');
      expect(batch.json).toEqual((await c.execute(agent, 'echo', {})).json);
    });

    it('an agent still waiting for approval is refused whole with the body execute answers', async () => {
      const host = await c.linkedHost([]);
      const { agent } = await c.register(host, { capabilities: ['echo'] });
      const batch = await c.batchExecute(agent!, [echo('a')]);
      expectRefused(batch, 403, 'agent_pending');
      expect(batch.json).toEqual((await c.execute(agent!, 'echo', {})).json);
    });

    it('an expired agent is refused whole with the body execute answers', async () => {
      const agent = await c.activeAgent(['echo']);
      server.clock.advance((server.config.AGENT_SESSION_TTL_SECONDS + 1) * 1000);
      const batch = await c.batchExecute(agent, [echo('a'), echo('b')]);
      expectRefused(batch, 403, 'agent_expired');
      expect(batch.json).toEqual((await c.execute(agent, 'echo', {})).json);
    });
  });

  describe('budgets', () => {
    it("a capability's own budget is spent per item: items past it fail alone with rate_limited and retry_after", async () => {
      const agent = await c.activeAgent(['metered', 'echo']);
      const items = itemsOf(await c.batchExecute(agent, [{ id: 'm1', capability: 'metered' }, echo('e'), { id: 'm2', capability: 'metered' }, { id: 'm3', capability: 'metered' }]));
      expect(items.map((item) => item.status)).toEqual(['completed', 'completed', 'completed', 'failed']);
      const limited = expectFailed(items[3], 'rate_limited');
      expect(Number.isInteger(limited.retry_after) && (limited.retry_after as number) >= 1).toBe(true);
      expect(code(await c.execute(agent, 'metered', {}))).toBe('429 rate_limited');
      // A batch of one is still a batch: its item fails, the request does not.
      expectFailed(itemsOf(await c.batchExecute(agent, [{ id: 'm4', capability: 'metered' }]))[0], 'rate_limited');
    });

    it("a replayed batch cannot drain a capability's own budget: a batch refused whole gives its points back", async () => {
      const agent = await c.activeAgent(['metered']);
      const token = await c.agentToken(agent, { aud: c.executeUrl });
      const replayed = [{ id: 'm1', capability: 'metered' }];
      expect(itemsOf(await c.batchExecute(agent, replayed, { token }))[0]?.status).toBe('completed');
      for (let i = 0; i < 3; i++) expectRefused(await c.batchExecute(agent, [...replayed, { id: 'm2', capability: 'metered' }], { token }), 401, 'invalid_jwt');
      // One of two points was spent by the honest batch; the replays gave theirs back.
      const items = itemsOf(await c.batchExecute(agent, [{ id: 'a', capability: 'metered' }, { id: 'b', capability: 'metered' }]));
      expect(items.map((item) => item.status)).toEqual(['completed', 'failed']);
    });

    it("a token restricted to other capabilities cannot spend a capability's own budget through a batch", async () => {
      const agent = await c.activeAgent(['metered', 'echo']);
      for (let i = 0; i < 3; i++) {
        const [refused] = itemsOf(await c.batchExecute(agent, [{ id: 'm', capability: 'metered' }], { capabilities: ['echo'] }));
        expectFailed(refused, 'capability_not_granted');
      }
      const items = itemsOf(await c.batchExecute(agent, [{ id: 'a', capability: 'metered' }, { id: 'b', capability: 'metered' }]));
      expect(items.map((item) => item.status)).toEqual(['completed', 'completed']);
    });
  });

  it('discovery advertises the endpoint as endpoints.batch_execute, and the OpenAPI document describes it', async () => {
    const discovery = await http('GET', c.url('/.well-known/agent-configuration'));
    expect(discovery.json.endpoints.batch_execute).toBe('/capability/batch-execute');
    const openapi = await http('GET', c.url('/openapi.json'));
    const schema = openapi.json.paths['/capability/batch-execute'].post.requestBody.content['application/json'].schema;
    expect(schema.properties.requests).toMatchObject({ minItems: 1, maxItems: 50 });
  });
});

forEachStore('batch execute and the agent and host budgets', (storeKind) => {
  it('packing calls into one batch cannot beat the per-minute budgets: a batch of N spends N, and one the budget cannot cover is refused whole with 429 and Retry-After', async () => {
    const server = await startTestServer({ store: storeKind, capabilities: CAPABILITIES, env: { RATE_LIMIT_AGENT_PER_MINUTE: '10' } });
    try {
      const c = new Client(server);
      const batchOf = (agent: TestAgent, n: number) => c.batchExecute(agent, Array.from({ length: n }, (_, i) => ({ id: `i${i}`, capability: 'echo' })));
      const exact = await c.activeAgent(['echo']);
      expect(itemsOf(await batchOf(exact, 4))).toHaveLength(4);
      expect(itemsOf(await batchOf(exact, 6))).toHaveLength(6);
      expect(code(await c.execute(exact, 'echo', {}))).toBe('429 rate_limited');

      const over = await c.activeAgent(['echo']);
      expect(itemsOf(await batchOf(over, 4))).toHaveLength(4);
      const refused = await batchOf(over, 7);
      expectRefused(refused, 429, 'rate_limited');
      expect(refused.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
      // A refused batch's points stay spent, as a refused execute's point does (docs/stances.md).
      expect(code(await c.execute(over, 'echo', {}))).toBe('429 rate_limited');
    } finally {
      await server.close();
    }
  });

  it("the host's budget is spent one point per item too", async () => {
    const server = await startTestServer({ store: storeKind, capabilities: CAPABILITIES, env: { RATE_LIMIT_HOST_PER_MINUTE: '8' } });
    try {
      const c = new Client(server);
      // The registration spent one of the host's eight points, this batch spends five, and the next
      // batch needs five of the two left.
      const agent = await c.activeAgent(['echo']);
      const spent = await c.batchExecute(agent, Array.from({ length: 5 }, (_, i) => ({ id: `i${i}`, capability: 'echo' })));
      expect(spent.status, spent.text).toBe(200);
      const refused = await c.batchExecute(agent, Array.from({ length: 5 }, (_, i) => ({ id: `i${i}`, capability: 'echo' })));
      expectRefused(refused, 429, 'rate_limited');
    } finally {
      await server.close();
    }
  });
});

forEachStore('batch execute under a policy that refuses every call', (storeKind) => {
  it('capability_not_granted: an item the policy refuses without violations fails alone with its reason', async () => {
    const deny = fixturePolicy('deny');
    const server = await startTestServer({ store: storeKind, capabilities: CAPABILITIES, env: { POLICY_WASM_PATH: deny.wasmPath, POLICY_GOLDEN_PATH: deny.goldenPath } });
    try {
      const c = new Client(server);
      const agent = await c.activeAgent(['echo']);
      const [refused, missing] = itemsOf(await c.batchExecute(agent, [echo('a'), { id: 'b', capability: 'no_such_capability' }]));
      expect(expectFailed(refused, 'capability_not_granted').message).toBe('maintenance window');
      expectFailed(missing, 'capability_not_found');
      expect((await c.execute(agent, 'echo', {})).json).toEqual({ error: 'capability_not_granted', message: 'maintenance window' });
    } finally {
      await server.close();
    }
  });

  function echo(id: string) {
    return { id, capability: 'echo' };
  }
});
