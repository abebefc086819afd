// Ed25519 public keys that are small-order, non-canonical or off the curve are refused with 400
// invalid_request wherever a key enters the server (SECURITY.md): agent registration, agent
// key rotation, dynamic host registration, host key rotation and admin pre-registration. Each test
// checks that nothing was stored and that an honest key still goes through the same door.
import { calculateJwkThumbprint, type JWK } from 'jose';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519, signJwt } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

// Each encoding and the reason the server gives (test/unit/ed25519-point.test.ts derives them).
const BAD_KEYS = [
  { kind: 'small-order', detail: 'the identity', hex: '01'.padEnd(64, '0'), reason: 'small order' },
  { kind: 'small-order', detail: 'all-zero x, the order-4 point y = 0', hex: '00'.repeat(32), reason: 'small order' },
  { kind: 'small-order', detail: 'an order-8 torsion point', hex: '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', reason: 'small order' },
  { kind: 'non-canonical', detail: 'y = p + 1, the identity unreduced', hex: `ee${'ff'.repeat(30)}7f`, reason: 'non-canonical encoding' },
  { kind: 'non-canonical', detail: 'the identity with the sign bit set', hex: `01${'00'.repeat(30)}80`, reason: 'non-canonical sign' },
  { kind: 'off-curve', detail: 'y = 2', hex: '02'.padEnd(64, '0'), reason: 'not a point on the curve' },
].map((bad) => ({ ...bad, jwk: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(bad.hex, 'hex').toString('base64url') } as JWK }));

type BadKey = (typeof BAD_KEYS)[number];

const refusal = (label: string, bad: BadKey) => new RegExp(`^${label} is not a valid Ed25519 public key: ${bad.reason}`);

