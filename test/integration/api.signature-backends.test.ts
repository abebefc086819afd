// The signature attacks of api.jwt-attacks.test.ts that concern the Ed25519 backend, run against a
// real server once per ED25519_VERIFIER setting: libsodium (sodium-native) and node (node:crypto).
// Both must accept the same honest tokens and refuse the same forged ones over HTTP, since two
// instances of one deployment may run different backends (one where the prebuilt binary loads,
// one where it does not). Every attack is measured against an honest control that passes.
import { KeyObject, randomUUID, sign } from 'node:crypto';
import { createRequire } from 'node:module';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { hostJwt, newEd25519, type TestKey } from '../support/keys.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

/** The prime order L of the Ed25519 base point. */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;
const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

const splitToken = (token: string) => {
  const dot = token.lastIndexOf('.');
  return { signingInput: token.slice(0, dot), encoded: token.slice(dot + 1) };
};

/**
 * The same token with S replaced by S + L, spelled canonically in base64url: S + L names the same
 * scalar mod L, so this is the malleated twin of a valid signature, not a random one.
 */
function malleateS(token: string): string {
  const { signingInput, encoded } = splitToken(token);
  const signature = Buffer.from(encoded, 'base64url');
  let s = 0n;
  for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(signature[i]!);
  s += L;
  for (let i = 32; i < 64; i++, s >>= 8n) signature[i] = Number(s & 0xffn);
  expect(s, 'S + L still fits in 32 bytes').toBe(0n);
  return `${signingInput}.${signature.toString('base64url')}`;
}

/**
 * The same signature bytes spelled differently: 64 bytes take 86 base64url characters, whose last
 * one carries 2 bits of the signature and 4 spare bits that decoders ignore. Flipping the lowest
 * spare bit gives another spelling of the very same bytes.
 */
function respellSignature(token: string): string {
  const { signingInput, encoded } = splitToken(token);
  const last = BASE64URL.indexOf(encoded.at(-1)!);
  const respelled = encoded.slice(0, -1) + BASE64URL[last ^ 1];
  expect(respelled).not.toBe(encoded);
  expect(Buffer.from(respelled, 'base64url').equals(Buffer.from(encoded, 'base64url')), 'the same 64 bytes').toBe(true);
  return `${signingInput}.${respelled}`;
}

/** A compact JWS signed with Ed25519 over exactly this header, so only what the header says can differ. */
function signedWithHeader(key: TestKey, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const signingInput = `${b64(header)}.${b64(claims)}`;
  const privateKey = KeyObject.from(key.privateKey as Parameters<typeof KeyObject.from>[0]);
  return `${signingInput}.${sign(null, Buffer.from(signingInput), privateKey).toString('base64url')}`;
}

// The libsodium backend calls sodium-native's crypto_sign_verify_detached through the module
// object that Node's require cache shares with this file; spying on it shows which backend a
// server really verifies with (the node backend never loads the module at all).
const sodiumNative = createRequire(import.meta.url)('sodium-native') as { crypto_sign_verify_detached: (...args: Uint8Array[]) => boolean };
const sodiumCalls = vi.spyOn(sodiumNative, 'crypto_sign_verify_detached');
afterEach(() => sodiumCalls.mockClear());

describe.each([
  { setting: 'libsodium', usesSodium: true },
  { setting: 'node', usesSodium: false },
])('ED25519_VERIFIER=$setting', ({ setting, usesSodium }) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: 'memory', env: { ED25519_VERIFIER: setting } });
    c = new Client(server);
  });
  afterAll(() => server?.close());

  /** An active agent whose honest execute succeeds (the control every attack is measured against). */
  async function honestAgent(): Promise<TestAgent> {
    const agent = await c.activeAgent(['echo']);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    return agent;
  }

  const agentClaims = (agent: TestAgent) => ({
    iss: agent.host.thumbprint, sub: agent.id, aud: c.executeUrl, iat: c.now, exp: c.now + 60, jti: randomUUID(),
  });

  it(`a valid agent token is accepted (200), verified by ${usesSodium ? 'libsodium' : 'node:crypto, never libsodium'}`, async () => {
    const agent = await c.activeAgent(['echo']);
    sodiumCalls.mockClear();
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    if (usesSodium) expect(sodiumCalls).toHaveBeenCalled();
    else expect(sodiumCalls).not.toHaveBeenCalled();
  });

  it('an agent token whose signature is malleated to S + L is refused (401 invalid_jwt); the original then passes', async () => {
    const agent = await honestAgent();
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    expect(code(await c.execute(agent, 'echo', {}, { token: malleateS(token) }))).toBe('401 invalid_jwt');
    // The refusal happened before the jti was used, so the untouched token is still good.
    expect((await c.execute(agent, 'echo', {}, { token })).status).toBe(200);
  });

  it('an agent token whose signature is spelled non-canonically in base64url is refused; the original then passes', async () => {
    const agent = await honestAgent();
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    expect(code(await c.execute(agent, 'echo', {}, { token: respellSignature(token) }))).toBe('401 invalid_jwt');
    expect((await c.execute(agent, 'echo', {}, { token })).status).toBe(200);
  });

  it('an agent token whose header claims ES256 for the Ed25519 key is refused, though its Ed25519 signature is valid', async () => {
    const agent = await honestAgent();
    // The hand-built token with the honest header passes, so the only difference below is the alg.
    const honest = signedWithHeader(agent.key, { alg: 'EdDSA', typ: 'agent+jwt' }, agentClaims(agent));
    expect((await c.execute(agent, 'echo', {}, { token: honest })).status).toBe(200);
    const lying = signedWithHeader(agent.key, { alg: 'ES256', typ: 'agent+jwt' }, agentClaims(agent));
    expect(code(await c.execute(agent, 'echo', {}, { token: lying }))).toBe('401 invalid_jwt');
  });

  it('an agent token signed by another key is refused', async () => {
    const agent = await honestAgent();
    expect(code(await c.execute(agent, 'echo', {}, { signWith: await newEd25519() }))).toBe('401 invalid_jwt');
  });

  it('a host token signed by another key is refused, for an unknown host (register) and a known one (status)', async () => {
    const stranger = await newEd25519();
    const forged = await c.hostToken(stranger, { agentKey: await newEd25519(), signWith: await newEd25519() });
    expect(code((await c.register(stranger, { name: 'forged', mode: 'delegated' }, { token: forged })).res)).toBe('401 invalid_jwt');

    const agent = await honestAgent();
    expect((await c.status(agent.host, agent.id)).status).toBe(200);
    const impostor = await newEd25519();
    const token = await hostJwt(agent.host, server.config.issuer, { now: c.now, signWith: impostor });
    expect(code(await c.status(agent.host, agent.id, token))).toBe('401 invalid_jwt');
  });

  it('a host token malleated to S + L cannot register an agent', async () => {
    const host = await newEd25519();
    const token = await c.hostToken(host, { agentKey: await newEd25519() });
    const res = await http('POST', c.url('/agent/register'), { token: malleateS(token), json: { name: 'malleated', mode: 'delegated' } });
    expect(code(res)).toBe('401 invalid_jwt');
  });

  it('a host registers an agent with a self-signed host token', async () => {
    const host = await newEd25519();
    sodiumCalls.mockClear();
    const { res, agent } = await c.register(host, { name: 'self-signed', mode: 'delegated' });
    expect(res.status, res.text).toBe(200);
    expect(agent?.id).toEqual(expect.any(String));
    if (usesSodium) expect(sodiumCalls).toHaveBeenCalled();
    else expect(sodiumCalls).not.toHaveBeenCalled();
  });
});
