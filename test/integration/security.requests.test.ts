// SECURITY.md's guarantees about what one caller can make the server store or do, over HTTP on both
// stores: an anonymous storage flood (6), pending hosts seeing too much (13), `nbf` ignored (14) and
// deep nesting reaching the policy as a 500 (16). Each test is named after the attack it stops.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shippedCatalogWithEchoArguments } from '../support/catalog.ts';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

forEachStore('hostile requests', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({
      store: storeKind,
      // Echo declares `x`, which the deep-nesting test constrains, and `deep`, which it nests.
      capabilities: shippedCatalogWithEchoArguments(['x', 'deep']),
      env: { AGENTS_PER_UNLINKED_HOST_MAX: '5', PENDING_AGENTS_PER_HOST_MAX: '3', MAX_JSON_DEPTH: '32' },
    });
    c = new Client(server);
  });
  afterAll(() => server.close());

  describe('an anonymous storage flood is bounded (finding 6)', () => {
    it('one unknown key cannot register more than AGENTS_PER_UNLINKED_HOST_MAX agents', async () => {
      const host = await newEd25519();
      for (let i = 0; i < 5; i++) expect((await c.register(host, { mode: 'autonomous', capabilities: ['echo'] })).res.status).toBe(200);
      const over = await c.register(host, { mode: 'autonomous', capabilities: ['echo'] });
      expect(code(over.res)).toBe('403 limit_exceeded');
      expect(over.res.json.message).toMatch(/most agents it may \(5/);
      const hostId = (await server.store.findHostByThumbprint(host.thumbprint))!.id;
      expect(await server.store.listHostAgentIds(hostId)).toHaveLength(5);
    });

    it('a host cannot keep more than PENDING_AGENTS_PER_HOST_MAX agents waiting for approval; a decision frees a slot', async () => {
      const host = await newEd25519();
      const pending = [];
      for (let i = 0; i < 3; i++) {
        const { res, agent } = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
        expect(res.json.status).toBe('pending');
        pending.push(agent!);
      }
      expect(code((await c.register(host, { mode: 'delegated' })).res)).toBe('403 limit_exceeded');
      expect((await c.admin('POST', `/admin/agents/${pending[0]!.id}/deny`, { user_id: 'user-1' })).status).toBe(200);
      expect((await c.register(host, { mode: 'delegated' })).res.json.status).toBe('pending');
    });

    it('a retry of a pending registration is the same agent, not a new slot', async () => {
      const host = await newEd25519();
      const agentKey = await newEd25519();
      const first = await c.register(host, { mode: 'delegated' }, { agentKey });
      const again = await c.register(host, { mode: 'delegated' }, { agentKey });
      expect(again.res.json.agent_id).toBe(first.res.json.agent_id);
    });
  });

  describe('a pending host (anyone can make one) may register and poll status, nothing else (finding 13)', () => {
    it('cannot list or describe capabilities as a host, nor revoke itself', async () => {
      const host = await newEd25519();
      const { agent } = await c.register(host, { mode: 'delegated' });
      expect(agent!.registration.status).toBe('pending');
      const list = await http('GET', c.url('/capability/list'), { token: await c.hostToken(host) });
      expect(code(list)).toBe('403 host_pending');
      const describe = await http('GET', c.url('/capability/describe?name=purge_all_data'), { token: await c.hostToken(host) });
      expect(code(describe)).toBe('403 host_pending');
      expect(code(await c.hostPost('/host/revoke', host))).toBe('403 host_pending');
      expect((await c.status(host, agent!.id)).status).toBe(200);
      // Anonymous listing still shows only public capabilities.
      const anonymous = await http('GET', c.url('/capability/list'));
      expect(anonymous.json.capabilities.map((x: { name: string }) => x.name)).not.toContain('purge_all_data');
    });
  });

  describe('nbf is honoured (finding 14)', () => {
    it('a token that is not valid for another hour is refused at execute and elsewhere', async () => {
      const agent = await c.activeAgent(['echo']);
      const nbf = c.now + 3600;
      const res = await c.execute(agent, 'echo', {}, { claims: { nbf } });
      expect(code(res)).toBe('401 invalid_jwt');
      expect(res.json.message).toMatch(/nbf/);
      expect(code(await c.status(agent.host, agent.id, c.hostToken(agent.host, { claims: { nbf } })))).toBe('401 invalid_jwt');
      // Within the skew, and in the past, nbf is fine.
      expect((await c.execute(agent, 'echo', {}, { claims: { nbf: c.now + 10 } })).status).toBe(200);
      expect((await c.execute(agent, 'echo', {}, { claims: { nbf: c.now - 10 } })).status).toBe(200);
      expect(code(await c.execute(agent, 'echo', {}, { claims: { nbf: 'soon' } }))).toBe('401 invalid_jwt');
    });
  });

  describe('deep nesting is refused before any work (finding 16)', () => {
    it('arguments nested 10,000 levels are 400 invalid_request, not a 500 from the policy', async () => {
      const agent = await c.activeAgent([{ name: 'echo', constraints: { x: { max: 5 } } }]);
      const token = await c.agentToken(agent, { aud: c.executeUrl });
      const res = await http('POST', c.executeUrl, { token, body: `{"capability":"echo","arguments":{"x":1,"deep":${nested(10_000)}}}` });
      expect(code(res)).toBe('400 invalid_request');
      expect(res.json.message).toMatch(/deeper than 32 levels/);
      // The token was not spent: nothing but parsing happened.
      expect((await http('POST', c.executeUrl, { token, json: { capability: 'echo', arguments: { x: 1 } } })).status).toBe(200);
    });

    it('every endpoint refuses a body nested past MAX_JSON_DEPTH, and accepts one at it', async () => {
      for (const path of ['/agent/register', '/agent/request-capability', '/agent/revoke-capability', '/agent/introspect', '/admin/hosts']) {
        const res = await http('POST', c.url(path), { body: `{"x":${nested(40)}}` });
        expect(code(res), path).toBe('400 invalid_request');
      }
      const agent = await c.activeAgent(['echo']);
      const atLimit = await c.execute(agent, 'echo', { deep: JSON.parse(nested(30)) });
      expect(atLimit.status).toBe(200);
    });
  });
});

describe('one address cannot create without bound (finding 6)', () => {
  let server: TestServer;
  let c: Client;
  beforeAll(async () => {
    server = await startTestServer({ store: 'redis', env: { RATE_LIMIT_REGISTRATIONS_PER_HOUR: '3' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  it('registrations past RATE_LIMIT_REGISTRATIONS_PER_HOUR from one address are 429, known hosts included', async () => {
    const host = await c.linkedHost(['echo']);
    for (let i = 0; i < 3; i++) expect((await c.register(host, { mode: 'delegated', capabilities: ['echo'] })).res.status).toBe(200);
    const over = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    expect(code(over.res)).toBe('429 rate_limited');
    expect(Number(over.res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(code((await c.register(await newEd25519(), { mode: 'autonomous' })).res)).toBe('429 rate_limited');
  });
});
