// Keys delivered by a JWKS URL (protocol §5.1, §5.2, §5.5), over HTTP against a real agentgate and a
// real HTTPS publisher on loopback (test/support/jwks-server.ts), with a manual clock: the cache's
// refresh times pass without sleeping, and the publisher's fetch counts show when agentgate fetched
// and when it answered from its cache.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { JWKS_TEST_ENV, startJwksServer, type JwksServer } from '../support/jwks-server.ts';
import { newEd25519, newRsa, signJwt, type JwtOptions, type TestKey } from '../support/keys.ts';
import { forEachStore, testServerForBlock, type StoreKind, type TestServer } from '../support/server.ts';

const TTL_SECONDS = 300;
const STALE_SECONDS = 60;

let publisher: JwksServer;
beforeAll(async () => {
  publisher = await startJwksServer();
});
afterAll(() => publisher.close());

const METRICS_TOKEN = 'jwks-metrics-token-0123456789';

/** A fresh path on the publisher, so no test sees another's cached set. */
const newPath = () => `/${randomUUID()}/jwks.json`;

/** A test server that trusts the publisher's CA and may fetch from loopback, with these fetch budgets. */
function jwksServer(storeKind: StoreKind, fetchesPerHostPerHour: number) {
  return testServerForBlock(() => ({
    store: storeKind,
    env: {
      ...JWKS_TEST_ENV,
      JWKS_CACHE_TTL_SECONDS: String(TTL_SECONDS),
      JWKS_CACHE_STALE_SECONDS: String(STALE_SECONDS),
      RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: String(fetchesPerHostPerHour),
      JWKS_FETCHES_PER_MINUTE: '1000',
      METRICS_TOKEN,
    },
    jwksFetch: { ca: publisher.ca },
  }));
}

/** What every block's tests use, bound to its server. */
function jwksHelpers(server: TestServer) {
  const c = new Client(server);
  const advance = (seconds: number) => server.clock.advance(seconds * 1000);

  /** A host JWT of a JWKS host: iss is the signing key's thumbprint, the header kid names it in the JWKS. */
  const jwksHostToken = (key: TestKey, kid: string, jwksUrl: string, claims: Record<string, unknown> = {}, options: JwtOptions = {}) =>
    signJwt(key, { iss: key.thumbprint, aud: c.issuer, host_jwks_url: jwksUrl, ...claims }, { typ: 'host+jwt', kid, now: c.now, ...options });

  const register = (token: string, body: Record<string, unknown> = {}) =>
    http('POST', c.url('/agent/register'), { token, json: { name: 'jwks agent', mode: 'delegated', capabilities: ['echo'], ...body } });

  /** A JWKS host and a delegated agent of it (inline key), approved by the admin: active. */
  async function jwksHostWithAgent() {
    const path = newPath();
    const hostKey = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }]);
    const agentKey = await newEd25519();
    const res = await register(await jwksHostToken(hostKey, 'host-1', publisher.url(path), { agent_public_key: agentKey.publicJwk }));
    expect(code(res)).toBe('200');
    const approved = await c.admin('POST', `/admin/agents/${res.json.agent_id}/approve`, { user_id: 'user-1' });
    expect(approved.json.status).toBe('active');
    return { path, hostKey, agent: { id: res.json.agent_id as string, key: agentKey, host: hostKey, registration: res.json } };
  }

  /** A linked host's delegated agent whose key is published at a fresh path under kid "a": active. */
  async function jwksAgent(alsoPublished: Array<{ kid: string; key: TestKey }> = []) {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    const agentKey = await newEd25519();
    publisher.publish(path, [{ kid: 'a', key: agentKey }, ...alsoPublished]);
    const res = await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'a' } }));
    expect(res.json.status).toBe('active');
    return { host, path, agentKey, agent: { id: res.json.agent_id as string, key: agentKey, host, registration: res.json } };
  }

  return { c, advance, jwksHostToken, register, jwksHostWithAgent, jwksAgent };
}

