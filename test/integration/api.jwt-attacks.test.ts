// JWT verification (DESIGN §4), each test named after the attack it stops, each with a real signed
// (or forged) token and an honest control that must pass first.
import { randomUUID } from 'node:crypto';
import { exportSPKI, importJWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { hostJwt, hs256Jwt, newEd25519, newP256, unsignedJwt } from '../support/keys.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let c: Client;

beforeAll(async () => {
  server = await startTestServer({ store: 'redis' });
  c = new Client(server);
});
afterAll(() => server.close());

/** An active agent whose honest execute succeeds (the control every attack is measured against). */
async function honestAgent(): Promise<TestAgent> {
  const agent = await c.activeAgent(['echo']);
  expect((await c.execute(agent, 'echo', {})).status).toBe(200);
  return agent;
}

const agentClaims = (agent: TestAgent, aud: string) => ({
  iss: agent.host.thumbprint, sub: agent.id, aud, iat: c.now, exp: c.now + 60, jti: randomUUID(),
});

async function publicKeySecrets(agent: TestAgent): Promise<Array<[string, Uint8Array]>> {
  const pem = await exportSPKI((await importJWK(agent.key.publicJwk, 'EdDSA', { extractable: true })) as Parameters<typeof exportSPKI>[0]);
  return [
    ['public JWK JSON', Buffer.from(JSON.stringify(agent.key.publicJwk))],
    ['raw public key bytes', Buffer.from(agent.key.publicJwk.x!, 'base64url')],
    ['public key PEM', Buffer.from(pem)],
  ];
}

describe('agent JWT attacks on POST /capability/execute', () => {
  it('an unsigned token (alg none) is refused', async () => {
    const agent = await honestAgent();
    const token = unsignedJwt({ typ: 'agent+jwt' }, agentClaims(agent, c.executeUrl));
    expect(code(await c.execute(agent, 'echo', {}, { token }))).toBe('401 invalid_jwt');
  });

  it('an HS256 token keyed with the agent public key is refused (algorithm confusion)', async () => {
    const agent = await honestAgent();
    for (const [label, secret] of await publicKeySecrets(agent)) {
      const token = await hs256Jwt({ typ: 'agent+jwt' }, agentClaims(agent, c.executeUrl), secret);
      expect(code(await c.execute(agent, 'echo', {}, { token })), label).toBe('401 invalid_jwt');
    }
  });

  it('a token signed by another key is refused', async () => {
    const agent = await honestAgent();
    expect(code(await c.execute(agent, 'echo', {}, { signWith: await newEd25519() }))).toBe('401 invalid_jwt');
  });

  it('an expired token is refused, while 30 s of clock skew is tolerated', async () => {
    const agent = await honestAgent();
    expect((await c.execute(agent, 'echo', {}, { iat: c.now - 50, exp: c.now - 10 })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { iat: c.now - 180, exp: c.now - 120 }))).toBe('401 invalid_jwt');
  });

  it('a long-lived token (exp - iat over the cap) is refused', async () => {
    const agent = await honestAgent();
    expect(code(await c.execute(agent, 'echo', {}, { exp: c.now + 3600 }))).toBe('401 invalid_jwt');
  });

  it('a token issued more than 30 s in the future is refused; 20 s ahead is tolerated', async () => {
    const agent = await honestAgent();
    expect((await c.execute(agent, 'echo', {}, { iat: c.now + 20, exp: c.now + 80 })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { iat: c.now + 120, exp: c.now + 180 }))).toBe('401 invalid_jwt');
  });

  it('a token for another audience is refused; the execute URL and the issuer are accepted', async () => {
    const agent = await honestAgent();
    expect((await c.execute(agent, 'echo', {}, { aud: server.config.issuer })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { aud: 'https://elsewhere.example/capability/execute' }))).toBe('401 invalid_jwt');
  });

  it('an execute-audience token cannot be used on other agent endpoints', async () => {
    const agent = await honestAgent();
    const res = await c.requestCapability(agent, { capabilities: ['weather_lookup'] }, { claims: { aud: c.executeUrl } });
    expect(code(res)).toBe('401 invalid_jwt');
  });

  it('a token with the wrong or no typ (e.g. a host JWT) is refused', async () => {
    const agent = await honestAgent();
    for (const typ of ['JWT', 'host+jwt', null]) {
      expect(code(await c.execute(agent, 'echo', {}, { typ })), String(typ)).toBe('401 invalid_jwt');
    }
  });

  it('a replayed jti is refused, even when the first request failed after verification', async () => {
    const agent = await honestAgent();
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    expect(code(await c.execute(agent, 'no_such_capability', {}, { token }))).toBe('404 capability_not_found');
    expect(code(await c.execute(agent, 'echo', {}, { token }))).toBe('401 invalid_jwt');
  });

  it('a forged token carrying a stolen jti does not burn the real one', async () => {
    const agent = await honestAgent();
    const jti = randomUUID();
    expect(code(await c.execute(agent, 'echo', {}, { jti, signWith: await newEd25519() }))).toBe('401 invalid_jwt');
    expect((await c.execute(agent, 'echo', {}, { jti })).status).toBe(200);
  });

  it('a jti used on request-capability cannot be replayed on execute (one replay record per agent)', async () => {
    const agent = await honestAgent();
    const token = await c.agentToken(agent);
    expect((await http('POST', c.url('/agent/request-capability'), { token, json: { capabilities: ['weather_lookup'] } })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { token }))).toBe('401 invalid_jwt');
  });

  it('a token without jti is refused', async () => {
    const agent = await honestAgent();
    expect(code(await c.execute(agent, 'echo', {}, { omit: ['jti'] }))).toBe('401 invalid_jwt');
  });

  it("a token naming another host as iss is refused; no iss is accepted", async () => {
    const agent = await honestAgent();
    const other = await honestAgent();
    expect((await c.execute(agent, 'echo', {}, { claims: { iss: undefined } })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { claims: { iss: other.host.thumbprint } }))).toBe('401 invalid_jwt');
  });

  it('a token for an unknown agent is refused', async () => {
    const agent = await honestAgent();
    expect(code(await c.execute(agent, 'echo', {}, { claims: { sub: 'agt_nobody' } }))).toBe('401 invalid_jwt');
  });

  it('the old agent key stops working at once after rotation', async () => {
    const agent = await honestAgent();
    const next = await newEd25519();
    expect((await c.hostPost('/agent/rotate-key', agent.host, { agent_id: agent.id, public_key: next.publicJwk })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('401 invalid_jwt');
    expect((await c.execute({ ...agent, key: next }, 'echo', {})).status).toBe(200);
  });
});

