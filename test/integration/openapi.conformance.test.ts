// Real answers conform to the OpenAPI document: a real server is driven through
// every documented operation, and each answer's body is validated with ajv against the schema the
// document gives for that operation and status (an undocumented status fails too). The schemas are
// closed, so a member the document does not name fails as well. The last test checks that every
// operation's success answer was proven here, so an operation added later is driven here too.
import { readFile } from 'node:fs/promises';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openApiDocument } from '../../src/http/openapi.ts';
import { Client, http, type HttpResult, type TestAgent } from '../support/client.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { storedPasskeyJson } from '../support/consent.ts';
import { SoftwarePasskey } from '../support/software-passkey.ts';
import { ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';
import { SERVICE_POLICY } from '../support/policies.ts';

const METRICS_TOKEN = 'metrics-token-0123456789';

interface Response {
  $ref?: string;
  content?: Record<string, { schema: { $ref?: string } }>;
}
type Document = ReturnType<typeof openApiDocument> & {
  paths: Record<string, Record<string, { responses: Record<string, Response> }>>;
  components: { responses: Record<string, Response> };
};

describe('real answers conform to the OpenAPI document', () => {
  let server: TestServer;
  let c: Client;
  let doc: Document;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  // zod writes these formats; ajv knows none of them without a plugin.
  ajv.addFormat('date-time', (text: string) => !Number.isNaN(Date.parse(text)));
  ajv.addFormat('uri', (text: string) => URL.canParse(text));
  const validators = new Map<string, ValidateFunction>();
  /** `METHOD /path status` of every answer checked. */
  const checked = new Set<string>();

  beforeAll(async () => {
    // On a host name, so that passkeys work (their removal is one of the documented operations).
    server = await startTestServer({ issuerHost: 'localhost', env: { METRICS_TOKEN, INSECURE_DEV_SIGN_IN: 'true' } });
    c = new Client(server);
    doc = openApiDocument(server.config) as Document;
    // The whole document is one schema resource, so `#/components/schemas/...` references resolve in it.
    ajv.addSchema(doc, 'openapi.json');
  });
  afterAll(() => server.close());

  /** Asserts `res` is an answer the document gives `method path`, and returns it for more checks. */
  function conforms(method: string, path: string, res: HttpResult): HttpResult {
    const where = `${method} ${path} ${res.status}`;
    let response = doc.paths[path]?.[method.toLowerCase()]?.responses[String(res.status)];
    expect(response, `${where} is not documented: ${res.text}`).toBeDefined();
    if (response!.$ref) response = doc.components.responses[response!.$ref.split('/').pop()!];
    if (response!.content === undefined) {
      // A documented answer without content (204): there must be none.
      expect(res.text, where).toBe('');
      checked.add(where);
      return res;
    }
    const [mediaType] = Object.keys(response!.content);
    expect(res.headers.get('content-type'), where).toContain(mediaType);
    checked.add(where);
    if (mediaType !== 'application/json') return res;
    const ref = response!.content![mediaType]!.schema.$ref!;
    let validate = validators.get(ref);
    if (!validate) validators.set(ref, (validate = ajv.compile({ $ref: `openapi.json${ref}` })));
    expect(validate(res.json) ? [] : validate.errors, `${where}: ${res.text}`).toEqual([]);
    return res;
  }

  const call = async (method: string, path: string, url: string, options: Parameters<typeof http>[2] = {}) => conforms(method, path, await http(method, c.url(url), options));
  const admin = (method: string, path: string, url: string, json?: unknown) => call(method, path, url, { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });
  const asHost = async (path: string, host: TestKey, json?: unknown) => conforms('POST', path, await c.hostPost(path, host, json));

  /** A person signed in on the pages, calling their API with the session cookie and CSRF token. */
  let person: { browser: PersonBrowser; id: string; csrf: string };
  const mine = (method: 'GET' | 'POST', path: string, url: string, json: unknown = {}) =>
    call(method, path, url, { headers: { cookie: person.browser.cookie, 'x-csrf-token': person.csrf }, ...(method === 'POST' ? { json } : {}) });

  let host: TestKey;
  let hostId: string;
  let agent: TestAgent;

  it('discovery, this document, health, readiness and metrics', async () => {
    await call('GET', '/.well-known/agent-configuration', '/.well-known/agent-configuration');
    await call('GET', '/openapi.json', '/openapi.json');
    await call('GET', '/healthz', '/healthz');
    await call('GET', '/readyz', '/readyz');
    // A store that cannot be reached (its ping refused, for this one request): not ready, and the
    // 503 body says which part.
    const { deps } = server.app;
    const store = deps.store;
    deps.store = new Proxy(store, { get: (target, property) => (property === 'ping' ? () => Promise.reject(new Error('connection refused')) : Reflect.get(target, property)) });
    try {
      expect((await call('GET', '/readyz', '/readyz')).json).toMatchObject({ error: 'service_unavailable', status: 'not_ready', checks: { store: { ok: false } } });
    } finally {
      deps.store = store;
    }
    const metrics = await call('GET', '/metrics', '/metrics', { token: METRICS_TOKEN });
    expect(metrics.status).toBe(200);
    expect(metrics.text).toContain('# HELP');
    await call('GET', '/metrics', '/metrics');
  });

  it('a person signs in; the admin links a host to them; an agent registers active and executes', async () => {
    person = { browser: new PersonBrowser(server.baseUrl), id: '', csrf: '' };
    await person.browser.signIn('conformance');
    const me = await mine('GET', '/people/me', '/people/me');
    person.id = me.json.person_id;
    person.csrf = me.json.csrf_token;

    host = await newEd25519();
    const created = await admin('POST', '/admin/hosts', '/admin/hosts', {
      public_key: host.publicJwk, default_capabilities: ['echo', 'weather_lookup'], user_id: person.id, name: 'laptop',
    });
    expect(created.status).toBe(201);
    hostId = created.json.host_id;
    await admin('GET', '/admin/hosts/{hostId}', `/admin/hosts/${hostId}`);

    const registered = await c.register(host, { mode: 'delegated', capabilities: ['echo', { name: 'weather_lookup', constraints: { city: 'Paris' } }] });
    conforms('POST', '/agent/register', registered.res);
    expect(registered.res.json.status).toBe('active');
    agent = registered.agent!;
    conforms('GET', '/agent/status', await c.status(host, agent.id));

    expect(conforms('POST', '/capability/execute', await c.execute(agent, 'echo', { hello: 'world' })).status).toBe(200);
    const violated = conforms('POST', '/capability/execute', await c.execute(agent, 'weather_lookup', { city: 'Berlin' }));
    expect(violated.json).toMatchObject({ error: 'constraint_violated', violations: [{ field: 'city' }] });
    conforms('POST', '/capability/execute', await c.execute(agent, 'no_such_capability'));
    expect(conforms('POST', '/capability/execute', await http('POST', c.executeUrl, { json: { capability: 'echo' } })).status).toBe(401);

    const batch = conforms('POST', '/capability/batch-execute', await c.batchExecute(agent, [
      { id: 'ok', capability: 'echo', arguments: { n: 1 } },
      { id: 'refused', capability: 'weather_lookup', arguments: { city: 'Rome' } },
    ]));
    expect(batch.json.responses.map((r: { status: string }) => r.status)).toEqual(['completed', 'failed']);

    await call('GET', '/capability/list', '/capability/list');
    await call('GET', '/capability/describe', '/capability/describe?name=echo', { token: await c.agentToken(agent) });
    expect((await call('GET', '/capability/describe', '/capability/describe?name=no_such_capability')).status).toBe(404);
  });

  it("the agent asks for more; the person reads and decides through their API", async () => {
    const asked = conforms('POST', '/agent/request-capability', await c.requestCapability(agent, { capabilities: ['transfer_money'], reason: 'to pay' }));
    expect(asked.json.status).toBe('pending');
    await mine('GET', '/people/me/hosts', '/people/me/hosts');
    // Two passkeys of this person, as the page would have stored them, to list and remove (removing
    // one takes an assertion of one of them: the first call answers the options).
    const [kept, removable] = [new SoftwarePasskey(), new SoftwarePasskey()];
    for (const passkey of [kept, removable]) {
      const registration = passkey.register({ challenge: 'AAAA', rp: { id: 'localhost' } }, server.baseUrl);
      await server.store.addPasskey(person.id, passkey.id, storedPasskeyJson(registration, Date.now()), 20);
    }
    expect((await mine('GET', '/people/me/passkeys', '/people/me/passkeys')).json.passkeys).toHaveLength(2);
    const removePath = `/people/me/passkeys/${removable.id}/remove`;
    const challenged = await call('POST', '/people/me/passkeys/{passkeyId}/remove', removePath, { headers: { cookie: person.browser.cookie, 'x-csrf-token': person.csrf }, json: {} });
    expect(challenged.status).toBe(403);
    await mine('POST', '/people/me/passkeys/{passkeyId}/remove', removePath, { assertion: kept.assert(challenged.json.assertion_options, server.baseUrl) });
    expect((await admin('POST', '/admin/passkeys/remove', '/admin/passkeys/remove', { user_id: person.id })).json).toEqual({ user_id: person.id, passkeys_removed: 1 });
    await mine('GET', '/people/me/agents', '/people/me/agents');
    await mine('GET', '/people/me/inbox', '/people/me/inbox');
    const approvals = await mine('GET', '/people/me/approvals', '/people/me/approvals');
    const approvalId = approvals.json.approvals[0].approval_id as string;
    await mine('POST', '/people/me/approvals/{approvalId}', `/people/me/approvals/${approvalId}`, { verdict: 'deny' });

    const granted = await mine('POST', '/people/me/agents/{agentId}/grants', `/people/me/agents/${agent.id}/grants`, { capability: 'legacy_report' });
    expect(granted.status).toBe(201);
    await mine('POST', '/people/me/agents/{agentId}/grants/{grantId}/revoke', `/people/me/agents/${agent.id}/grants/${granted.json.grant.id}/revoke`);
    // A host the person sets up: with its key (the token binds that key only), and without one; the host binds its key, signing with it.
    const ownKey = await newEd25519();
    const pinned = await mine('POST', '/people/me/hosts', '/people/me/hosts', { name: 'own laptop', default_capabilities: ['echo'], public_key: ownKey.publicJwk });
    expect(pinned.json).toMatchObject({ status: 'pending_enrollment', key_thumbprint: ownKey.thumbprint });
    const enroll = async (token: string, key: TestKey) => call('POST', '/host/enroll', '/host/enroll', { json: { token, public_key: key.publicJwk }, token: await c.hostToken(key) });
    expect((await enroll(pinned.json.enrollment_token, ownKey)).json.status).toBe('active');
    const enrollment = await mine('POST', '/people/me/hosts', '/people/me/hosts', { name: 'build runner' });
    expect(enrollment.json.status).toBe('pending_enrollment');
    const enrolledKey = await newEd25519();
    expect((await enroll(enrollment.json.enrollment_token, enrolledKey)).json.status).toBe('active');
    expect((await enroll(enrollment.json.enrollment_token, enrolledKey)).status).toBe(400);
    expect((await enroll(`agent_enroll_${'A'.repeat(43)}`, enrolledKey)).status).toBe(401);
    expect((await mine('POST', '/people/me/hosts', '/people/me/hosts', { name: 'again', public_key: ownKey.publicJwk })).status).toBe(409);
    // Refusals: no session (401), no CSRF token (403).
    expect((await call('GET', '/people/me/agents', '/people/me/agents')).status).toBe(401);
    expect((await call('POST', '/people/me/agents/{agentId}/revoke', `/people/me/agents/${agent.id}/revoke`, { headers: { cookie: person.browser.cookie }, json: {} })).status).toBe(403);
  });

  it('introspection, revoking a capability, expiry and reactivation, key rotation', async () => {
    const token = await c.agentToken(agent);
    expect((await call('POST', '/agent/introspect', '/agent/introspect', { token: ADMIN_TOKEN, json: { token } })).json.active).toBe(true);
    expect((await call('POST', '/agent/introspect', '/agent/introspect', { token: ADMIN_TOKEN, json: { token: 'not-a-jwt' } })).json).toEqual({ active: false });
    await call('POST', '/agent/revoke-capability', '/agent/revoke-capability', { token: await c.agentToken(agent), json: { capabilities: ['echo'] } });

    const newKey = await newEd25519();
    expect((await asHost('/agent/rotate-key', host, { agent_id: agent.id, public_key: newKey.publicJwk })).status).toBe(200);
    agent = { ...agent, key: newKey };

    await admin('GET', '/admin/agents/{agentId}', `/admin/agents/${agent.id}`);
    expect((await admin('POST', '/admin/agents/{agentId}/expire', `/admin/agents/${agent.id}/expire`)).json.status).toBe('expired');
    // Reactivated, it holds what the policy grants again at once and waits on a person for the rest.
    expect(['active', 'pending']).toContain((await asHost('/agent/reactivate', host, { agent_id: agent.id })).json.status);
  });

  it('an agent that waits for approval: status, a fresh code, the admin list, approve, deny, revoke', async () => {
    // A host nobody linked: a delegated agent of it waits for a person.
    const stranger = await newEd25519();
    const pending = await c.register(stranger, { mode: 'delegated', capabilities: ['echo'] });
    expect(conforms('POST', '/agent/register', pending.res).json).toMatchObject({ status: 'pending', approval: { method: 'device_authorization' } });
    conforms('GET', '/agent/status', await c.status(stranger, pending.agent!.id));
    await asHost('/agent/device/code', stranger, { agent_id: pending.agent!.id });
    const waiting = await admin('GET', '/admin/approvals', '/admin/approvals');
    expect(waiting.json.approvals.length).toBeGreaterThan(0);
    expect((await admin('POST', '/admin/agents/{agentId}/approve', `/admin/agents/${pending.agent!.id}/approve`, { user_id: 'admin:conformance' })).json.status).toBe('active');

    const denied = await c.register(stranger, { mode: 'delegated', name: 'to deny', capabilities: ['weather_lookup'] });
    expect((await admin('POST', '/admin/agents/{agentId}/deny', `/admin/agents/${denied.agent!.id}/deny`, { user_id: 'admin:conformance' })).status).toBe(200);

    const ended = await c.register(stranger, { mode: 'delegated', name: 'to end', capabilities: ['echo'] });
    await admin('POST', '/admin/agents/{agentId}/exceed-absolute-lifetime', `/admin/agents/${ended.agent!.id}/exceed-absolute-lifetime`);
    await admin('POST', '/admin/agents/{agentId}/revoke', `/admin/agents/${ended.agent!.id}/revoke`);
    expect((await asHost('/agent/revoke', stranger, { agent_id: pending.agent!.id })).json).toEqual({ agent_id: pending.agent!.id, status: 'revoked' });

    const rotated = await newEd25519();
    await asHost('/host/rotate-key', stranger, { public_key: rotated.publicJwk });
    expect((await asHost('/host/revoke', rotated)).json.status).toBe('revoked');
  });

  it('the admin API: hosts, policy, operators, the catalog, the audit trail, and its refusals', async () => {
    const other = await newEd25519();
    const created = await admin('POST', '/admin/hosts', '/admin/hosts', { public_key: other.publicJwk, user_id: 'admin:conformance' });
    expect((await admin('POST', '/admin/hosts/{hostId}/unlink', `/admin/hosts/${created.json.host_id}/unlink`)).json).toMatchObject({ status: 'pending', linked: false });
    await admin('POST', '/admin/hosts/{hostId}/revoke', `/admin/hosts/${created.json.host_id}/revoke`);
    await admin('GET', '/admin/policy', '/admin/policy');
    await admin('POST', '/admin/policy/reload', '/admin/policy/reload');
    expect((await admin('POST', '/admin/policy/reload', '/admin/policy/reload', { max_flips: 0 })).json.preview).toMatchObject({ allow_to_deny: 0, deny_to_allow: 0 });
    const candidate = { token: ADMIN_TOKEN, body: await readFile(SERVICE_POLICY.wasmPath), headers: { 'content-type': 'application/wasm' } };
    expect((await call('POST', '/admin/policy/preview', '/admin/policy/preview', candidate)).json.errors.count).toBe(0);
    await call('POST', '/admin/policy/shadow', '/admin/policy/shadow', candidate);
    await admin('GET', '/admin/policy/shadow', '/admin/policy/shadow');
    await admin('DELETE', '/admin/policy/shadow', '/admin/policy/shadow');
    await call('POST', '/admin/policy/shadow', '/admin/policy/shadow', candidate);
    await admin('POST', '/admin/policy/shadow/promote', '/admin/policy/shadow/promote');
    await admin('GET', '/admin/operators', '/admin/operators');
    await admin('POST', '/admin/operators/reload', '/admin/operators/reload');
    expect((await admin('POST', '/admin/capabilities/{name}/remove', '/admin/capabilities/legacy_report/remove')).json).toEqual({ name: 'legacy_report', removed: true });
    await admin('POST', '/admin/capabilities/{name}/restore', '/admin/capabilities/legacy_report/restore');
    const audit = await admin('GET', '/admin/audit', `/admin/audit?agent_id=${agent.id}&limit=100`);
    expect(audit.json.events.length).toBeGreaterThan(0);

    expect((await admin('GET', '/admin/agents/{agentId}', '/admin/agents/agt_nobody')).status).toBe(404);
    expect((await admin('GET', '/admin/audit', '/admin/audit?limit=100000')).status).toBe(400);
    expect((await call('GET', '/admin/policy', '/admin/policy', { token: 'not-the-admin-token' })).status).toBe(403);
    expect((await call('GET', '/admin/policy', '/admin/policy')).status).toBe(401);
  });

  it('the person revokes their agent, unlinks a host and revokes another; refusals of the protocol', async () => {
    await mine('POST', '/people/me/agents/{agentId}/revoke', `/people/me/agents/${agent.id}/revoke`);
    await mine('POST', '/people/me/hosts/{hostId}/unlink', `/people/me/hosts/${hostId}/unlink`);
    const second = await newEd25519();
    const created = await admin('POST', '/admin/hosts', '/admin/hosts', { public_key: second.publicJwk, user_id: person.id });
    expect((await mine('POST', '/people/me/hosts/{hostId}/revoke', `/people/me/hosts/${created.json.host_id}/revoke`)).json.status).toBe('revoked');

    expect((await call('POST', '/agent/register', '/agent/register', { token: await c.hostToken(second), json: { name: '' } })).status).toBe(400);
    expect((await call('GET', '/agent/status', '/agent/status?agent_id=agt_x')).status).toBe(401);
  });

  it('has teeth: a member the document does not name, a missing one or a wrong type is refused', async () => {
    const status = await c.status(host, agent.id);
    const agentView = ajv.getSchema('openapi.json#/components/schemas/AgentView')!;
    expect(agentView(status.json)).toBe(true);
    expect(agentView({ ...status.json, undocumented: 1 })).toBe(false);
    expect(agentView({ ...status.json, agent_id: undefined })).toBe(false);
    expect(agentView({ ...status.json, created_at: 'yesterday' })).toBe(false);
    expect(agentView({ ...status.json, agent_capability_grants: [{ id: 'g', capability: 'echo', status: 'active', denied_by: 'x' }] })).toBe(false);
  });

  it('proved the success answer of every documented operation against the server', () => {
    const operations = Object.entries(doc.paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, op]) => {
      const success = Object.keys(op.responses).find((status) => status.startsWith('2'));
      return `${method.toUpperCase()} ${path} ${success}`;
    }));
    expect(operations.filter((operation) => !checked.has(operation))).toEqual([]);
  });
});
