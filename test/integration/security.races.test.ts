// The races SECURITY.md guards against, run many times against real Redis (and a few times on the
// memory store): a host revocation racing registrations, a host revocation racing an approval, and
// request-capability racing an agent revocation. After the revocation has answered, nothing it
// revoked may be active or able to execute.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, http, type TestAgent } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

forEachStore('races', (storeKind) => {
  let server: TestServer;
  let c: Client;
  const rounds = storeKind === 'redis' ? 1 : 0.25;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { AGENTS_PER_HOST_MAX: '100000' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const runs = (n: number) => Math.max(2, Math.round(n * rounds));
  /** Starts `first`, then `second` after a delay that sweeps a few milliseconds over the rounds. */
  const staggered = async <A, B>(round: number, first: () => Promise<A>, second: () => Promise<B>): Promise<[A, B]> => {
    const a = first();
    await new Promise((r) => setTimeout(r, round % 4));
    const b = second();
    return [await a, await b];
  };

  it('a host revocation catches every registration in flight: afterwards no agent of the host is active or executes', async () => {
    for (let round = 0; round < runs(6); round++) {
      const host = await c.linkedHost(['echo']);
      const hostId = (await server.store.findHostByThumbprint(host.thumbprint))!.id;
      const registrations = Array.from({ length: 25 }, () => c.register(host, { mode: 'delegated', capabilities: ['echo'] }));
      await new Promise((r) => setTimeout(r, round % 3 === 0 ? 0 : 5 * round));
      const revoked = await c.admin('POST', `/admin/hosts/${hostId}/revoke`);
      expect(revoked.status).toBe(200);
      const results = await Promise.all(registrations);
      for (const { res, agent } of results) {
        if (res.status !== 200) {
          expect(res.status).toBe(403);
          continue;
        }
        const stored = (await server.store.getAgent(agent!.id))!;
        expect(stored.agent.hostStatus, `round ${round}`).toBe('revoked');
        expect(stored.agent.status).toBe('revoked');
        expect((await c.execute(agent!, 'echo', {})).status).toBe(403);
      }
      for (const agentId of await server.store.listHostAgentIds(hostId)) {
        expect((await server.store.getAgent(agentId))!.agent.status).toBe('revoked');
      }
    }
  });

  it('a revoked host stays revoked when an approval races the revocation', async () => {
    for (let round = 0; round < runs(40); round++) {
      // An autonomous registration makes an active, unlinked host; its delegated agent then waits
      // for a person, whose approval links (and writes) the host.
      const host = await newEd25519();
      expect((await c.register(host, { mode: 'autonomous', capabilities: ['echo'] })).res.status).toBe(200);
      const { agent } = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
      expect(agent!.registration.status).toBe('pending');
      const revokeToken = await c.hostToken(host);
      const approve = () => c.admin('POST', `/admin/agents/${agent!.id}/approve`, { user_id: 'user-1' });
      const revokeHost = () => http('POST', c.url('/host/revoke'), { token: revokeToken });
      // The revocation starts first: its status write then lands inside the approval's read-then-write.
      const [revoke] = await staggered(round, revokeHost, approve);
      expect(revoke.status).toBe(200);
      const stored = (await server.store.findHostByThumbprint(host.thumbprint))!;
      expect(stored.status, `round ${round}`).toBe('revoked');
      expect((await server.store.getAgent(agent!.id))!.agent.status).toBe('revoked');
      expect((await c.register(host, { mode: 'delegated' })).res.status).toBe(403);
    }
  });

  it('request-capability racing the agent revocation never leaves a revoked agent with an active grant', async () => {
    for (let round = 0; round < runs(40); round++) {
      // A default capability the agent does not hold yet: the policy grants it without asking anyone.
      const host = await c.linkedHost(['echo', 'weather_lookup']);
      const agent: TestAgent = (await c.register(host, { mode: 'delegated', capabilities: ['echo'] })).agent!;
      const token = await c.agentToken(agent);
      const revokeToken = await c.hostToken(agent.host);
      await staggered(
        round,
        () => http('POST', c.url('/agent/revoke'), { token: revokeToken, json: { agent_id: agent.id } }),
        () => http('POST', c.url('/agent/request-capability'), { token, json: { capabilities: ['weather_lookup'] } }),
      );
      const stored = (await server.store.getAgent(agent.id))!;
      expect(stored.agent.status).toBe('revoked');
      expect(stored.grants.filter((g) => g.status === 'active'), `round ${round}`).toEqual([]);
    }
  });
});
