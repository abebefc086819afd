// Credential theft from the logs: whoever reads the log (a log pipeline, a shared dashboard, lines
// pasted into a ticket) must find nothing there to replay a request, sign as a host or agent, use
// the admin, metrics or introspection API, or approve an agent with someone else's code. A server
// logging at debug (the most it ever writes) takes real traffic through every credential-carrying
// path; every JWT, private key, bearer token, user code and session the test used is then looked
// for in everything it wrote.
import { exportJWK } from 'jose';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.ts';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { newEd25519, signJwt, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';

const METRICS_TOKEN = 'metrics-token-for-the-log-test-0123';
const INTROSPECTION_TOKEN = 'introspection-token-for-the-log-test';
/** An argument value: the policy's debug line must keep the key and drop the value. */
const ARGUMENT_VALUE = 'argument-value-nobody-should-log-7f3a';

forEachStore('stealing credentials from the logs', (storeKind) => {
  const lines: string[] = [];
  const secrets = new Set<string>();
  const keys: TestKey[] = [];
  let server: TestServer;
  let c: Client;

  const remember = (...values: Array<string | undefined>) => {
    for (const v of values) if (v) secrets.add(v);
  };
  const newKey = async () => {
    const key = await newEd25519();
    keys.push(key);
    return key;
  };
  const rememberAgent = (agent: TestAgent) => keys.push(agent.key, agent.host);
  const rememberUserCode = (userCode: string) => remember(userCode, userCode.replace('-', ''), userCode.toLowerCase(), userCode.replace('-', '').toLowerCase());

  beforeAll(async () => {
    server = await startTestServer({
      store: storeKind,
      logger: createLogger('debug', (line) => lines.push(line)),
      env: { INSECURE_DEV_SIGN_IN: 'true', METRICS_TOKEN, INTROSPECTION_TOKEN },
    });
    c = new Client(server);
    // Every JWT the client signs is remembered.
    const hostToken = c.hostToken.bind(c);
    const agentToken = c.agentToken.bind(c);
    c.hostToken = async (...args) => {
      const token = await hostToken(...args);
      remember(token);
      return token;
    };
    c.agentToken = async (...args) => {
      const token = await agentToken(...args);
      remember(token);
      return token;
    };
    remember(ADMIN_TOKEN, METRICS_TOKEN, INTROSPECTION_TOKEN);
  });
  afterAll(() => server.close());

  it('a server logging at debug, taken through registration, approvals, execute, batch, introspection and revocation, writes none of the credentials it saw', async () => {
    // A host new to the server registers an agent with a self-signed host JWT; it waits for approval.
    const host = await newKey();
    const agentKey = await newKey();
    const { res: registered, agent: registeredAgent } = await c.register(host, { name: 'log-test', mode: 'delegated', capabilities: ['echo', 'weather_lookup', 'flaky_backend'] }, { agentKey });
    expect(registered.json.status).toBe('pending');
    const agent = registeredAgent!;
    rememberAgent(agent);
    const firstCode = registered.json.approval.user_code as string;
    rememberUserCode(firstCode);

    // A person signs in on the approval page, types the code and approves.
    const browser = new PersonBrowser(server.baseUrl);
    const page = await browser.signIn('Alice', `/device?user_code=${firstCode}`);
    expect(page.status, page.text).toBe(200);
    const csrf = browser.csrfOf(page.text);
    remember(browser.cookie.split('=')[1], csrf);
    const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
    const decided = await browser.request('POST', '/device/decision', { csrf, agent_id: agent.id, approval_id: approvalId, verdict: 'approve', capabilities: ['echo', 'weather_lookup', 'flaky_backend'] });
    expect(decided.text).toContain('You approved');
    expect((await c.status(host, agent.id)).json.status).toBe('active');
    // A wrong code typed on the page is refused, and is no more logged than a right one.
    const wrongCode = 'WXYZ-WXYZ';
    rememberUserCode(wrongCode);
    expect((await browser.request('GET', `/device?user_code=${wrongCode}`)).status).toBe(400);

    // Execute and batch execute with agent JWTs; an argument value the policy sees at debug.
    const executed = await c.execute(agent, 'echo', { note: ARGUMENT_VALUE });
    expect(executed.status, executed.text).toBe(200);
    const batch = await c.batchExecute(agent, [
      { id: 'a', capability: 'echo', arguments: { note: ARGUMENT_VALUE } },
      { id: 'b', capability: 'weather_lookup', arguments: { city: 'Oslo' } },
    ]);
    expect(batch.status).toBe(200);
    // A failing backend: a 500 whose error is logged with its stack.
    expect(code(await c.execute(agent, 'flaky_backend', {}))).toBe('500 internal_error');

    // A replayed token and a forged one are refused, and their refusals logged.
    const once = await c.agentToken(agent, { aud: c.executeUrl });
    expect((await c.execute(agent, 'echo', {}, { token: once })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}, { token: once }))).toBe('401 invalid_jwt');
    const forger = await newKey();
    const forged = await signJwt(agent.key, { iss: host.thumbprint, sub: agent.id, aud: c.executeUrl }, { typ: 'agent+jwt', signWith: forger, now: c.now });
    remember(forged);
    expect(code(await c.execute(agent, 'echo', {}, { token: forged }))).toBe('401 invalid_jwt');

    // The agent asks for more; the admin approves it with the code the person was shown.
    const asked = await c.requestCapability(agent, { capabilities: ['legacy_report'] });
    expect(asked.json.status).toBe('pending');
    const secondCode = asked.json.approval.user_code as string;
    rememberUserCode(secondCode);
    const approved = await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'dev|Alice', user_code: secondCode });
    expect(approved.status, approved.text).toBe(200);

    // A resource server introspects the agent's token (the JWT travels in the body).
    const introspected = await c.agentToken(agent);
    const active = await http('POST', c.url('/agent/introspect'), { token: INTROSPECTION_TOKEN, json: { token: introspected } });
    expect(active.json.active).toBe(true);

    // The metrics scrape, then the host revokes its agent; the agent is refused afterwards.
    expect((await http('GET', c.url('/metrics'), { token: METRICS_TOKEN })).status).toBe(200);
    expect((await c.hostPost('/agent/revoke', host, { agent_id: agent.id })).status).toBe(200);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_revoked');

    // An admin-provisioned agent, for the admin API's own paths.
    rememberAgent(await c.activeAgent(['echo']));

    // Every private key used, as its JWK `d` (base64url), in base64 and in hex.
    for (const key of keys) {
      const { d } = await exportJWK(key.privateKey as Parameters<typeof exportJWK>[0]);
      expect(d).toBeTruthy();
      const bytes = Buffer.from(d!, 'base64url');
      remember(d, bytes.toString('base64'), bytes.toString('hex'));
    }
    // A JWT's signature alone would prove nothing, but its payload and signature together are the
    // token: look for each part too (a logger that split the token would leak it in pieces).
    for (const secret of [...secrets]) {
      const parts = secret.split('.');
      if (parts.length === 3) remember(parts[2], `${parts[0]}.${parts[1]}`);
    }

    const output = lines.join('');
    // The capture is real: debug lines and access lines were written while all this ran.
    expect(output).toContain('"msg":"policy input"');
    expect(output).toContain('"msg":"rate limit verdict"');
    expect(output).toContain('"msg":"agent key cache miss"');
    expect(output).toContain('"msg":"capability backend failed"');
    expect(lines.filter((l) => l.includes('"msg":"request"')).length).toBeGreaterThanOrEqual(15);
    expect(output).toContain(`"agentId":"${agent.id}"`);
    // ...and no credential appears in it, whole or in part.
    const leaked = [...secrets].filter((secret) => output.includes(secret));
    expect(leaked, `found in the log: ${leaked.map((s) => `${s.slice(0, 12)}…`).join(', ')}`).toEqual([]);
    expect(secrets.size).toBeGreaterThan(40);
    // The argument's key is logged at debug; its value is not.
    expect(output).toContain('"note":"[string]"');
    expect(output).not.toContain(ARGUMENT_VALUE);
  });
});
