// Attacks on keys delivered by a JWKS URL (protocol §5.1, §5.2, §5.5), over HTTP against a real
// agentgate (memory and Redis stores) and real HTTPS publishers on loopback. Each test is named
// after the attack it stops. The attackers: an anonymous caller (no key anyone registered), a
// malicious host (its own registered key), a host that controls a JWKS server, and someone who
// knows a victim's public keys or JWKS URL (both are public). Manual clock, bounded polls, no sleeps.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTestCertificates } from '../support/certificates.ts';
import { Client, code, http, type HttpResult, type TestAgent } from '../support/client.ts';
import { JWKS_TEST_ENV, startJwksServer, type JwksServer } from '../support/jwks-server.ts';
import { newEd25519, newP256, newRsa, signJwt, type JwtOptions, type TestKey } from '../support/keys.ts';
import { forEachStore, testServerForBlock, type StoreKind, type TestServer } from '../support/server.ts';

const TTL_SECONDS = 300;
const STALE_SECONDS = 60;
const REFRESH_SECONDS = TTL_SECONDS + STALE_SECONDS + 1;

let publisher: JwksServer;
beforeAll(async () => {
  publisher = await startJwksServer();
});
afterAll(() => publisher.close());

/** A fresh path on the publisher, so no test sees another's cached set. */
const newPath = () => `/${randomUUID()}/jwks.json`;
/** A syntactically valid thumbprint nobody holds a key for. */
const randomThumbprint = () => randomBytes(32).toString('base64url');
/** A 4xx with the error body: what bad input must always get (never a 500, never a hang). */
const clientError = (res: HttpResult) => (res.status >= 400 && res.status < 500 && typeof res.json?.error === 'string' ? '4xx with error body' : `${res.status} ${res.text.slice(0, 200)}`);

/** A key that only publishes a public JWK (no private key needed: nobody signs with it here). */
async function publicOnly(alg: 'ES384' | 'ES512'): Promise<TestKey> {
  const pair = await generateKeyPair(alg, { extractable: true });
  const { kty, crv, x, y } = await exportJWK(pair.publicKey);
  return { privateKey: pair.privateKey, publicJwk: { kty, crv, x, y } as TestKey['publicJwk'], thumbprint: 'unused', alg: 'ES256' };
}

/** The cache times the tests move the clock past, and budgets no test here runs into unless it sets its own. */
const CACHE_AND_BUDGETS = {
  JWKS_CACHE_TTL_SECONDS: String(TTL_SECONDS),
  JWKS_CACHE_STALE_SECONDS: String(STALE_SECONDS),
  RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: '1000',
  JWKS_FETCHES_PER_MINUTE: '100000',
};

/** A server that trusts `ca` (default: the publisher's) and may fetch from loopback, with these settings over CACHE_AND_BUDGETS. */
function attackServer(storeKind: StoreKind, env: Record<string, string>, ca?: () => string) {
  return testServerForBlock(() => ({ store: storeKind, env: { ...JWKS_TEST_ENV, ...CACHE_AND_BUDGETS, ...env }, jwksFetch: { ca: ca ? ca() : publisher.ca } }));
}

