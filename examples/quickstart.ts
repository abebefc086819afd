// A whole client of agentgate in one file, with nothing but `jose` and `fetch`: the walk of
// docs/clients.md. A host (whose key an administrator registered) registers a delegated agent with
// a constrained grant, the agent executes within the constraint and is refused outside it, asks for
// one more capability (a person approves it; here the admin API stands in for them), uses it, and
// is revoked. CI runs this file against a real server (test/integration/examples.test.ts), so it
// cannot drift from the server it documents.
//
// Run it from the checkout, against a server started with the same ADMIN_TOKEN (README, "Quick
// start"): `AGENTGATE_URL=http://127.0.0.1:3000 ADMIN_TOKEN=... npm run example`. The npm script runs
// it on the Node the project pins, which runs TypeScript as it stands; `node examples/quickstart.ts`
// needs a system Node that strips types itself (22.18 or later; README, "Runtime").
import { randomUUID } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';

const BASE_URL = process.env.AGENTGATE_URL ?? 'http://127.0.0.1:3000';
const ADMIN_TOKEN = process.env.ADMIN_TOKEN ?? '';
/** Every call gives up after this long: a client must never hang on a server. */
const TIMEOUT_MS = 10_000;

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

async function call(method: 'GET' | 'POST', url: string, token?: string, body?: unknown): Promise<Answer> {
  const res = await fetch(url, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function expectStatus(step: string, answer: Answer, status: number): Answer {
  if (answer.status !== status) throw new Error(`${step}: expected ${status}, got ${answer.status} ${JSON.stringify(answer.body)}`);
  console.log(`${step}: ${answer.status}${typeof answer.body.error === 'string' ? ` ${answer.body.error}` : ''}`);
  return answer;
}

// 1. Discovery says where everything is and which audience each token names.
const discovery = (await call('GET', `${BASE_URL}/.well-known/agent-configuration`)).body as {
  issuer: string; default_location: string; endpoints: Record<string, string>;
};
const endpoint = (name: string) => `${discovery.issuer}${discovery.endpoints[name]}`;

// 2. Two Ed25519 key pairs: the host's (long-lived, it identifies the host by its RFC 7638
//    thumbprint) and the agent's (one per agent).
const host = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
const agent = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
const hostJwk: JWK = await exportJWK(host.publicKey);
const agentJwk: JWK = await exportJWK(agent.publicKey);
const hostThumbprint = await calculateJwkThumbprint(hostJwk, 'sha256');

/** A host JWT: typ host+jwt, iss = the host key's thumbprint, aud = the issuer, at most 60 s, fresh jti. */
function hostJwt(extraClaims: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT(extraClaims)
    .setProtectedHeader({ alg: 'EdDSA', typ: 'host+jwt' })
    .setIssuer(hostThumbprint).setAudience(discovery.issuer)
    .setIssuedAt().setExpirationTime('60s').setJti(randomUUID())
    .sign(host.privateKey);
}

/** An agent JWT: typ agent+jwt, sub = the agent id, iss = its host's thumbprint, aud = the execute location for executes. */
function agentJwt(agentId: string, audience: string, key: CryptoKey = agent.privateKey): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'EdDSA', typ: 'agent+jwt' })
    .setSubject(agentId).setIssuer(hostThumbprint).setAudience(audience)
    .setIssuedAt().setExpirationTime('60s').setJti(randomUUID())
    .sign(key);
}

// 3. An administrator registers the host, linked to the person it acts for (`agentgate hosts add`).
expectStatus('admin registers the host', await call('POST', `${BASE_URL}/admin/hosts`, ADMIN_TOKEN, {
  public_key: hostJwk, name: 'quickstart host', user_id: 'person:quickstart', default_capabilities: ['weather_lookup'],
}), 201);

// 4. The host registers a delegated agent: the host JWT carries the agent's public key. The grant
//    is constrained: weather only for two cities.
const registered = expectStatus('host registers the agent', await call('POST', endpoint('register'), await hostJwt({ agent_public_key: agentJwk }), {
  name: 'quickstart agent', mode: 'delegated', reason: 'trying agentgate',
  capabilities: [{ name: 'weather_lookup', constraints: { city: { in: ['Paris', 'Oslo'] } } }],
}), 200);
const agentId = registered.body.agent_id as string;
if (registered.body.status !== 'active') throw new Error(`the agent should be active at once: ${JSON.stringify(registered.body)}`);

// 5. Execute within the constraint, then outside it: 403 constraint_violated names the field.
expectStatus('execute within the constraint', await call('POST', discovery.default_location, await agentJwt(agentId, discovery.default_location), {
  capability: 'weather_lookup', arguments: { city: 'Paris' },
}), 200);
const refused = expectStatus('execute outside the constraint', await call('POST', discovery.default_location, await agentJwt(agentId, discovery.default_location), {
  capability: 'weather_lookup', arguments: { city: 'Tokyo' },
}), 403);
console.log(`  violations: ${JSON.stringify(refused.body.violations)}`);

// 6. Ask for another capability (agent JWT, aud = issuer). It waits for a person: the answer
//    carries a device-authorization approval (verification_uri, user_code) to show them.
const asked = expectStatus('agent asks for echo', await call('POST', endpoint('request_capability'), await agentJwt(agentId, discovery.issuer), {
  capabilities: ['echo'], reason: 'to say hello',
}), 200);
const approval = asked.body.approval as { verification_uri_complete: string; user_code: string } | undefined;
if (asked.body.status === 'pending' && approval) {
  console.log(`  a person approves at ${approval.verification_uri_complete}`);
  // Here the admin API stands in for the person (`agentgate agents approve`).
  expectStatus('the request is approved', await call('POST', `${BASE_URL}/admin/agents/${agentId}/approve`, ADMIN_TOKEN, {
    user_id: 'person:quickstart', user_code: approval.user_code,
  }), 200);
}
// The host polls status until the grant is active (a real client waits `interval` seconds between polls).
const status = expectStatus('host polls status', await call('GET', `${endpoint('status')}?agent_id=${agentId}`, await hostJwt()), 200);
console.log(`  grants: ${JSON.stringify((status.body.agent_capability_grants as Array<{ capability: string; status: string }>).map((g) => `${g.capability}:${g.status}`))}`);
expectStatus('execute echo', await call('POST', discovery.default_location, await agentJwt(agentId, discovery.default_location), {
  capability: 'echo', arguments: { message: 'hello' },
}), 200);

// 7. The host revokes the agent; its tokens stop working at once.
expectStatus('host revokes the agent', await call('POST', endpoint('revoke'), await hostJwt(), { agent_id: agentId }), 200);
expectStatus('execute after revocation', await call('POST', discovery.default_location, await agentJwt(agentId, discovery.default_location), {
  capability: 'echo', arguments: {},
}), 403);
console.log('quickstart: done');