describe('host JWT attacks', () => {
  const regBody = { name: 'attack', mode: 'delegated' };

  it('an unsigned host token (alg none) cannot register an agent', async () => {
    const host = await newEd25519();
    const agentKey = await newEd25519();
    const claims = { iss: host.thumbprint, aud: server.config.issuer, iat: c.now, exp: c.now + 60, jti: randomUUID(), host_public_key: host.publicJwk, agent_public_key: agentKey.publicJwk };
    expect(code(await http('POST', c.url('/agent/register'), { token: unsignedJwt({ typ: 'host+jwt' }, claims), json: regBody }))).toBe('401 invalid_jwt');
    expect((await c.register(host, regBody)).res.status).toBe(200);
  });

  it('an HS256 host token keyed with the host public key is refused (algorithm confusion)', async () => {
    const host = await newEd25519();
    const claims = { iss: host.thumbprint, aud: server.config.issuer, iat: c.now, exp: c.now + 60, jti: randomUUID(), host_public_key: host.publicJwk, agent_public_key: (await newEd25519()).publicJwk };
    const token = await hs256Jwt({ typ: 'host+jwt' }, claims, Buffer.from(JSON.stringify(host.publicJwk)));
    expect(code(await http('POST', c.url('/agent/register'), { token, json: regBody }))).toBe('401 invalid_jwt');
  });

  it('a host token whose iss is not the thumbprint of host_public_key is refused', async () => {
    const host = await newEd25519();
    const token = await c.hostToken(host, { agentKey: await newEd25519(), claims: { iss: (await newEd25519()).thumbprint } });
    expect(code((await c.register(host, regBody, { token })).res)).toBe('401 invalid_jwt');
  });

  it('a host token signed by a key other than host_public_key is refused', async () => {
    const host = await newEd25519();
    const token = await c.hostToken(host, { agentKey: await newEd25519(), signWith: await newEd25519() });
    expect(code((await c.register(host, regBody, { token })).res)).toBe('401 invalid_jwt');
  });

  it('a known host is verified with its stored key, never with a key the token carries', async () => {
    const agent = await honestAgent();
    const impostor = await newEd25519();
    const token = await hostJwt(impostor, server.config.issuer, { now: c.now, claims: { iss: agent.host.thumbprint, host_public_key: impostor.publicJwk } });
    expect(code(await c.status(agent.host, agent.id, token))).toBe('401 invalid_jwt');
  });

  it('expired, wrong-audience, wrong-typ and future host tokens are refused', async () => {
    const agent = await honestAgent();
    expect((await c.status(agent.host, agent.id)).status).toBe(200);
    const cases = {
      expired: { iat: c.now - 180, exp: c.now - 120 },
      audience: { claims: { aud: 'https://elsewhere.example' } },
      typ: { typ: 'agent+jwt' },
      future: { iat: c.now + 120, exp: c.now + 180 },
    };
    for (const [label, options] of Object.entries(cases)) {
      expect(code(await c.status(agent.host, agent.id, c.hostToken(agent.host, options))), label).toBe('401 invalid_jwt');
    }
  });

  it('a replayed host token is refused (status)', async () => {
    const agent = await honestAgent();
    const token = await c.hostToken(agent.host);
    expect((await c.status(agent.host, agent.id, token)).status).toBe(200);
    expect(code(await c.status(agent.host, agent.id, token))).toBe('401 invalid_jwt');
  });

  it('an unknown host cannot read agents (404 host_not_found)', async () => {
    const agent = await honestAgent();
    expect(code(await c.status(await newEd25519(), agent.id))).toBe('404 host_not_found');
  });

  it('a revoked host is refused everywhere', async () => {
    const agent = await honestAgent();
    expect((await c.hostPost('/host/revoke', agent.host)).status).toBe(200);
    expect(code(await c.status(agent.host, agent.id))).toBe('403 host_revoked');
    expect(code((await c.register(agent.host, regBody)).res)).toBe('403 host_revoked');
  });

  it('the old host key stops working after host key rotation; agents keep working with the new iss', async () => {
    const agent = await honestAgent();
    const next = await newEd25519();
    expect((await c.hostPost('/host/rotate-key', agent.host, { public_key: next.publicJwk })).status).toBe(200);
    expect(code(await c.status(agent.host, agent.id))).toBe('404 host_not_found');
    expect((await c.status(next, agent.id)).status).toBe(200);
    expect((await c.execute({ ...agent, host: next }, 'echo', {})).status).toBe(200);
  });
});