/** The helpers every block uses, bound to its server. */
function helpers(server: TestServer) {
  const c = new Client(server);
  const advance = (seconds: number) => server.clock.advance(seconds * 1000);
  /** A host JWT of a JWKS host: iss is the signing key's thumbprint, the header kid names it in the JWKS. */
  const jwksHostToken = (key: TestKey, kid: string, jwksUrl: string | undefined, claims: Record<string, unknown> = {}, options: JwtOptions = {}) =>
    signJwt(key, { iss: key.thumbprint, aud: c.issuer, ...(jwksUrl === undefined ? {} : { host_jwks_url: jwksUrl }), ...claims }, { typ: 'host+jwt', kid, now: c.now, ...options });
  /** A host JWT claiming `iss` but signed by `signer` (an anonymous caller's forgery). */
  const forgedHostToken = (signer: TestKey, iss: string, kid: string, jwksUrl: string | undefined, claims: Record<string, unknown> = {}) =>
    signJwt(signer, { iss, aud: c.issuer, ...(jwksUrl === undefined ? {} : { host_jwks_url: jwksUrl }), ...claims }, { typ: 'host+jwt', kid, now: c.now });
  const register = (token: string, body: Record<string, unknown> = {}) =>
    http('POST', c.url('/agent/register'), { token, json: { name: 'jwks agent', mode: 'delegated', capabilities: ['echo'], ...body } });
  const status = (token: string, agentId: string = 'agt_nobody') => http('GET', c.url(`/agent/status?agent_id=${encodeURIComponent(agentId)}`), { token });

  /** A JWKS host (kid host-1) with a delegated agent (inline key), approved by the admin: active. */
  async function jwksHostWithAgent(extraKeys: Array<{ kid: string; key: TestKey }> = []) {
    const path = newPath();
    const url = publisher.url(path);
    const hostKey = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, ...extraKeys]);
    const agentKey = await newEd25519();
    const res = await register(await jwksHostToken(hostKey, 'host-1', url, { agent_public_key: agentKey.publicJwk }));
    expect(code(res)).toBe('200');
    const approved = await c.admin('POST', `/admin/agents/${res.json.agent_id}/approve`, { user_id: 'user-1' });
    expect(approved.json.status).toBe('active');
    const hostId = (await server.store.findHostByThumbprint(hostKey.thumbprint))!.id;
    const agent: TestAgent = { id: res.json.agent_id as string, key: agentKey, host: hostKey, registration: res.json };
    return { path, url, hostKey, hostId, agent };
  }

  /** The JWKS host publishes a next key and signs with it: what an attack must not have blocked ('active'). */
  async function rotationAnswer(victim: { path: string; url: string; hostKey: TestKey; agent: TestAgent }): Promise<string> {
    const next = await newEd25519();
    publisher.publish(victim.path, [{ kid: 'host-1', key: victim.hostKey }, { kid: 'host-2', key: next }]);
    const rotated = await status(await jwksHostToken(next, 'host-2', victim.url), victim.agent.id);
    return rotated.json?.status ?? `${code(rotated)}: ${rotated.json?.message}`;
  }

  /** An active agent whose key is at a JWKS URL (kid a), under a linked inline host. */
  async function jwksAgent(kid = 'a') {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    const agentKey = await newEd25519();
    publisher.publish(path, [{ kid, key: agentKey }]);
    const res = await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: kid } }));
    expect(res.json.status).toBe('active');
    const agent: TestAgent = { id: res.json.agent_id as string, key: agentKey, host, registration: res.json };
    return { path, host, agentKey, agent };
  }

  return { c, advance, jwksHostToken, forgedHostToken, register, status, jwksHostWithAgent, jwksAgent, rotationAnswer };
}

