// One HTTP-level test per row of the contract's §7 error tables (docs/service-contract.md), plus the
// codes DESIGN §9 adds, against a real server on loopback with real keys and signed JWTs. Each
// refusal row first shows the honest request succeeding, so a server refusing everything fails.
import { describe, expect, it } from 'vitest';
import { Client, code, http, type HttpResult } from '../support/client.ts';
import { newEd25519, newP256, newRsa } from '../support/keys.ts';
import { forEachStore, startTestServer, testServerForBlock } from '../support/server.ts';

/** Status, code and the {error, message} body, in one assertion. */
function expectError(res: HttpResult, status: number, error: string) {
  expect(code(res), res.text).toBe(`${status} ${error}`);
  expect(typeof res.json.message).toBe('string');
  return res.json;
}

forEachStore('contract §7 rows', (storeKind) => {
  const server = testServerForBlock({ store: storeKind });
  const c = new Client(server);

  describe('common codes', () => {
    it('400 invalid_request: malformed JSON, missing required fields, wrong parameter types', async () => {
      const host = await newEd25519();
      expectError((await c.register(host, {}, { raw: '{"name": ' })).res, 400, 'invalid_request');
      expectError((await c.register(host, { name: undefined })).res, 400, 'invalid_request');
      expectError((await c.register(host, { name: 42 })).res, 400, 'invalid_request');
      expect((await c.register(host, { name: 'honest' })).res.status).toBe(200);
    });

    it('400 unknown_constraint_operator: a constraint uses an unrecognized operator', async () => {
      // No default: transfer_money needs presence, so it cannot be one, and operators are checked
      // before anything is decided whether or not the host pre-approves the capability.
      const host = await c.linkedHost([]);
      const { res } = await c.register(host, { capabilities: [{ name: 'transfer_money', constraints: { amount: { max: 5, between: [1, 2] } } }] });
      expect(expectError(res, 400, 'unknown_constraint_operator').unknown_operators).toEqual(['between']);
    });

    it('401 invalid_jwt: JWT invalid, expired or signature failed', async () => {
      const agent = await c.activeAgent();
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      expectError(await c.execute(agent, 'echo', {}, { signWith: await newEd25519() }), 401, 'invalid_jwt');
      expectError(await c.execute(agent, 'echo', {}, { iat: c.now - 300, exp: c.now - 240 }), 401, 'invalid_jwt');
      expectError(await c.execute(agent, 'echo', {}, { token: 'not-a-jwt' }), 401, 'invalid_jwt');
    });

    it('403 agent_revoked: agent revoked', async () => {
      const agent = await c.activeAgent();
      expect((await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).status).toBe(200);
      expectError(await c.execute(agent, 'echo', {}), 403, 'agent_revoked');
    });

    it('403 agent_expired: agent session expired', async () => {
      const agent = await c.activeAgent();
      server.clock.advance((server.config.AGENT_SESSION_TTL_SECONDS + 1) * 1000);
      expectError(await c.execute(agent, 'echo', {}), 403, 'agent_expired');
    });

    it("403 absolute_lifetime_exceeded: agent's absolute lifetime elapsed", async () => {
      const agent = await c.activeAgent();
      expect((await c.admin('POST', `/admin/agents/${agent.id}/exceed-absolute-lifetime`)).status).toBe(200);
      expectError(await c.execute(agent, 'echo', {}), 403, 'absolute_lifetime_exceeded');
    });

    it('403 agent_pending: agent awaits approval', async () => {
      const host = await c.linkedHost([]);
      const { agent } = await c.register(host, { capabilities: ['echo'] });
      expect(agent?.registration.status).toBe('pending');
      expectError(await c.execute(agent!, 'echo', {}), 403, 'agent_pending');
    });

    it('403 host_revoked: host revoked', async () => {
      const agent = await c.activeAgent();
      expect((await c.hostPost('/host/revoke', agent.host)).status).toBe(200);
      expectError((await c.register(agent.host, { mode: 'delegated' })).res, 403, 'host_revoked');
    });

    it('403 host_pending: host awaits approval', async () => {
      const host = await newEd25519();
      const { agent } = await c.register(host, { mode: 'delegated' });
      expect(agent?.registration.status).toBe('pending');
      expect((await c.status(host, agent!.id)).status).toBe(200);
      expectError(await c.hostPost('/agent/revoke', host, { agent_id: agent!.id }), 403, 'host_pending');
    });

    it('403 unauthorized: caller not authorized for the operation', async () => {
      const victim = await c.activeAgent();
      const attacker = await c.activeAgent();
      expect((await c.status(victim.host, victim.id)).status).toBe(200);
      expectError(await c.status(attacker.host, victim.id), 403, 'unauthorized');
    });

    it('429 rate_limited: too many requests, with Retry-After in whole seconds', async () => {
      const limited = await startTestServer({ store: storeKind, env: { RATE_LIMIT_AGENT_PER_MINUTE: '2' } });
      try {
        const lc = new Client(limited);
        const agent = await lc.activeAgent();
        expect((await lc.execute(agent, 'echo', {})).status).toBe(200);
        expect((await lc.execute(agent, 'echo', {})).status).toBe(200);
        const res = await lc.execute(agent, 'echo', {});
        expectError(res, 429, 'rate_limited');
        expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
      } finally {
        await limited.close();
      }
    });

    it('500 internal_error: server-side failure, without internals in the body', async () => {
      const agent = await c.activeAgent(['flaky_backend']);
      const res = await c.execute(agent, 'flaky_backend', {});
      expectError(res, 500, 'internal_error');
      expect(res.text).not.toMatch(/configured to fail|at .*:\d+:\d+|Error:/);
    });
  });

  describe('POST /agent/register', () => {
    it('400 unsupported_mode: the requested mode is not supported by the server', async () => {
      expectError((await c.register(await newEd25519(), { mode: 'telepathic' })).res, 400, 'unsupported_mode');
      const only = await startTestServer({ store: storeKind, env: { MODES: 'delegated' } });
      try {
        expectError((await new Client(only).register(await newEd25519(), { mode: 'autonomous' })).res, 400, 'unsupported_mode');
      } finally {
        await only.close();
      }
    });

    it("400 unsupported_algorithm: the agent's key algorithm is outside the supported set", async () => {
      expectError((await c.register(await newEd25519(), {}, { agentKey: await newP256() })).res, 400, 'unsupported_algorithm');
      expectError((await c.register(await newEd25519(), {}, { agentKey: await newRsa() })).res, 400, 'unsupported_algorithm');
    });

    it('400 invalid_capabilities: a requested capability name does not exist or is blocked', async () => {
      const host = await newEd25519();
      const missing = expectError((await c.register(host, { capabilities: ['no_such_capability'] })).res, 400, 'invalid_capabilities');
      expect(missing.invalid_capabilities).toEqual(['no_such_capability']);
      const blocked = expectError((await c.register(host, { capabilities: ['echo', 'purge_all_data'] })).res, 400, 'invalid_capabilities');
      expect(blocked.invalid_capabilities).toEqual(['purge_all_data']);
    });

    it('409 agent_exists: a non-pending agent with this public key already exists under this host', async () => {
      const agent = await c.activeAgent();
      expectError((await c.register(agent.host, { capabilities: ['echo'] }, { agentKey: agent.key })).res, 409, 'agent_exists');
    });
  });

  describe('POST /agent/request-capability', () => {
    it('400 invalid_capabilities: a requested capability name does not exist or is blocked', async () => {
      const agent = await c.activeAgent();
      expectError(await c.requestCapability(agent, { capabilities: ['no_such_capability'] }), 400, 'invalid_capabilities');
      expectError(await c.requestCapability(agent, { capabilities: ['purge_all_data'] }), 400, 'invalid_capabilities');
    });

    it('409 already_granted: every requested capability is already granted', async () => {
      const agent = await c.activeAgent(['echo']);
      expectError(await c.requestCapability(agent, { capabilities: ['echo'] }), 409, 'already_granted');
      expect((await c.requestCapability(agent, { capabilities: ['echo', 'weather_lookup'] })).status).toBe(200);
    });
  });

  describe('POST /capability/execute', () => {
    it('400 invalid_request: capability missing or malformed', async () => {
      const agent = await c.activeAgent();
      const token = () => c.agentToken(agent, { aud: c.executeUrl });
      expectError(await http('POST', c.executeUrl, { token: await token(), json: { arguments: {} } }), 400, 'invalid_request');
      expectError(await http('POST', c.executeUrl, { token: await token(), json: { capability: 42 } }), 400, 'invalid_request');
      expectError(await http('POST', c.executeUrl, { token: await token(), json: { capability: 'echo', arguments: 'amount=5' } }), 400, 'invalid_request');
    });

    it('403 capability_not_granted: the agent has no active grant for the capability', async () => {
      const agent = await c.activeAgent(['echo']);
      expectError(await c.execute(agent, 'weather_lookup', {}), 403, 'capability_not_granted');
    });

    it("403 constraint_violated: arguments break the grant's constraints; the body carries violations", async () => {
      const agent = await c.activeAgent([{ name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD'] } } }]);
      expect((await c.execute(agent, 'transfer_money', { amount: 10, currency: 'USD' })).status).toBe(200);
      const body = expectError(await c.execute(agent, 'transfer_money', { amount: 5000, currency: 'GBP' }), 403, 'constraint_violated');
      expect(body.violations).toEqual([
        { field: 'amount', constraint: { max: 1000 }, actual: 5000 },
        { field: 'currency', constraint: { in: ['USD'] }, actual: 'GBP' },
      ]);
    });

    it('403 agent_revoked: agent revoked (host cascade)', async () => {
      const agent = await c.activeAgent();
      expect((await c.hostPost('/host/revoke', agent.host)).json.agents_revoked).toBe(1);
      expectError(await c.execute(agent, 'echo', {}), 403, 'host_revoked');
      const other = await c.activeAgent();
      await c.hostPost('/agent/revoke', other.host, { agent_id: other.id });
      expectError(await c.execute(other, 'echo', {}), 403, 'agent_revoked');
    });

    it('403 agent_expired: agent session expired', async () => {
      const agent = await c.activeAgent();
      expect((await c.admin('POST', `/admin/agents/${agent.id}/expire`)).status).toBe(200);
      expectError(await c.execute(agent, 'echo', {}), 403, 'agent_expired');
    });

    it('404 capability_not_found: no capability has that name', async () => {
      const agent = await c.activeAgent();
      expectError(await c.execute(agent, 'no_such_capability', {}), 404, 'capability_not_found');
    });
  });

  describe('POST /agent/reactivate', () => {
    it('404 agent_not_found: the agent ID does not exist', async () => {
      const agent = await c.activeAgent();
      expectError(await c.hostPost('/agent/reactivate', agent.host, { agent_id: 'agt_unknown' }), 404, 'agent_not_found');
    });

    it('200: the agent is already active; its current status is returned and nothing changes', async () => {
      const agent = await c.activeAgent();
      const before = (await c.status(agent.host, agent.id)).json;
      const res = await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id });
      expect(res.status).toBe(200);
      expect(res.json.status).toBe('active');
      const after = (await c.status(agent.host, agent.id)).json;
      expect(after.activated_at).toBe(before.activated_at);
      expect(after.agent_capability_grants).toEqual(before.agent_capability_grants);
    });

    it('403 agent_revoked, agent_rejected, agent_claimed or agent_pending: the agent is not in the expired state', async () => {
      const revoked = await c.activeAgent();
      await c.hostPost('/agent/revoke', revoked.host, { agent_id: revoked.id });
      expectError(await c.hostPost('/agent/reactivate', revoked.host, { agent_id: revoked.id }), 403, 'agent_revoked');

      const host = await c.linkedHost([]);
      const { agent: pending } = await c.register(host, { capabilities: ['echo'] });
      expectError(await c.hostPost('/agent/reactivate', host, { agent_id: pending!.id }), 403, 'agent_pending');
      await c.admin('POST', `/admin/agents/${pending!.id}/deny`, { user_id: 'user-1' });
      expectError(await c.hostPost('/agent/reactivate', host, { agent_id: pending!.id }), 403, 'agent_rejected');

      const unknownHost = await newEd25519();
      const { agent: auto } = await c.register(unknownHost, { mode: 'autonomous' });
      expect(auto?.registration.status).toBe('active');
      const { agent: delegated } = await c.register(unknownHost, { mode: 'delegated' });
      expect((await c.admin('POST', `/admin/agents/${delegated!.id}/approve`, { capabilities: [], user_id: 'user-1' })).status).toBe(200);
      expect((await c.status(unknownHost, auto!.id)).json.status).toBe('claimed');
      expectError(await c.hostPost('/agent/reactivate', unknownHost, { agent_id: auto!.id }), 403, 'agent_claimed');
    });

    it("403 absolute_lifetime_exceeded: the agent's absolute lifetime elapsed", async () => {
      const agent = await c.activeAgent();
      await c.admin('POST', `/admin/agents/${agent.id}/expire`);
      await c.admin('POST', `/admin/agents/${agent.id}/exceed-absolute-lifetime`);
      expectError(await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id }), 403, 'absolute_lifetime_exceeded');
      expect((await c.status(agent.host, agent.id)).json.status).toBe('revoked');
    });
  });

  describe('revocation', () => {
    it('404 agent_not_found: the agent ID does not exist', async () => {
      const agent = await c.activeAgent();
      expectError(await c.hostPost('/agent/revoke', agent.host, { agent_id: 'agt_unknown' }), 404, 'agent_not_found');
    });

    it('404 host_not_found: the host ID does not exist', async () => {
      expectError(await c.hostPost('/host/revoke', await newEd25519()), 404, 'host_not_found');
    });
  });

  describe('key rotation', () => {
    it("400 unsupported_algorithm: the new key's algorithm is not supported", async () => {
      const agent = await c.activeAgent();
      expectError(await c.hostPost('/agent/rotate-key', agent.host, { agent_id: agent.id, public_key: (await newP256()).publicJwk }), 400, 'unsupported_algorithm');
      expectError(await c.hostPost('/host/rotate-key', agent.host, { public_key: (await newRsa()).publicJwk }), 400, 'unsupported_algorithm');
      expect((await c.hostPost('/agent/rotate-key', agent.host, { agent_id: agent.id, public_key: (await newEd25519()).publicJwk })).status).toBe(200);
    });
  });

  describe('capability listing and describe', () => {
    it('401 authentication_required: the server requires authentication to list capabilities', async () => {
      const strict = await startTestServer({ store: storeKind, env: { CAPABILITY_LIST_REQUIRES_AUTH: 'true' } });
      try {
        const res = await http('GET', `${strict.baseUrl}/capability/list`);
        expectError(res, 401, 'authentication_required');
        expect(res.headers.get('www-authenticate')).toBe(`AgentAuth discovery="${strict.config.issuer}/.well-known/agent-configuration"`);
        const sc = new Client(strict);
        const host = await sc.linkedHost([]);
        expect((await http('GET', `${strict.baseUrl}/capability/list`, { token: await sc.hostToken(host) })).status).toBe(200);
      } finally {
        await strict.close();
      }
    });

    it('404 capability_not_found: no capability has that name', async () => {
      expectError(await http('GET', c.url('/capability/describe?name=no_such_capability')), 404, 'capability_not_found');
      expect((await http('GET', c.url('/capability/describe?name=echo'))).status).toBe(200);
    });
  });

  describe('codes DESIGN §9 adds', () => {
    it('404 agent_not_found on GET /agent/status', async () => {
      const agent = await c.activeAgent();
      expectError(await c.status(agent.host, 'agt_unknown'), 404, 'agent_not_found');
    });

    it('403 grant_revoked: the grant for the capability was revoked', async () => {
      const agent = await c.activeAgent(['echo']);
      const res = await http('POST', c.url('/agent/revoke-capability'), { token: await c.agentToken(agent), json: { capabilities: ['echo'] } });
      expect(res.json.revoked).toEqual(['echo']);
      expectError(await c.execute(agent, 'echo', {}), 403, 'grant_revoked');
    });

    it('403 dynamic_host_registration_disabled: unknown hosts may not register', async () => {
      const closed = await startTestServer({ store: storeKind, env: { DYNAMIC_HOST_REGISTRATION: 'false' } });
      try {
        const cc = new Client(closed);
        expectError((await cc.register(await newEd25519(), {})).res, 403, 'dynamic_host_registration_disabled');
        expect((await cc.register(await cc.linkedHost([]), {})).res.status).toBe(200);
      } finally {
        await closed.close();
      }
    });

    it('401 authentication_required: introspection without the resource-server token', async () => {
      const agent = await c.activeAgent();
      const token = await c.agentToken(agent);
      expectError(await http('POST', c.url('/agent/introspect'), { json: { token } }), 401, 'authentication_required');
    });

    it('404 not_found: an unknown path', async () => {
      expectError(await http('GET', c.url('/no/such/path')), 404, 'not_found');
    });
  });
});

describe('503 service_unavailable: storage unreachable fails closed', () => {
  it('a store that rejects answers 503 and never authorizes', async () => {
    const server = await startTestServer({ store: 'memory' });
    try {
      const c = new Client(server);
      const agent = await c.activeAgent();
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      await server.store.close();
      const res = await c.execute(agent, 'echo', {});
      expectError(res, 503, 'service_unavailable');
    } finally {
      await server.close().catch(() => {});
    }
  });
});