describe('algorithms are configuration', () => {
  it('P-256 agents are refused by default and work end to end when P-256 is enabled', async () => {
    const p256 = await newP256();
    expect(code((await c.register(await newEd25519(), {}, { agentKey: p256 })).res)).toBe('400 unsupported_algorithm');
    const enabled = await startTestServer({ env: { ALGORITHMS: 'Ed25519,P-256' } });
    try {
      const ec = new Client(enabled);
      const host = await ec.linkedHost(['echo']);
      const { agent } = await ec.register(host, { capabilities: ['echo'] }, { agentKey: p256 });
      expect(agent?.registration.status).toBe('active');
      expect((await ec.execute(agent!, 'echo', { hello: 'p256' })).status).toBe(200);
      // An EdDSA signature over the same claims cannot stand in for the stored P-256 key.
      expect(code(await ec.execute(agent!, 'echo', {}, { signWith: await newEd25519() }))).toBe('401 invalid_jwt');
    } finally {
      await enabled.close();
    }
  });
});

describe('introspection', () => {
  it('does not consume the jti: the introspected token still executes once', async () => {
    const agent = await honestAgent();
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    const res = await http('POST', c.url('/agent/introspect'), { token: server.config.ADMIN_TOKEN!, json: { token } });
    expect(res.json).toMatchObject({ active: true, agent_id: agent.id });
    expect((await c.execute(agent, 'echo', {}, { token })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { token }))).toBe('401 invalid_jwt');
  });
});