forEachStore('JWKS attacks', (storeKind) => {
  const server = attackServer(storeKind, {});
  const { c, advance, jwksHostToken, forgedHostToken, register, status, jwksHostWithAgent, jwksAgent } = helpers(server);

  // --- Taking over or impersonating a host by its JWKS URL ------------------------------------

  it('a host cannot register an agent whose agent_jwks_url is its own JWKS URL spelled another way (query, scheme case, dot segment)', async () => {
    const outcomes: Record<string, string> = {};
    const variants: Record<string, (url: string) => string> = {
      'empty query': (url) => `${url}?`,
      'query': (url) => `${url}?v=1`,
      'upper-case scheme': (url) => url.replace('https://', 'HTTPS://'),
      'dot segment': (url) => url.replace(/\/jwks\.json$/, '/./jwks.json'),
    };
    for (const [name, spell] of Object.entries(variants)) {
      // The host publishes an agent key in its own host JWKS: any key there speaks for the host.
      const agentKey = await newEd25519();
      const { url, hostKey } = await jwksHostWithAgent([{ kid: 'agent', key: agentKey }]);
      const res = await register(await jwksHostToken(hostKey, 'host-1', url, { agent_jwks_url: spell(url), agent_kid: 'agent' }));
      outcomes[name] = code(res);
    }
    expect(outcomes).toEqual({ 'empty query': '400 invalid_request', 'query': '400 invalid_request', 'upper-case scheme': '400 invalid_request', 'dot segment': '400 invalid_request' });
  });

  // The protocol's /host/rotate-key carries no proof that the host holds its new key, so a host can
  // rotate onto a key another host published but has not used yet (docs/stances.md). What it must
  // not gain: the JWKS host's requests, which name its URL, and the JWKS host must keep working.
  it('a host that rotates onto a JWKS host\'s newly published (public) key cannot capture or lock out the JWKS host, whose tokens name its URL', async () => {
    const { path, url, hostKey, hostId, agent } = await jwksHostWithAgent();
    // The victim publishes its next key: its public half is now readable by anyone.
    const next = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, { kid: 'host-2', key: next }]);
    // A malicious inline host "rotates" to the victim's published public key (it holds no private half).
    const attacker = await c.linkedHost(['echo']);
    const attackerHostId = (await server.store.findHostByThumbprint(attacker.thumbprint))!.id;
    await c.hostPost('/host/rotate-key', attacker, { public_key: next.publicJwk });
    // The victim starts signing with its new key, then withdraws the old one.
    const withNext = await status(await jwksHostToken(next, 'host-2', url), agent.id);
    publisher.publish(path, [{ kid: 'host-2', key: next }]);
    advance(REFRESH_SECONDS);
    const afterWithdrawal = await status(await jwksHostToken(next, 'host-2', url), agent.id);
    // A registration signed with the new key lands under the victim, never under the attacker's host.
    const registered = await register(await jwksHostToken(next, 'host-2', url, { agent_public_key: (await newEd25519()).publicJwk }));
    const landedUnder = (await server.store.getAgent(registered.json.agent_id))?.agent.hostId;
    expect({
      withNext: withNext.json?.status ?? `${code(withNext)}: ${withNext.json?.message}`,
      afterWithdrawal: afterWithdrawal.json?.status ?? `${code(afterWithdrawal)}: ${afterWithdrawal.json?.message}`,
      landedUnder: landedUnder === hostId ? 'the victim host' : landedUnder === attackerHostId ? "the attacker's host" : `${code(registered)}`,
    }).toEqual({ withNext: 'active', afterWithdrawal: 'active', landedUnder: 'the victim host' });
    // The victim's stored key stays the old one (the new thumbprint is held): its URL names it.
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
  });

  it('alternating tokens of two published keys never rewrite a JWKS host\'s stored key back and forth', async () => {
    const { path, url, hostKey, hostId, agent } = await jwksHostWithAgent();
    const next = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, { kid: 'host-2', key: next }]);
    const before = await server.store.getHost(hostId);
    for (let i = 0; i < 6; i++) {
      const token = i % 2 === 0 ? await jwksHostToken(next, 'host-2', url) : await jwksHostToken(hostKey, 'host-1', url);
      expect((await status(token, agent.id)).json.status).toBe('active');
      advance(TTL_SECONDS / 2);
    }
    const after = await server.store.getHost(hostId);
    expect(after?.thumbprint).toBe(hostKey.thumbprint);
    expect(after?.updatedAtMs).toBe(before?.updatedAtMs);
  });

  it('a token signed by a key the JWKS does not publish cannot move a JWKS host\'s stored key (no possession, no move)', async () => {
    const { path, url, hostKey, hostId, agent } = await jwksHostWithAgent();
    const next = await newEd25519();
    publisher.publish(path, [{ kid: 'host-2', key: next }]);
    advance(REFRESH_SECONDS);
    const attacker = await newEd25519();
    // iss = the newly published key's thumbprint, but signed by the attacker's key.
    const forgedIss = await forgedHostToken(attacker, next.thumbprint, 'host-2', url);
    // iss = the attacker's own thumbprint, naming the published kid.
    const ownIss = await jwksHostToken(attacker, 'host-2', url);
    // The attacker publishes its key on a server it controls and names the victim's URL anyway.
    const answers = [code(await status(forgedIss, agent.id)), code(await status(ownIss, agent.id))];
    expect(answers).toEqual(['401 invalid_jwt', '401 invalid_jwt']);
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
  });

  it('a replayed JWKS rotation token is refused and moves nothing', async () => {
    const { path, url, hostKey, hostId, agent } = await jwksHostWithAgent();
    const next = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, { kid: 'host-2', key: next }]);
    // Used while both keys are published: accepted, no move.
    const token = await jwksHostToken(next, 'host-2', url);
    expect((await status(token, agent.id)).json.status).toBe('active');
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
    // The old key is withdrawn; the same token replayed within its lifetime must not be the one that moves the key.
    publisher.publish(path, [{ kid: 'host-2', key: next }]);
    advance(STALE_SECONDS);
    expect(code(await status(token, agent.id))).toBe('401 invalid_jwt');
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
  });

  it('a revoked JWKS host\'s record is never rewritten: a newly published key signing /host/revoke does not move its stored key (nor free the old key for a new host)', async () => {
    const { path, url, hostKey, hostId } = await jwksHostWithAgent();
    expect(code(await http('POST', c.url('/host/revoke'), { token: await jwksHostToken(hostKey, 'host-1', url) }))).toBe('200');
    const next = await newEd25519();
    publisher.publish(path, [{ kid: 'host-2', key: next }]);
    advance(REFRESH_SECONDS);
    // A revoked host may repeat its revocation: with a key published since, that repeat is the rotation path.
    const again = await http('POST', c.url('/host/revoke'), { token: await jwksHostToken(next, 'host-2', url) });
    const after = await server.store.getHost(hostId);
    // The revoked host's old key must stay bound to the revoked host: not free to register anew.
    const reuse = await register(await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_public_key: hostKey.publicJwk, agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', now: c.now }), { mode: 'autonomous' });
    expect({
      repeat: code(again),
      status: after?.status,
      storedThumbprint: after?.thumbprint === hostKey.thumbprint ? 'the key it was revoked with' : 'moved after revocation',
      oldKeyRegistersANewHost: reuse.status === 200 ? `yes (${reuse.json.status})` : 'no',
    }).toEqual({ repeat: expect.stringMatching(/^(200|4)/), status: 'revoked', storedThumbprint: 'the key it was revoked with', oldKeyRegistersANewHost: 'no' });
  });

  it('naming another host\'s JWKS URL as agent_jwks_url gives the attacker nothing: it holds no key there, and the victim is untouched', async () => {
    const victim = await jwksHostWithAgent();
    const attacker = await c.linkedHost(['echo']);
    const res = await register(await c.hostToken(attacker, { claims: { agent_jwks_url: victim.url, agent_kid: 'host-1' } }));
    // Whatever the registration answered, no one without the victim's private key signs as that agent,
    if (res.status === 200) {
      const forged = { id: res.json.agent_id as string, key: attacker, host: attacker, registration: res.json };
      expect(code(await c.execute(forged, 'echo', {}))).toBe('401 invalid_jwt');
    } else {
      expect(clientError(res)).toBe('4xx with error body');
    }
    // and the victim host (whose key the agent record now copies) keeps working, identified as itself.
    expect((await status(await jwksHostToken(victim.hostKey, 'host-1', victim.url), victim.agent.id)).json.status).toBe('active');
    expect((await server.store.findHostByThumbprint(victim.hostKey.thumbprint))?.id).toBe(victim.hostId);
    expect(code(await c.execute(victim.agent, 'echo', {}))).toBe('200');
  });

  it('an unknown host naming a JWKS URL on an endpoint that never accepts unknown hosts (status, revoke) makes agentgate fetch nothing', async () => {
    const path = newPath();
    const key = await newEd25519();
    publisher.publish(path, [{ kid: 'k', key }]);
    const answers = [
      code(await status(await jwksHostToken(key, 'k', publisher.url(path)))),
      code(await http('POST', c.url('/host/revoke'), { token: await jwksHostToken(key, 'k', publisher.url(path)) })),
    ];
    expect(answers.every((a) => a.startsWith('4'))).toBe(true);
    expect(publisher.fetches(path)).toBe(0);
  });

  // --- Kids ------------------------------------------------------------------------------------

  it('kids like __proto__, constructor and a 256-character unicode kid are plain names: exactly the key under them, nothing inherited', async () => {
    const longKid = 'é'.repeat(256);
    for (const [hostKid, agentKid] of [['__proto__', 'constructor'], ['toString', longKid], [longKid, '__proto__']] as const) {
      const path = newPath();
      const url = publisher.url(path);
      const hostKey = await newEd25519();
      publisher.publish(path, [{ kid: hostKid, key: hostKey }]);
      const agentPath = newPath();
      const agentKey = await newEd25519();
      publisher.publish(agentPath, [{ kid: agentKid, key: agentKey }]);
      const res = await register(await jwksHostToken(hostKey, hostKid, url, { agent_jwks_url: publisher.url(agentPath), agent_kid: agentKid }));
      expect(code(res)).toBe('200');
      expect((await c.admin('POST', `/admin/agents/${res.json.agent_id}/approve`, { user_id: 'user-1' })).json.status).toBe('active');
      const stored = await server.store.findHostByThumbprint(hostKey.thumbprint);
      expect(stored?.publicJwk.kid).toBe(hostKid);
      expect((await server.store.getAgent(res.json.agent_id))?.agent.publicJwk.kid).toBe(agentKid);
      const agent = { id: res.json.agent_id as string, key: agentKey, host: hostKey, registration: res.json };
      expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
      expect((await status(await jwksHostToken(hostKey, hostKid, url), agent.id)).json.status).toBe('active');
      // A name only an object's prototype would know is a kid the JWKS lacks.
      for (const inherited of ['hasOwnProperty', 'valueOf', '__defineGetter__']) {
        expect(code(await status(await jwksHostToken(hostKey, inherited, url), agent.id))).toBe('401 invalid_jwt');
      }
    }
  });

  it('a header kid or agent_kid that is not a 1..256 character string is a 4xx with the error body, never a 500', async () => {
    const { url, hostKey, agent } = await jwksHostWithAgent();
    const outcomes: string[] = [];
    for (const kid of [123, '', 'x'.repeat(257), { a: 1 }, ['host-1'], null, true]) {
      const token = await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_jwks_url: url }, { typ: 'host+jwt', now: c.now, kid: kid as string });
      outcomes.push(clientError(await status(token, agent.id)));
    }
    const host = await c.linkedHost(['echo']);
    for (const kid of [123, '', 'x'.repeat(257), { a: 1 }, null, true]) {
      outcomes.push(clientError(await register(await c.hostToken(host, { claims: { agent_jwks_url: url, agent_kid: kid } }))));
    }
    expect(new Set(outcomes)).toEqual(new Set(['4xx with error body']));
  });

  // --- What a JWKS publishes -------------------------------------------------------------------

  it('a JWKS that repeats a kid (two keys, or the same key twice) never lets the publisher choose: refused at registration, and fails closed later', async () => {
    const host = await c.linkedHost(['echo']);
    const a = await newEd25519();
    const b = await newEd25519();
    const dup = (keys: TestKey[]) => JSON.stringify({ keys: keys.map((k) => ({ ...k.publicJwk, kid: 'a' })) });
    const path = newPath();
    publisher.answer(path, 200, dup([a, b]));
    expect(code(await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'a' } })))).toBe('400 invalid_request');
    const same = newPath();
    publisher.answer(same, 200, dup([a, a]));
    expect(code(await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(same), agent_kid: 'a' } })))).toBe('400 invalid_request');
    // A registered agent whose JWKS starts repeating its kid (its key first, then another) is refused, not served either key.
    const { path: live, agent, agentKey } = await jwksAgent('a');
    publisher.answer(live, 200, dup([agentKey, b]));
    advance(REFRESH_SECONDS);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('401 invalid_jwt');
    expect(code(await c.execute({ ...agent, key: b }, 'echo', {}))).toBe('401 invalid_jwt');
  });

  it('RSA, P-256 (not configured), P-384, oct and private keys from a JWKS are never accepted, for hosts or agents, and never a 500', async () => {
    const outcomes: Record<string, string> = {};
    const candidates: Record<string, () => Promise<string>> = {
      rsa: async () => JSON.stringify({ keys: [{ ...(await newRsa()).publicJwk, kid: 'k' }] }),
      p256: async () => JSON.stringify({ keys: [{ ...(await newP256()).publicJwk, kid: 'k' }] }),
      p384: async () => JSON.stringify({ keys: [{ ...(await publicOnly('ES384')).publicJwk, kid: 'k' }] }),
      oct: async () => JSON.stringify({ keys: [{ kty: 'oct', k: randomBytes(32).toString('base64url'), kid: 'k' }] }),
      okpWithPrivate: async () => {
        const pair = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
        return JSON.stringify({ keys: [{ ...(await exportJWK(pair.privateKey)), kid: 'k' }] });
      },
      x25519: async () => {
        const pair = await generateKeyPair('ECDH-ES', { crv: 'X25519', extractable: true });
        return JSON.stringify({ keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k' }] });
      },
    };
    const host = await c.linkedHost(['echo']);
    for (const [name, body] of Object.entries(candidates)) {
      const path = newPath();
      publisher.answer(path, 200, await body());
      const agentRes = await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'k' } }));
      const hostKey = await newEd25519();
      // An unknown host claims iss = its own key but names a kid whose key is of another type.
      const hostRes = await register(await jwksHostToken(hostKey, 'k', publisher.url(path), { agent_public_key: (await newEd25519()).publicJwk }));
      outcomes[name] = `${agentRes.status === 200 ? 'agent ACCEPTED' : clientError(agentRes)} / ${hostRes.status === 200 ? 'host ACCEPTED' : clientError(hostRes)}`;
    }
    const refused = '4xx with error body / 4xx with error body';
    expect(outcomes).toEqual({ rsa: refused, p256: refused, p384: refused, oct: refused, okpWithPrivate: refused, x25519: refused });
  });

  it('the same Ed25519 key spelled non-canonically in a JWKS is not a second identity (a second thumbprint) for a host', async () => {
    const { path, hostKey, hostId } = await jwksHostWithAgent();
    const x = hostKey.publicJwk.x as string;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const altX = x.slice(0, -1) + alphabet[alphabet.indexOf(x.at(-1)!) ^ 1];
    const { calculateJwkThumbprint } = await import('jose');
    const altJwk = { kty: 'OKP', crv: 'Ed25519', x: altX };
    const altThumbprint = await calculateJwkThumbprint(altJwk, 'sha256');
    expect(altThumbprint).not.toBe(hostKey.thumbprint);
    publisher.answer(path, 200, JSON.stringify({ keys: [{ ...hostKey.publicJwk, kid: 'host-1' }, { ...altJwk, kid: 'alt' }] }));
    advance(REFRESH_SECONDS);
    // Signed by the host's real key (the bytes are the same), naming the alternative spelling.
    const token = await signJwt(hostKey, { iss: altThumbprint, aud: c.issuer, host_jwks_url: publisher.url(path), agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', kid: 'alt', now: c.now });
    const res = await register(token);
    expect(clientError(res)).toBe('4xx with error body');
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
    expect(await server.store.findHostByThumbprint(altThumbprint)).toBeNull();
  });

  it('a key swapped under an agent\'s kid (another Ed25519 key, an RSA key, the host\'s key) is never accepted, and the agent works again only with its own key back', async () => {
    const { path, agent, agentKey, host } = await jwksAgent('a');
    for (const replacement of [await newEd25519(), await newRsa(), host]) {
      publisher.publish(path, [{ kid: 'a', key: replacement }]);
      advance(REFRESH_SECONDS);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('401 invalid_jwt');
      if (replacement.alg === 'EdDSA') expect(code(await c.execute({ ...agent, key: replacement }, 'echo', {}))).toBe('401 invalid_jwt');
    }
    publisher.publish(path, [{ kid: 'a', key: agentKey }]);
    advance(REFRESH_SECONDS);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
  });

  it('a revoked JWKS agent\'s execute makes agentgate fetch nothing (refused before any key is looked up)', async () => {
    const { path, agent } = await jwksAgent('a');
    expect(code(await c.admin('POST', `/admin/agents/${agent.id}/revoke`))).toBe('200');
    advance(REFRESH_SECONDS);
    const before = publisher.fetches(path);
    for (let i = 0; i < 3; i++) {
      expect(clientError(await c.execute(agent, 'echo', {}))).toBe('4xx with error body');
      advance(REFRESH_SECONDS);
    }
    expect(publisher.fetches(path)).toBe(before);
  });

  // --- Inline hosts: no regression -------------------------------------------------------------

  it('an inline host\'s JWT carrying odd host_jwks_url values (non-string, huge, javascript:, file:, fragment, credentials) is a 4xx, never a 500, and fetches nothing', async () => {
    const agent = await c.activeAgent(['echo']);
    const unknown = await newEd25519();
    const values: unknown[] = [123, null, {}, [], true, '', 'javascript:alert(1)', 'file:///etc/passwd', 'x'.repeat(5000), `https://${'a'.repeat(2100)}.example/keys`,
      'https://127.0.0.1/#frag', 'https://user:pw@127.0.0.1/keys', 'http://127.0.0.1/keys', 'https://', 'https://[::1', '\u0000https://x/'];
    const outcomes = new Set<string>();
    for (const value of values) {
      // Known inline host: with and without its inline key beside it. A null claim is an absent one
      // (some clients write every optional field), so it changes nothing for an inline host.
      const inlineOutcome = async (claims: Record<string, unknown>) => {
        const res = await status(await signJwt(agent.host, { iss: agent.host.thumbprint, aud: c.issuer, ...claims }, { typ: 'host+jwt', now: c.now }), agent.id);
        return value === null ? (res.json?.status === 'active' ? '4xx with error body' : `null claim: ${res.status}`) : clientError(res);
      };
      outcomes.add(await inlineOutcome({ host_jwks_url: value, host_public_key: agent.host.publicJwk }));
      outcomes.add(await inlineOutcome({ host_jwks_url: value }));
      // Unknown host registering.
      outcomes.add(clientError(await register(await signJwt(unknown, { iss: unknown.thumbprint, aud: c.issuer, host_jwks_url: value, agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', kid: 'k', now: c.now }))));
      // The same values as agent_jwks_url.
      outcomes.add(clientError(await register(await c.hostToken(agent.host, { claims: { agent_jwks_url: value, agent_kid: 'a' } }))));
    }
    expect(outcomes).toEqual(new Set(['4xx with error body']));
    // And the plain inline host still works.
    expect((await c.status(agent.host, agent.id)).json.status).toBe('active');
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
  });

  // --- Concurrency -----------------------------------------------------------------------------

  it('two racing registrations of one JWKS URL with different keys make one host, never two, and neither is a 500', async () => {
    for (let round = 0; round < 5; round++) {
      const path = newPath();
      const url = publisher.url(path);
      const k1 = await newEd25519();
      const k2 = await newEd25519();
      publisher.publish(path, [{ kid: 'k1', key: k1 }, { kid: 'k2', key: k2 }]);
      const [r1, r2] = await Promise.all([
        register(await jwksHostToken(k1, 'k1', url, { agent_public_key: (await newEd25519()).publicJwk })),
        register(await jwksHostToken(k2, 'k2', url, { agent_public_key: (await newEd25519()).publicJwk })),
      ]);
      expect([r1.status, r2.status].every((s) => s < 500)).toBe(true);
      const owner = await server.store.findHostByJwksUrl(url);
      expect(owner).not.toBeNull();
      const byK1 = await server.store.findHostByThumbprint(k1.thumbprint);
      const byK2 = await server.store.findHostByThumbprint(k2.thumbprint);
      expect([byK1, byK2].filter((h) => h !== null).map((h) => h!.id)).toEqual([owner!.id]);
      // Every agent either registration made sits under that one host.
      for (const res of [r1, r2]) {
        if (res.status === 200) expect((await server.store.getAgent(res.json.agent_id))?.agent.hostId).toBe(owner!.id);
      }
    }
  });

  it('a JWKS rotation racing a revocation leaves the host revoked, its agents revoked, and the new key refused', async () => {
    for (let round = 0; round < 5; round++) {
      const { path, url, hostId, agent } = await jwksHostWithAgent();
      const next = await newEd25519();
      publisher.publish(path, [{ kid: 'host-2', key: next }]);
      advance(REFRESH_SECONDS);
      const [revoke, rotate] = await Promise.all([
        c.admin('POST', `/admin/hosts/${hostId}/revoke`),
        status(await jwksHostToken(next, 'host-2', url), agent.id),
      ]);
      expect(code(revoke)).toBe('200');
      expect(rotate.status).toBeLessThan(500);
      expect((await server.store.getHost(hostId))?.status).toBe('revoked');
      expect((await server.store.getAgent(agent.id))?.agent.status).toBe('revoked');
      expect(code(await status(await jwksHostToken(next, 'host-2', url), agent.id))).toMatch(/^4/);
      expect(code(await c.execute({ ...agent, host: next }, 'echo', {}))).toMatch(/^4/);
    }
  });
});

// --- Fetch budgets ---------------------------------------------------------------------------

forEachStore('JWKS attacks on a host\'s own fetch budget', (storeKind) => {
  const server = attackServer(storeKind, { RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: '3', JWKS_FETCHES_PER_MINUTE: '100000' });
  const { advance, forgedHostToken, status, jwksHostWithAgent, rotationAnswer } = helpers(server);

  it('an anonymous caller who knows a JWKS host\'s thumbprint cannot spend that host\'s fetch budget (forged tokens naming missing kids) and block its rotation', async () => {
    const { path, url, hostKey, agent } = await jwksHostWithAgent();
    const attacker = await newEd25519();
    const forged: string[] = [];
    for (let i = 0; i < 4; i++) forged.push(code(await status(await forgedHostToken(attacker, hostKey.thumbprint, `nope-${i}`, url), agent.id)));
    expect(forged.every((a) => a.startsWith('4'))).toBe(true);
    // Past the kid-miss interval, the victim publishes and signs with its next key.
    advance(31);
    expect(await rotationAnswer({ path, url, hostKey, agent })).toBe('active');
  });

  it('an anonymous caller who knows a JWKS host\'s URL cannot spend that host\'s fetch budget (forged tokens with made-up iss) and block its rotation', async () => {
    const { path, url, hostKey, agent } = await jwksHostWithAgent();
    const attacker = await newEd25519();
    for (let i = 0; i < 4; i++) expect(code(await status(await forgedHostToken(attacker, randomThumbprint(), `nope-${i}`, url), agent.id))).toMatch(/^4/);
    advance(31);
    expect(await rotationAnswer({ path, url, hostKey, agent })).toBe('active');
  });
});

forEachStore('JWKS attacks on the global fetch budget', (storeKind) => {
  const server = attackServer(storeKind, { RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: '1000', JWKS_FETCHES_PER_MINUTE: '5' });
  const { jwksHostToken, status, jwksHostWithAgent, rotationAnswer } = helpers(server);

  it('an anonymous caller naming fresh iss values and JWKS URLs cannot spend the global fetch budget a JWKS host\'s rotation needs', async () => {
    const { path, url, hostKey, agent } = await jwksHostWithAgent();
    // No key anyone registered, no budget of its own: a fresh key (so a fresh iss) and a fresh URL per request.
    for (let i = 0; i < 8; i++) {
      const throwaway = await newEd25519();
      expect(code(await status(await jwksHostToken(throwaway, 'k', `https://10.255.${i}.1/jwks.json`)))).toMatch(/^4/);
    }
    expect(await rotationAnswer({ path, url, hostKey, agent })).toBe('active');
  });
});

forEachStore('JWKS attacks on the cache\'s size', (storeKind) => {
  const server = attackServer(storeKind, { RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: '1000', JWKS_FETCHES_PER_MINUTE: '100000' });
  const { c, status, jwksAgent } = helpers(server);

  it('an anonymous caller cannot evict a JWKS agent\'s fresh key set from the cache and make its execute wait on a fetch', { timeout: 120_000 }, async () => {
    const { path, agent } = await jwksAgent('a');
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    const fetched = publisher.fetches(path);
    // 1000 distinct URLs (the cache's size), each on a private address: refused at once, yet each starts a fetch.
    const throwaway = await newEd25519();
    for (let start = 0; start < 1000; start += 50) {
      await Promise.all(Array.from({ length: 50 }, async (_, j) => {
        const i = start + j;
        const res = await status(await signJwt(throwaway, { iss: randomThumbprint(), aud: c.issuer, host_jwks_url: `https://10.${i >> 8}.${i & 255}.7/jwks.json` }, { typ: 'host+jwt', kid: 'k', now: c.now }));
        expect(res.status).toBeLessThan(500);
      }));
    }
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    expect(publisher.fetches(path)).toBe(fetched);
  });
});

// --- A JWKS server that is slow or hangs ------------------------------------------------------

/** A hostile HTTPS publisher: per path, keys, or an answer that never comes (after the headers, or before). */
interface HostilePublisher {
  ca: string;
  url(path: string): string;
  /** A URL whose TCP connection is accepted and then never spoken to (no TLS handshake). */
  silentUrl(path: string): string;
  publish(path: string, keys: Array<{ kid: string; key: TestKey }>): void;
  hang(path: string, mode: 'no-headers' | 'drip'): void;
  requests(path: string): number;
  close(): Promise<void>;
}

async function startHostilePublisher(): Promise<HostilePublisher> {
  const dir = mkdtempSync(join(tmpdir(), 'agentgate-hostile-jwks-'));
  makeTestCertificates(dir, { commonName: '127.0.0.1', altNames: ['IP:127.0.0.1'] });
  const documents = new Map<string, { keys: Array<{ kid: string; key: TestKey }> } | { hang: 'no-headers' | 'drip' }>();
  const counts = new Map<string, number>();
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const https: HttpsServer = createHttpsServer({ key: readFileSync(join(dir, 'server.key')), cert: readFileSync(join(dir, 'server.crt')) }, (req, res) => {
    const path = new URL(req.url ?? '/', 'https://127.0.0.1').pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const doc = documents.get(path);
    if (!doc) return void res.writeHead(404).end();
    if ('keys' in doc) {
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: doc.keys.map(({ kid, key }) => ({ ...key.publicJwk, kid })) }));
    }
    if (doc.hang === 'no-headers') return; // never answers
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"keys":[');
    const timer = setInterval(() => res.write(' '), 50);
    timers.add(timer);
    res.on('close', () => { clearInterval(timer); timers.delete(timer); });
  });
  https.on('connection', (s: Socket) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  const silent: TcpServer = createTcpServer((s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise<void>((resolve) => https.listen(0, '127.0.0.1', resolve));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (https.address() as AddressInfo).port;
  const silentPort = (silent.address() as AddressInfo).port;
  return {
    ca: readFileSync(join(dir, 'ca.crt'), 'utf8'),
    url: (path) => `https://127.0.0.1:${port}${path}`,
    silentUrl: (path) => `https://127.0.0.1:${silentPort}${path}`,
    publish: (path, keys) => void documents.set(path, { keys }),
    hang: (path, mode) => void documents.set(path, { hang: mode }),
    requests: (path) => counts.get(path) ?? 0,
    async close() {
      for (const t of timers) clearInterval(t);
      for (const s of sockets) s.destroy();
      await Promise.all([new Promise<void>((r) => https.close(() => r())), new Promise<void>((r) => silent.close(() => r()))]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe('JWKS attacks by a slow or hanging publisher', () => {
  let hostile: HostilePublisher;
  beforeAll(async () => {
    hostile = await startHostilePublisher();
  });
  afterAll(() => hostile.close());

  forEachStore('hanging JWKS', (storeKind) => {
    const server = attackServer(storeKind, { JWKS_FETCH_TIMEOUT_MS: '500' }, () => hostile.ca);
    const c = new Client(server);
    const advance = (seconds: number) => server.clock.advance(seconds * 1000);
    const register = (token: string) => http('POST', c.url('/agent/register'), { token, json: { name: 'a', mode: 'delegated', capabilities: ['echo'] } });
    const unknownHostToken = async (url: string) => {
      const key = await newEd25519();
      return signJwt(key, { iss: key.thumbprint, aud: c.issuer, host_jwks_url: url, agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', kid: 'k', now: c.now });
    };

    it('a JWKS URL that never completes TLS, never sends headers, or drips its body forever fails closed with a 4xx once the fetch timeout passes, never a hang or 500', async () => {
      const noHeaders = `/${randomUUID()}`;
      const drip = `/${randomUUID()}`;
      hostile.hang(noHeaders, 'no-headers');
      hostile.hang(drip, 'drip');
      const answers = await Promise.all([hostile.silentUrl(`/${randomUUID()}`), hostile.url(noHeaders), hostile.url(drip)].map(async (url) => code(await register(await unknownHostToken(url)))));
      expect(answers).toEqual(['401 invalid_jwt', '401 invalid_jwt', '401 invalid_jwt']);
      const host = await c.linkedHost(['echo']);
      const agentAnswer = await register(await c.hostToken(host, { claims: { agent_jwks_url: hostile.url(drip), agent_kid: 'a' } }));
      expect(code(agentAnswer)).toBe('400 invalid_request');
    });

    it('an agent whose JWKS starts hanging is answered from its usable cached set at once, then refused (4xx) past the stale window, concurrent calls sharing one fetch', async () => {
      const host = await c.linkedHost(['echo']);
      const path = `/${randomUUID()}`;
      const agentKey = await newEd25519();
      hostile.publish(path, [{ kid: 'a', key: agentKey }]);
      const res = await register(await c.hostToken(host, { claims: { agent_jwks_url: hostile.url(path), agent_kid: 'a' } }));
      expect(res.json.status).toBe('active');
      const agent = { id: res.json.agent_id as string, key: agentKey, host, registration: res.json };
      hostile.hang(path, 'no-headers');
      // Within the stale window the refresh hangs in the background: execute does not wait for it
      // (a failed refresh it waited for would refuse the call).
      advance(TTL_SECONDS + 1);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
      expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
      // Past the stale window (and the failure backoff), the set is gone: every call is refused, one fetch for all of them.
      await expect.poll(() => hostile.requests(path)).toBe(2);
      advance(STALE_SECONDS + 20);
      const before = hostile.requests(path);
      const answers = await Promise.all(Array.from({ length: 6 }, async () => code(await c.execute(agent, 'echo', {}))));
      expect(answers).toEqual(Array(6).fill('401 invalid_jwt'));
      expect(hostile.requests(path) - before).toBeLessThanOrEqual(1);
    });
  });
});