forEachStore('bad Ed25519 keys are refused', (store) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const hostIdOf = async (thumbprint: string) => (await server.store.findHostByThumbprint(thumbprint))!.id;

  it.each(BAD_KEYS)('a $kind agent key ($detail) is refused at registration', async (bad) => {
    const host = await c.linkedHost(['echo']);
    const token = await c.hostToken(host, { claims: { agent_public_key: bad.jwk } });
    const res = await c.register(host, { mode: 'delegated' }, { token });
    expect(code(res.res)).toBe('400 invalid_request');
    expect(res.res.json.message).toMatch(refusal('agent_public_key', bad));
    const hostId = await hostIdOf(host.thumbprint);
    expect(await server.store.findAgentIdByKey(hostId, await calculateJwkThumbprint(bad.jwk))).toBeNull();
    expect(await server.store.listHostAgentIds(hostId)).toEqual([]);
    // The same host registers an honest key through the same door.
    expect((await c.register(host, { mode: 'delegated' })).res.status).toBe(200);
  });

  it.each(BAD_KEYS)('a $kind agent key ($detail) from an unknown host creates neither host nor agent', async (bad) => {
    const host = await newEd25519();
    const token = await c.hostToken(host, { claims: { agent_public_key: bad.jwk } });
    const res = await c.register(host, { mode: 'delegated' }, { token });
    expect(code(res.res)).toBe('400 invalid_request');
    expect(res.res.json.message).toMatch(refusal('agent_public_key', bad));
    expect(await server.store.findHostByThumbprint(host.thumbprint)).toBeNull();
  });

  it.each(BAD_KEYS)('a $kind agent key ($detail) is refused at agent key rotation', async (bad) => {
    const agent = await c.activeAgent(['echo']);
    const res = await c.hostPost('/agent/rotate-key', agent.host, { agent_id: agent.id, public_key: bad.jwk });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(refusal('public_key', bad));
    const stored = (await server.store.getAgent(agent.id))!.agent;
    expect(stored.publicJwk).toEqual(agent.key.publicJwk);
    expect(stored.keyVersion).toBe(1);
    expect(await server.store.findAgentIdByKey(stored.hostId, await calculateJwkThumbprint(bad.jwk))).toBeNull();
    // The old key still works, and an honest rotation still goes through.
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    expect((await c.hostPost('/agent/rotate-key', agent.host, { agent_id: agent.id, public_key: (await newEd25519()).publicJwk })).status).toBe(200);
  });

  // An attacker cannot sign with a bogus point, but the thumbprint is over the JWK alone, so a token
  // naming the bad key as host_public_key (and its thumbprint as iss) can be signed with any key.
  // The key is parsed before the signature is checked, so the refusal is the key's, not the JWT's.
  it.each(BAD_KEYS)('a $kind host key ($detail) is refused at dynamic registration', async (bad) => {
    const signer = await newEd25519();
    const iss = await calculateJwkThumbprint(bad.jwk);
    const claims = { iss, aud: c.issuer, host_public_key: bad.jwk, agent_public_key: (await newEd25519()).publicJwk };
    const token = await signJwt(signer, claims, { typ: 'host+jwt', now: c.now });
    const res = await http('POST', c.url('/agent/register'), { token, json: { name: 'bad-host', mode: 'delegated' } });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(refusal('host_public_key', bad));
    expect(await server.store.findHostByThumbprint(iss)).toBeNull();
    // The same shape of token from an honest key registers.
    expect((await c.register(signer, { mode: 'delegated' })).res.status).toBe(200);
  });

  it.each(BAD_KEYS)('a $kind host key ($detail) is refused at host key rotation', async (bad) => {
    const agent = await c.activeAgent(['echo']);
    const res = await c.hostPost('/host/rotate-key', agent.host, { public_key: bad.jwk });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(refusal('public_key', bad));
    expect(await server.store.findHostByThumbprint(await calculateJwkThumbprint(bad.jwk))).toBeNull();
    expect((await server.store.findHostByThumbprint(agent.host.thumbprint))?.publicJwk).toEqual(agent.host.publicJwk);
    // The old host key still works, and an honest rotation still goes through.
    expect((await c.status(agent.host, agent.id)).status).toBe(200);
    expect((await c.hostPost('/host/rotate-key', agent.host, { public_key: (await newEd25519()).publicJwk })).status).toBe(200);
  });

  it.each(BAD_KEYS)('a $kind host key ($detail) is refused at admin pre-registration', async (bad) => {
    const res = await c.admin('POST', '/admin/hosts', { public_key: bad.jwk, default_capabilities: ['echo'], user_id: 'user-1' });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(refusal('public_key', bad));
    expect(await server.store.findHostByThumbprint(await calculateJwkThumbprint(bad.jwk))).toBeNull();
    const honest = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: honest.publicJwk, default_capabilities: ['echo'], user_id: 'user-1' })).status).toBe(201);
  });

  // A 32-byte key is 43 base64url characters carrying 258 bits: the last character's 2 spare bits
  // give each key four spellings and four RFC 7638 thumbprints, i.e. four identities.
  const respelled = (x: string) => {
    const last = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.indexOf(x.at(-1)!);
    return `${x.slice(0, -1)}${'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'[last ^ 1]}`;
  };

  it('a revoked host cannot come back under another spelling of its key', async () => {
    const agent = await c.activeAgent(['echo']);
    expect((await c.hostPost('/host/revoke', agent.host)).status).toBe(200);
    const other = { ...agent.host.publicJwk, x: respelled(agent.host.publicJwk.x as string) };
    expect(Buffer.from(other.x, 'base64url')).toEqual(Buffer.from(agent.host.publicJwk.x as string, 'base64url'));
    const res = await c.admin('POST', '/admin/hosts', { public_key: other, default_capabilities: ['echo'], user_id: 'user-1' });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(/not canonical base64url/);
  });

  it('an agent key cannot be registered twice under one host by spelling it another way', async () => {
    const agent = await c.activeAgent(['echo']);
    const other = { ...agent.key.publicJwk, x: respelled(agent.key.publicJwk.x as string) };
    const token = await c.hostToken(agent.host, { claims: { agent_public_key: other } });
    const res = await c.register(agent.host, { mode: 'delegated' }, { token });
    expect(code(res.res)).toBe('400 invalid_request');
    expect(res.res.json.message).toMatch(/not canonical base64url/);
  });
});