forEachStore('keys at a JWKS URL', (storeKind) => {
  const server = jwksServer(storeKind, 1000);
  const { c, advance, jwksHostToken, register, jwksHostWithAgent, jwksAgent } = jwksHelpers(server);

  it('a host that delivers its key by a JWKS URL registers, polls and executes, identified by the thumbprint of the key its kid names', async () => {
    const { path, hostKey, agent } = await jwksHostWithAgent();
    const host = await server.store.findHostByThumbprint(hostKey.thumbprint);
    expect(host?.jwksUrl).toBe(publisher.url(path));
    expect(host?.publicJwk.kid).toBe('host-1');
    const status = await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(hostKey, 'host-1', publisher.url(path)) });
    expect(status.json.status).toBe('active');
    expect(code(await c.execute(agent, 'echo', { text: 'hi' }))).toBe('200');
  });

  it('a JWKS host JWT without a header kid, or whose kid names another key than iss, is refused', async () => {
    const { path, hostKey, agent } = await jwksHostWithAgent();
    const status = (token: string) => http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token });
    const other = await newEd25519();
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, { kid: 'other', key: other }]);
    const noKid = await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_jwks_url: publisher.url(path) }, { typ: 'host+jwt', now: c.now });
    expect(code(await status(noKid))).toBe('401 invalid_jwt');
    // Signed by the host's key but naming the other key's kid: the kid's key must be the one iss names.
    const wrongKid = await jwksHostToken(hostKey, 'other', publisher.url(path));
    expect(code(await status(wrongKid))).toBe('401 invalid_jwt');
  });

  it('an unknown host naming a JWKS URL proves possession: a token signed by a key the URL does not publish registers nothing', async () => {
    const path = newPath();
    const published = await newEd25519();
    const impostor = await newEd25519();
    publisher.publish(path, [{ kid: 'k', key: published }]);
    // iss claims the published key, but the impostor signs.
    const forged = await signJwt(impostor, { iss: published.thumbprint, aud: c.issuer, host_jwks_url: publisher.url(path), agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', kid: 'k', now: c.now });
    expect(code(await register(forged))).toBe('401 invalid_jwt');
    expect(await server.store.findHostByJwksUrl(publisher.url(path))).toBeNull();
  });

  it('an agent whose key is at agent_jwks_url with agent_kid registers with that key and executes; its kid and URL are fixed with it', async () => {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    const agentKey = await newEd25519();
    publisher.publish(path, [{ kid: 'agent-1', key: agentKey }]);
    const token = await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'agent-1' } });
    const res = await register(token);
    expect(res.json.status).toBe('active');
    const stored = await server.store.getAgent(res.json.agent_id);
    expect(stored?.agent.jwksUrl).toBe(publisher.url(path));
    expect(stored?.agent.publicJwk.kid).toBe('agent-1');
    expect(stored?.agent.keyThumbprint).toBe(agentKey.thumbprint);
    const agent = { id: res.json.agent_id as string, key: agentKey, host, registration: res.json };
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    // The same key registered again under the same host is the same agent (the identity is the thumbprint).
    const again = await register(await c.hostToken(host, { agentKey }));
    expect(code(again)).toBe('409 agent_exists');
  });

  it('agent_jwks_url without agent_kid, with a kid the URL lacks, equal to the host URL, or next to agent_public_key is refused with 400', async () => {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    publisher.publish(path, [{ kid: 'agent-1', key: await newEd25519() }]);
    const url = publisher.url(path);
    const refused = async (claims: Record<string, unknown>) => code(await register(await c.hostToken(host, { claims })));
    expect(await refused({ agent_jwks_url: url })).toBe('400 invalid_request');
    expect(await refused({ agent_jwks_url: url, agent_kid: 'nobody' })).toBe('400 invalid_request');
    expect(await refused({ agent_jwks_url: url, agent_kid: 'agent-1', agent_public_key: (await newEd25519()).publicJwk })).toBe('400 invalid_request');
    expect(await refused({ agent_jwks_url: 'http://127.0.0.1/keys', agent_kid: 'agent-1' })).toBe('400 invalid_request');
    expect(await refused({ agent_jwks_url: 'https://user:pw@127.0.0.1/keys', agent_kid: 'agent-1' })).toBe('400 invalid_request');
    // A JWKS host's agent may not use the host's own URL: a key there speaks for the host.
    const jwksHost = await jwksHostWithAgent();
    const sameUrl = await jwksHostToken(jwksHost.hostKey, 'host-1', publisher.url(jwksHost.path), { agent_jwks_url: publisher.url(jwksHost.path), agent_kid: 'host-1' });
    const res = await register(sameUrl);
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(/differ/);
  });

  it('a key a JWKS agent uses is answered from the cache: executes within the TTL fetch nothing', async () => {
    const { path, agent } = await jwksAgent();
    const fetchedAtRegistration = publisher.fetches(path);
    expect(fetchedAtRegistration).toBe(1);
    for (let i = 0; i < 5; i++) {
      advance(TTL_SECONDS / 10);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    }
    expect(publisher.fetches(path)).toBe(fetchedAtRegistration);
  });

  it('a key removed from an agent\'s JWKS stops verifying within the refresh time (TTL plus stale window), and at the first refresh after the TTL', async () => {
    const spare = await newEd25519();
    const { path, agent } = await jwksAgent([{ kid: 'spare', key: spare }]);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    // The owner withdraws the key. Within the TTL the cached set still holds it.
    publisher.publish(path, [{ kid: 'spare', key: spare }]);
    advance(TTL_SECONDS - 1);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    // Past the TTL, within the stale window: served from the stale set at once, and a refresh starts.
    advance(2);
    const before = publisher.fetches(path);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
    // The refresh finds the key gone: from then on the agent is refused.
    await expect.poll(() => publisher.fetches(path)).toBe(before + 1);
    await expect.poll(async () => code(await c.execute(agent, 'echo', {}))).toBe('401 invalid_jwt');
    const refused = await c.execute(agent, 'echo', {});
    expect(refused.json.message).toMatch(/no longer published/);
  });

  it('past the TTL and the stale window, a removed key is refused on the first call, which waits for the refetch', async () => {
    const { path, agent } = await jwksAgent();
    publisher.publish(path, [{ kid: 'b', key: await newEd25519() }]);
    advance(TTL_SECONDS + STALE_SECONDS + 1);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('401 invalid_jwt');
  });

  it('a JWKS that now publishes another key under the agent\'s kid does not make that key the agent\'s', async () => {
    const { path, agent: original } = await jwksAgent();
    const replacement = await newEd25519();
    publisher.publish(path, [{ kid: 'a', key: replacement }]);
    advance(TTL_SECONDS + STALE_SECONDS + 1);
    const swapped = { ...original, key: replacement };
    expect(code(await c.execute(original, 'echo', {}))).toBe('401 invalid_jwt');
    const refused = await c.execute(swapped, 'echo', {});
    expect(code(refused)).toBe('401 invalid_jwt');
  });

  it('a JWKS host rotates by publishing a new key: it signs with it at once, and its stored key moves once the old one is withdrawn', async () => {
    const { path, hostKey, agent } = await jwksHostWithAgent();
    const url = publisher.url(path);
    const hostId = (await server.store.findHostByThumbprint(hostKey.thumbprint))!.id;
    const next = await newEd25519();
    // Publishing the new key: the kid miss refreshes the cache once, and either key may sign.
    publisher.publish(path, [{ kid: 'host-1', key: hostKey }, { kid: 'host-2', key: next }]);
    const withNext = await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(next, 'host-2', url) });
    expect(withNext.json.status).toBe('active');
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(hostKey.thumbprint);
    const withOld = await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(hostKey, 'host-1', url) });
    expect(withOld.json.status).toBe('active');
    // Withdrawing the old key: once the cache has refreshed, the next JWT moves the stored key.
    publisher.publish(path, [{ kid: 'host-2', key: next }]);
    advance(TTL_SECONDS + STALE_SECONDS + 1);
    expect((await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(next, 'host-2', url) })).json.status).toBe('active');
    const moved = await server.store.getHost(hostId);
    expect(moved?.thumbprint).toBe(next.thumbprint);
    expect(moved?.publicJwk.kid).toBe('host-2');
    expect(await server.store.findHostByThumbprint(hostKey.thumbprint)).toBeNull();
    // The agents follow: an agent JWT naming the new host thumbprint as iss is accepted, and the old key is refused.
    expect(code(await c.execute({ ...agent, host: next }, 'echo', {}))).toBe('200');
    expect(code(await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(hostKey, 'host-1', url) }))).toBe('401 invalid_jwt');
    await expect.poll(async () => (await c.admin('GET', `/admin/audit?type=host.key_rotated&host_id=${hostId}`)).json.events)
      .toEqual([expect.objectContaining({ type: 'host.key_rotated', actor: 'host', host_id: hostId, via: 'jwks' })]);
  });

  it('a key withdrawn from a JWKS host stops signing for it within the refresh time', async () => {
    const { path, hostKey, agent } = await jwksHostWithAgent();
    publisher.publish(path, [{ kid: 'host-2', key: await newEd25519() }]);
    const token = () => jwksHostToken(hostKey, 'host-1', publisher.url(path));
    expect((await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await token() })).json.status).toBe('active');
    advance(TTL_SECONDS + STALE_SECONDS + 1);
    expect(code(await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await token() }))).toBe('401 invalid_jwt');
  });

  it('the key delivery mode is fixed at registration: switching inline and JWKS, or to another URL, is refused', async () => {
    const refusal = async (token: string, agentId: string) => {
      const res = await http('GET', c.url(`/agent/status?agent_id=${agentId}`), { token });
      return `${code(res)} ${/fixed at registration|not both/.test(res.json?.message ?? '') ? '(says why)' : res.json?.message}`;
    };
    const inline = await c.activeAgent(['echo']);
    const inlineHost = inline.host;
    const path = newPath();
    publisher.publish(path, [{ kid: 'k', key: inlineHost }]);
    const toJwks = await signJwt(inlineHost, { iss: inlineHost.thumbprint, aud: c.issuer, host_jwks_url: publisher.url(path) }, { typ: 'host+jwt', kid: 'k', now: c.now });
    expect(await refusal(toJwks, inline.id)).toBe('400 invalid_request (says why)');
    expect(publisher.fetches(path)).toBe(0);
    const { path: jwksPath, hostKey, agent } = await jwksHostWithAgent();
    const toInline = await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_public_key: hostKey.publicJwk }, { typ: 'host+jwt', kid: 'host-1', now: c.now });
    expect(await refusal(toInline, agent.id)).toBe('400 invalid_request (says why)');
    const otherPath = newPath();
    publisher.publish(otherPath, [{ kid: 'host-1', key: hostKey }]);
    expect(await refusal(await jwksHostToken(hostKey, 'host-1', publisher.url(otherPath)), agent.id)).toBe('400 invalid_request (says why)');
    const both = await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_public_key: hostKey.publicJwk, host_jwks_url: publisher.url(jwksPath) }, { typ: 'host+jwt', kid: 'host-1', now: c.now });
    expect(await refusal(both, agent.id)).toBe('400 invalid_request (says why)');
    // The same JWTs without the switch are accepted: the refusals above are the switch's.
    expect((await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(hostKey, 'host-1', publisher.url(jwksPath)) })).json.status).toBe('active');
    // A JWKS host rotates by publishing, never through /host/rotate-key.
    const rotate = await http('POST', c.url('/host/rotate-key'), { token: await jwksHostToken(hostKey, 'host-1', publisher.url(jwksPath)), json: { public_key: (await newEd25519()).publicJwk } });
    expect(code(rotate)).toBe('400 invalid_request');
  });

  it('a JWKS agent\'s key cannot be replaced by an inline key through /agent/rotate-key', async () => {
    const { host, agent, agentKey } = await jwksAgent();
    const rotate = await c.hostPost('/agent/rotate-key', host, { agent_id: agent.id, public_key: (await newEd25519()).publicJwk });
    expect(code(rotate)).toBe('400 invalid_request');
    expect((await server.store.getAgent(agent.id))?.agent.keyThumbprint).toBe(agentKey.thumbprint);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('200');
  });

  it('a key type the server does not verify is refused even when a JWKS publishes it', async () => {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    publisher.publish(path, [{ kid: 'rsa', key: await newRsa() }]);
    const res = await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'rsa' } }));
    expect(code(res)).toBe('400 unsupported_algorithm');
  });

  it('a JWKS that cannot be read fails closed with a clear error, and no host is stored', async () => {
    const path = newPath();
    publisher.answer(path, 500, 'oops');
    const hostKey = await newEd25519();
    const res = await register(await jwksHostToken(hostKey, 'k', publisher.url(path), { agent_public_key: (await newEd25519()).publicJwk }));
    expect(code(res)).toBe('401 invalid_jwt');
    expect(res.json.message).toMatch(/JWKS/);
    expect(res.json.message).not.toContain(path);
    expect(await server.store.findHostByThumbprint(hostKey.thumbprint)).toBeNull();
    const symmetric = newPath();
    publisher.answer(symmetric, 200, JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0', kid: 'k' }] }));
    expect(code(await register(await jwksHostToken(hostKey, 'k', publisher.url(symmetric), { agent_public_key: (await newEd25519()).publicJwk })))).toBe('401 invalid_jwt');
  });


  it('an operator sees JWKS fetches by outcome in the metrics: a JWKS that cannot be read is counted as failed', async () => {
    const fetches = async () => {
      const text = (await http('GET', c.url('/metrics'), { token: METRICS_TOKEN })).text;
      const count = (outcome: string) => Number(new RegExp(`^agentgate_jwks_fetches_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
      return { ok: count('ok'), failed: count('failed'), overBudget: count('over_budget') };
    };
    const before = await fetches();
    expect(Object.values(before).every(Number.isInteger)).toBe(true);
    const broken = newPath();
    publisher.answer(broken, 503, 'down');
    const key = await newEd25519();
    expect(code(await register(await jwksHostToken(key, 'k', publisher.url(broken), { agent_public_key: (await newEd25519()).publicJwk })))).toBe('401 invalid_jwt');
    await jwksAgent();
    expect(await fetches()).toEqual({ ok: before.ok + 1, failed: before.failed + 1, overBudget: before.overBudget });
  });
});

// Budgets of 3, so that a test can spend one: a host's own, and an unknown host's address's.
forEachStore('JWKS fetch budgets', (storeKind) => {
  const server = jwksServer(storeKind, 3);
  const { c, jwksHostToken, register, jwksHostWithAgent } = jwksHelpers(server);

  it('a host spraying kids its JWKS lacks causes at most one refetch per interval, whatever its budget', async () => {
    const { path, hostKey, agent } = await jwksHostWithAgent();
    const before = publisher.fetches(path);
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) {
      const token = await jwksHostToken(hostKey, `missing-${i}`, publisher.url(path));
      answers.push(code(await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token })));
    }
    // Its signature verifies with its stored key, so the missing kid is checked against the cached
    // set, whose one refetch per interval bounds what the spray costs.
    expect(answers).toEqual(Array(6).fill('401 invalid_jwt'));
    expect(publisher.fetches(path) - before).toBeLessThanOrEqual(1);
    const ok = await http('GET', c.url(`/agent/status?agent_id=${agent.id}`), { token: await jwksHostToken(hostKey, 'host-1', publisher.url(path)) });
    expect(ok.json.status).toBe('active');
  });

  it('one host cannot make agentgate fetch more JWKS URLs than its hourly budget: the next is refused with 429', async () => {
    const host = await c.linkedHost(['echo']);
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) {
      const path = newPath();
      publisher.publish(path, [{ kid: 'a', key: await newEd25519() }]);
      answers.push(code(await register(await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'a' } }))));
    }
    expect(answers).toEqual(['200', '200', '200', '429 rate_limited']);
  });
});

// Its own server, so that nothing else spent the address's budget of 2 first.
forEachStore('JWKS fetch budgets of an address', (storeKind) => {
  const server = jwksServer(storeKind, 2);
  const { jwksHostToken, register } = jwksHelpers(server);

  it('unknown hosts naming JWKS URLs from one address share that address\'s fetch budget: a fresh key per request buys nothing', async () => {
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) {
      const path = newPath();
      const key = await newEd25519();
      publisher.publish(path, [{ kid: 'k', key }]);
      answers.push(code(await register(await jwksHostToken(key, 'k', publisher.url(path), { agent_public_key: (await newEd25519()).publicJwk }))));
    }
    expect(answers).toEqual(['200', '200', '429 rate_limited', '429 rate_limited']);
  });
});

forEachStore('JWKS fetching without the private-range setting', (storeKind) => {
  const server = testServerForBlock(() => ({ store: storeKind, jwksFetch: { ca: publisher.ca } }));
  const c = new Client(server);

  it('a JWKS URL on a loopback address is refused (SSRF): the host is not registered and nothing is fetched', async () => {
    const path = newPath();
    const hostKey = await newEd25519();
    publisher.publish(path, [{ kid: 'k', key: hostKey }]);
    const token = await signJwt(hostKey, { iss: hostKey.thumbprint, aud: c.issuer, host_jwks_url: publisher.url(path), agent_public_key: (await newEd25519()).publicJwk }, { typ: 'host+jwt', kid: 'k', now: c.now });
    const res = await http('POST', c.url('/agent/register'), { token, json: { name: 'a', mode: 'autonomous', capabilities: ['echo'] } });
    expect(code(res)).toBe('401 invalid_jwt');
    expect(res.json.message).toMatch(/address/);
    expect(publisher.fetches(path)).toBe(0);
  });

  it('an agent_jwks_url on a loopback address is refused with 400, and nothing is fetched', async () => {
    const host = await c.linkedHost(['echo']);
    const path = newPath();
    publisher.publish(path, [{ kid: 'a', key: await newEd25519() }]);
    const res = await http('POST', c.url('/agent/register'), {
      token: await c.hostToken(host, { claims: { agent_jwks_url: publisher.url(path), agent_kid: 'a' } }),
      json: { name: 'a', mode: 'delegated', capabilities: ['echo'] },
    });
    expect(code(res)).toBe('400 invalid_request');
    expect(publisher.fetches(path)).toBe(0);
  });
});
