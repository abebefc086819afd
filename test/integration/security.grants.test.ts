// SECURITY.md's guarantees about grants and approvals, over HTTP on both stores, each test named after
// the attack it stops: denials undone by reactivation (3), grants piled up to slow every execute
// (5), approvals that decide more than the approver saw (7), unusable agents changing grants (11),
// and the JWT capabilities claim ignored outside execute (12).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GRANT_LIMITS } from '../../src/domain/limits.ts';
import { shippedCatalogWithEchoArguments } from '../support/catalog.ts';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

forEachStore('grants and approvals', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    // Echo declares `x` and `n`, the arguments the grant-size tests constrain.
    server = await startTestServer({ store: storeKind, capabilities: shippedCatalogWithEchoArguments(['x', 'n']) });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const revokeCapability = async (agent: TestAgent, capabilities: string[], by: 'agent' | 'host' = 'agent', options: { capabilities?: string[] } = {}) =>
    by === 'agent'
      ? http('POST', c.url('/agent/revoke-capability'), { token: await c.agentToken(agent, options), json: { capabilities } })
      : c.hostPost('/agent/revoke-capability', agent.host, { agent_id: agent.id, capabilities });
  const grantsOf = async (agentId: string) => (await server.store.getAgent(agentId))!.grants;
  /** Time passes between a person's steps (records made in one millisecond would tie). */
  const later = () => server.clock.advance(1000);

  describe("a person's denial is final until a person approves (finding 3)", () => {
    it('a newer pending request does not hide the denial from reactivation', async () => {
      const agent = await c.activeAgent(['echo', 'weather_lookup']);
      expect((await revokeCapability(agent, ['weather_lookup'], 'host')).status).toBe(200);
      later();
      const asked = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
      expect(asked.json.status).toBe('pending');
      later();
      expect((await c.admin('POST', `/admin/agents/${agent.id}/deny`, { user_id: 'user-1' })).status).toBe(200);
      later();
      const again = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
      expect(again.json.status).toBe('pending');
      later();
      expect((await c.admin('POST', `/admin/agents/${agent.id}/expire`)).status).toBe(200);
      const reactivated = await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id });
      expect(reactivated.status).toBe(200);
      const weather = reactivated.json.agent_capability_grants.filter((g: { capability: string }) => g.capability === 'weather_lookup');
      expect(weather.map((g: { status: string }) => g.status)).not.toContain('active');
      expect((await c.execute(agent, 'weather_lookup', {})).status).toBe(403);
    });

    it('a denied capability asked for again needs approval again, however often it is asked', async () => {
      const agent = await c.activeAgent(['echo']);
      for (let round = 0; round < 3; round++) {
        later();
        const asked = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
        expect(asked.json.agent_capability_grants[0].status).toBe('pending');
        later();
        await c.admin('POST', `/admin/agents/${agent.id}/deny`, { user_id: 'user-1' });
      }
      expect(code(await c.execute(agent, 'weather_lookup', {}))).toBe('403 capability_not_granted');
    });

    it('a default capability the host revoked is not re-granted by reactivation, twice over, unless a person approves it', async () => {
      const agent = await c.activeAgent(['echo', 'weather_lookup']);
      await revokeCapability(agent, ['weather_lookup'], 'host');
      for (let round = 0; round < 2; round++) {
        later();
        await c.admin('POST', `/admin/agents/${agent.id}/expire`);
        const body = (await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id })).json;
        expect(body.agent_capability_grants.some((g: { capability: string; status: string }) => g.capability === 'weather_lookup' && g.status === 'active')).toBe(false);
        // Approve only echo's side: the agent's registration-level approval, if any, leaves weather pending.
        if (body.status === 'pending') await c.admin('POST', `/admin/agents/${agent.id}/approve`, { capabilities: ['echo'], user_id: 'user-1' });
      }
      expect((await c.execute(agent, 'weather_lookup', {})).status).toBe(403);
    });
  });

  describe('an approval decides exactly what its code showed (finding 7)', () => {
    it('a request changed behind an open code gets a new code, and the old code approves nothing', async () => {
      const agent = await c.activeAgent(['echo']);
      const small = await c.requestCapability(agent, { capabilities: [{ name: 'transfer_money', constraints: { amount: { max: 10 } } }] });
      expect(small.json.status).toBe('pending');
      const shownCode = small.json.approval.user_code as string;
      expect((await revokeCapability(agent, ['transfer_money'])).status).toBe(200);
      const large = await c.requestCapability(agent, { capabilities: [{ name: 'transfer_money', constraints: { amount: { max: 1_000_000_000 } } }] });
      expect(large.json.status).toBe('pending');
      expect(large.json.approval.user_code).not.toBe(shownCode);
      const stale = await c.admin('POST', `/admin/agents/${agent.id}/approve`, { capabilities: ['transfer_money'], user_id: 'user-1', user_code: shownCode });
      expect(code(stale)).toBe('400 invalid_request');
      expect((await grantsOf(agent.id)).filter((g) => g.status === 'active' && g.capability === 'transfer_money')).toEqual([]);
      expect((await c.execute(agent, 'transfer_money', { amount: 5 })).status).toBe(403);
    });

    it('a second request while a code is open gets its own code covering every pending grant', async () => {
      const agent = await c.activeAgent(['echo']);
      const first = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
      const second = await c.requestCapability(agent, { capabilities: [{ name: 'transfer_money', constraints: { amount: { max: 10 } } }] });
      expect(second.json.approval.user_code).not.toBe(first.json.approval.user_code);
      const approval = (await server.store.getAgent(agent.id))!.agent.approval!;
      const pendingIds = (await grantsOf(agent.id)).filter((g) => g.status === 'pending').map((g) => g.id).sort();
      expect([...approval.grantIds].sort()).toEqual(pendingIds);
      expect(code(await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: first.json.approval.user_code }))).toBe('400 invalid_request');
      const approved = await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: second.json.approval.user_code.toLowerCase() });
      expect(approved.status).toBe(200);
      expect((await c.execute(agent, 'weather_lookup', {})).status).toBe(200);
    });

    it('an expired approval decides nothing', async () => {
      const agent = await c.activeAgent(['echo']);
      await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
      server.clock.advance((server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
      try {
        expect(code(await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1' }))).toBe('400 expired_token');
      } finally {
        server.clock.advance(-(server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
      }
    });
  });

  describe('one agent cannot make every execute expensive (finding 5)', () => {
    const bigList = (items: number, width = 8) => Array.from({ length: items }, (_, i) => `v${String(i).padStart(width, '0')}`);

    it(`constraints over ${GRANT_LIMITS.constraintBytes} bytes are refused naming the limit`, async () => {
      const agent = await c.activeAgent(['echo']);
      const res = await c.requestCapability(agent, { capabilities: [{ name: 'echo', constraints: { x: { in: bigList(250, 40) } } }] });
      expect(code(res)).toBe('400 invalid_request');
      expect(res.json.message).toMatch(/4096 bytes/);
    });

    it(`list operands over ${GRANT_LIMITS.listOperandItems} items and constraints nested over ${GRANT_LIMITS.constraintDepth} levels are refused`, async () => {
      const agent = await c.activeAgent(['echo']);
      const long = await c.requestCapability(agent, { capabilities: [{ name: 'echo', constraints: { x: { in: Array.from({ length: 300 }, (_, i) => i) } } }] });
      expect(code(long)).toBe('400 invalid_request');
      expect(long.json.message).toMatch(/256 items/);
      const deep = await c.requestCapability(agent, { capabilities: [{ name: 'echo', constraints: { x: { eq: { a: { b: { c: { d: { e: 1 } } } } } } } }] });
      expect(code(deep)).toBe('400 invalid_request');
      expect(deep.json.message).toMatch(/nest deeper than the limit of 6/);
    });

    it(`an agent holds at most ${GRANT_LIMITS.liveGrantsPerCapability} live grants for one capability`, async () => {
      const agent = await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'echo', constraints: { n: 0 } }] });
      expect(agent.res.json.status).toBe('active');
      for (let i = 1; i < GRANT_LIMITS.liveGrantsPerCapability; i++) {
        const res = await c.requestCapability(agent.agent!, { capabilities: [{ name: 'echo', constraints: { x: { in: bigList(200) } , n: i } }] });
        expect(res.status, res.text).toBe(200);
      }
      const over = await c.requestCapability(agent.agent!, { capabilities: [{ name: 'echo', constraints: { n: 'one too many' } }] });
      expect(code(over)).toBe('400 invalid_request');
      expect(over.json.message).toMatch(/liveGrantsPerCapability/);
      // Each execute still answers: the policy sees at most the capped grants.
      expect((await c.execute(agent.agent!, 'echo', { x: 'v00000001', n: 3 })).status).toBe(200);
    });

    it('asking and revoking over and over keeps a bounded history, not one record per round', async () => {
      const agent = await c.activeAgent(['echo']);
      for (let round = 0; round < 12; round++) {
        expect((await c.requestCapability(agent, { capabilities: ['weather_lookup'] })).status).toBe(200);
        expect((await revokeCapability(agent, ['weather_lookup'])).status).toBe(200);
      }
      const weather = (await grantsOf(agent.id)).filter((g) => g.capability === 'weather_lookup');
      expect(weather.length).toBeLessThanOrEqual(2);
    });
  });

  describe('an unusable agent cannot change its grants (finding 11)', () => {
    it('an expired agent is refused 403 agent_expired, by itself and by its host', async () => {
      const agent = await c.activeAgent(['echo', 'weather_lookup']);
      await c.admin('POST', `/admin/agents/${agent.id}/expire`);
      expect(code(await revokeCapability(agent, ['weather_lookup']))).toBe('403 agent_expired');
      expect(code(await revokeCapability(agent, ['weather_lookup'], 'host'))).toBe('403 agent_expired');
      expect((await grantsOf(agent.id)).every((g) => g.status === 'active')).toBe(true);
    });

    it('a revoked agent is refused 403 agent_revoked', async () => {
      const agent = await c.activeAgent(['echo']);
      await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
      expect(code(await revokeCapability(agent, ['echo'], 'host'))).toBe('403 agent_revoked');
    });

    it('a pending agent is refused 403 agent_pending', async () => {
      const host = await c.linkedHost([]);
      const { agent } = await c.register(host, { mode: 'delegated', capabilities: ['weather_lookup'] });
      expect(agent!.registration.status).toBe('pending');
      expect(code(await revokeCapability(agent!, ['weather_lookup'], 'host'))).toBe('403 agent_pending');
    });
  });

  describe('a token restricted by its capabilities claim stays restricted (finding 12)', () => {
    it('cannot request another capability', async () => {
      const agent = await c.activeAgent(['echo']);
      const res = await c.requestCapability(agent, { capabilities: ['transfer_money'] }, { capabilities: ['echo'] } as never);
      expect(code(res)).toBe('403 unauthorized');
      expect(res.json.message).toMatch(/capabilities claim.*transfer_money/);
      expect((await grantsOf(agent.id)).some((g) => g.capability === 'transfer_money')).toBe(false);
    });

    it('cannot revoke another capability', async () => {
      const agent = await c.activeAgent(['echo', 'weather_lookup']);
      const res = await revokeCapability(agent, ['weather_lookup'], 'agent', { capabilities: ['echo'] });
      expect(code(res)).toBe('403 unauthorized');
      expect((await grantsOf(agent.id)).every((g) => g.status === 'active')).toBe(true);
      expect((await revokeCapability(agent, ['echo'], 'agent', { capabilities: ['echo'] })).status).toBe(200);
    });

    it('sees grant_status only for the capabilities it names', async () => {
      const agent = await c.activeAgent(['echo', 'weather_lookup']);
      const token = await c.agentToken(agent, { capabilities: ['echo'] });
      const described = await http('GET', c.url('/capability/describe?name=weather_lookup'), { token });
      expect(described.json.grant_status).toBe('not_granted');
    });
  });
});
