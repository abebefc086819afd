// CIBA approvals over HTTP (protocol §10 and §11.5): a caller that asks for CIBA and names a
// person (its host's linked person, or a login_hint) gets an approval with no code; the person is
// told by a signed webhook, finds it in their inbox (the people's API and the /inbox pages) and
// decides it there; nobody else sees or decides it; an unknown hint is answered exactly like a
// known one and tells nobody; hourly budgets per person and per host refuse bursts before anything
// is written; the binding message is one line of visible text. A real webhook receiver on
// 127.0.0.1 checks every notice's signature. Dev sign-in stands in for the OpenID Connect provider.
// Every wait is bounded; nothing asserts on time. Both stores.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhookSignature } from '../../src/notify/webhook.ts';
import { expectClearPage } from '../support/approval-pages.ts';
import { Client, code, http, type HttpResult, type TestAgent } from '../support/client.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, testServerForBlock, type TestServer } from '../support/server.ts';

const SECRET = 'ciba-http-test-webhook-secret-0123456789abcdef';
const TOLERANCE_SECONDS = 300;
const EXPIRES_IN_SECONDS = 30; // the least APPROVAL_EXPIRES_IN_SECONDS allows
const INTERVAL_SECONDS = 1;
/** How long a notice or an inbox item may take to appear before a test fails saying so. */
const ARRIVAL_MS = 8000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` until it answers something other than undefined, for at most `ms`; fails naming `what`. */
async function eventually<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, ms = ARRIVAL_MS): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
    await sleep(25);
  }
}

interface Notice {
  headers: IncomingHttpHeaders;
  body: string;
  json: { id: string; type: string; at: string; data: Record<string, any> };
  /** verifyWebhookSignature's verdict on the raw body and headers, taken when it arrived. */
  verified: boolean;
}

/** A webhook receiver on 127.0.0.1 for the enclosing block: every POST is kept, answered 204. */
function webhookReceiverForBlock() {
  const notices: Notice[] = [];
  let server: Server | undefined;
  let url = '';
  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const verified = verifyWebhookSignature(
          SECRET,
          body,
          { timestamp: String(req.headers['x-agentgate-timestamp']), signature: String(req.headers['x-agentgate-signature']) },
          Math.floor(Date.now() / 1000),
          TOLERANCE_SECONDS,
        );
        notices.push({ headers: req.headers, body, json: JSON.parse(body) as Notice['json'], verified });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/approvals`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });
  return {
    notices,
    get url() {
      return url;
    },
    /** The notices about one agent so far. */
    about: (agentId: string) => notices.filter((n) => n.json.data.agent_id === agentId),
    /** The first notice about `agentId`, waited for (bounded). */
    noticeFor: (agentId: string) =>
      eventually(`a webhook notice about ${agentId}`, () => notices.find((n) => n.json.data.agent_id === agentId)),
  };
}

/** The settings that give a server a CIBA channel (the webhook) and dev sign-in. */
const cibaEnv = (webhookUrl: string, extra: Record<string, string> = {}): Record<string, string> => ({
  INSECURE_DEV_SIGN_IN: 'true',
  APPROVAL_WEBHOOK_URL: webhookUrl,
  APPROVAL_WEBHOOK_SECRET: SECRET,
  APPROVAL_EXPIRES_IN_SECONDS: String(EXPIRES_IN_SECONDS),
  APPROVAL_INTERVAL_SECONDS: String(INTERVAL_SECONDS),
  ...extra,
});

let seq = 0;
/** A name no other test (or run, on a shared Redis) uses. */
const uniqueName = (prefix: string) => `${prefix}-${++seq}-${randomUUID().slice(0, 8)}`;

/** A person signed in through the dev form, calling the people's API with their session cookie. */
class Person {
  readonly browser: PersonBrowser;
  readonly name: string;
  readonly server: TestServer;
  personId = '';
  csrf = '';
  constructor(server: TestServer, name: string) {
    this.server = server;
    this.name = name;
    this.browser = new PersonBrowser(server.baseUrl);
  }

  static async signedIn(server: TestServer, prefix: string): Promise<Person> {
    const person = new Person(server, uniqueName(prefix));
    await person.browser.signIn(person.name);
    const me = await person.get('/people/me');
    expect(me.status, me.text).toBe(200);
    person.personId = me.json.person_id;
    person.csrf = me.json.csrf_token;
    expect(person.personId).toBe(`dev|${person.name}`);
    return person;
  }

  get(path: string) {
    return http('GET', `${this.server.baseUrl}${path}`, { headers: { cookie: this.browser.cookie } });
  }

  /** A POST with the session's CSRF token. */
  post(path: string, json: unknown = {}) {
    return http('POST', `${this.server.baseUrl}${path}`, { json, headers: { cookie: this.browser.cookie, 'x-csrf-token': this.csrf } });
  }

  async inbox(): Promise<any[]> {
    const res = await this.get('/people/me/inbox');
    expect(res.status, res.text).toBe(200);
    return res.json.approvals;
  }

  /** The inbox item of `agentId`, waited for (it is put there off the request path). */
  inboxItemFor(agentId: string) {
    return eventually(`${this.name}'s inbox listing ${agentId}`, async () => (await this.inbox()).find((a) => a.agent.agent_id === agentId));
  }

  decide(approvalId: string, verdict: 'approve' | 'deny', capabilities?: string[]) {
    return this.post(`/people/me/approvals/${encodeURIComponent(approvalId)}`, { verdict, ...(capabilities ? { capabilities } : {}) });
  }
}

/** The CIBA approval object a pending agent carries: exactly these members, no code, no link. */
const cibaApproval = (bindingMessage?: string) => ({
  method: 'ciba',
  ...(bindingMessage === undefined ? {} : { binding_message: bindingMessage }),
  expires_in: EXPIRES_IN_SECONDS,
  interval: INTERVAL_SECONDS,
});

const WEATHER_PARIS = { name: 'weather_lookup', constraints: { city: 'Paris' } };
const METRICS_TOKEN = 'ciba-metrics-token-0123456789';

forEachStore('CIBA approvals', (storeKind) => {
  const receiver = webhookReceiverForBlock();
  const server = testServerForBlock(() => ({ store: storeKind, env: cibaEnv(receiver.url, { METRICS_TOKEN }) }));
  const c = new Client(server);

  /** A host an administrator linked to `person`, whose default capability is echo. */
  async function hostLinkedTo(person: Person): Promise<{ host: TestKey; hostId: string }> {
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: person.personId, name: `${person.name}'s laptop` });
    expect(created.status, created.text).toBe(201);
    return { host, hostId: created.json.host_id };
  }

  /** A pending agent on a host linked to `person`, asking by CIBA for echo (a default) and weather_lookup. */
  async function cibaAgentOf(person: Person, body: Record<string, unknown> = {}) {
    const { host, hostId } = await hostLinkedTo(person);
    const { res, agent } = await c.register(host, { mode: 'delegated', name: 'ciba bot', capabilities: ['echo', WEATHER_PARIS], preferred_method: 'ciba', ...body });
    expect(res.status, res.text).toBe(200);
    expect(res.json.status).toBe('pending');
    expect(res.json.approval.method).toBe('ciba');
    return { host, hostId, agent: agent!, res };
  }

  /** Registers on a new, unlinked host (dynamic registration), delegated, asking for weather_lookup. */
  async function onUnlinkedHost(body: Record<string, unknown>) {
    const host = await newEd25519();
    const { res, agent } = await c.register(host, { mode: 'delegated', name: 'roaming bot', capabilities: [WEATHER_PARIS], ...body });
    return { host, res, agent };
  }

  /**
   * Returns once every notice and inbox write queued before the call has landed, without waiting a
   * fixed time: a later CIBA request's notice and inbox item are waited for, and since notices go
   * out one at a time in the order they were queued (and inbox writes are made in order), anything
   * queued earlier would have arrived first.
   */
  async function afterQueuedWork(): Promise<void> {
    const marker = await Person.signedIn(server, 'Marker');
    const { agent } = await cibaAgentOf(marker);
    await receiver.noticeFor(agent.id);
    await marker.inboxItemFor(agent.id);
  }

  const approvalIdOf = async (agentId: string) => (await server.store.getAgent(agentId))!.agent.approval!.id;
  const agentStatus = async (agent: TestAgent) => {
    const res = await c.status(agent.host, agent.id);
    expect(res.status, res.text).toBe(200);
    return res.json.status as string;
  };
  const auditOf = async (agentId: string, type: string) => {
    const res = await c.admin('GET', `/admin/audit?agent_id=${encodeURIComponent(agentId)}&type=${type}&limit=50`);
    expect(res.status, res.text).toBe(200);
    return res.json.events as Array<Record<string, any>>;
  };

  it('discovery offers ciba next to device_authorization when a notification channel is configured', async () => {
    const discovery = await http('GET', c.url('/.well-known/agent-configuration'));
    expect(discovery.status).toBe(200);
    expect(discovery.json.approval_methods).toEqual(['device_authorization', 'ciba']);
  });

  it("a linked host's agent asking for ciba gets a code-less approval; its person is told by a signed webhook, approves from the inbox, and the agent acts", async () => {
    const alice = await Person.signedIn(server, 'Alice');
    const bindingMessage = 'Order 7F3K: book the Paris trip';
    const { hostId, agent, res } = await cibaAgentOf(alice, { binding_message: bindingMessage });

    // The approval object: CIBA's members exactly, no user code, no verification URI, anywhere in the answer.
    expect(res.json.approval).toEqual(cibaApproval(bindingMessage));
    expect(res.text).not.toMatch(/user_code|verification_uri/);
    const approvalId = await approvalIdOf(agent.id);
    const userCode = server.app.deps.userCodes.codeFor(approvalId);
    expect(res.text).not.toContain(userCode);
    expect(res.text).not.toContain(approvalId);

    // The webhook: signed, about this approval, linking to the inbox item, and never carrying the code.
    const notice = await receiver.noticeFor(agent.id);
    expect(notice.verified).toBe(true);
    expect(notice.headers['content-type']).toBe('application/json');
    expect(notice.json.type).toBe('approval.waiting');
    expect(notice.json.data).toMatchObject({
      approval_id: approvalId,
      agent_id: agent.id,
      host_id: hostId,
      person_id: alice.personId,
      agent_name: 'ciba bot',
      capabilities: ['weather_lookup'],
      binding_message: bindingMessage,
      link: `${c.issuer}/inbox/${approvalId}`,
    });
    expect(new Date(notice.json.data.expires_at).getTime()).toBe(server.clock.nowMs() + EXPIRES_IN_SECONDS * 1000);
    expect(notice.body).not.toContain(userCode);
    expect(notice.body).not.toContain(userCode.replace('-', ''));
    expect(notice.body).not.toMatch(/user_code|verification_uri|device_code/);

    // The inbox lists it, as a CIBA approval with its binding message.
    const item = await alice.inboxItemFor(agent.id);
    expect(item).toMatchObject({
      approval_id: approvalId,
      method: 'ciba',
      binding_message: bindingMessage,
      registration: true,
      agent: { agent_id: agent.id, name: 'ciba bot', status: 'pending' },
      host: { host_id: hostId, linked: true },
      capabilities: [{ capability: 'weather_lookup', constraints: { city: 'Paris' } }],
    });

    // Polling as for device authorization: pending until decided, showing the same code-less approval.
    const polled = await c.status(agent.host, agent.id);
    expect(polled.status, polled.text).toBe(200);
    expect(polled.json.status).toBe('pending');
    expect(polled.json.approval).toEqual(cibaApproval(bindingMessage));
    expect(polled.text).not.toContain(userCode);
    const approved = await alice.decide(approvalId, 'approve');
    expect(approved.status, approved.text).toBe(200);
    expect(approved.json).toMatchObject({ agent_id: agent.id, status: 'active', user_id: alice.personId });
    expect(await agentStatus(agent)).toBe('active');
    expect((await c.execute(agent, 'weather_lookup', { city: 'Paris' })).status).toBe(200);
    expect(code(await c.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toMatch(/^403 /);
    // Decided: out of the inbox, and the people's API door is on the audit trail.
    expect(await alice.inbox()).toEqual([]);
    expect((await auditOf(agent.id, 'approval.approved'))[0]).toMatchObject({ actor: 'person', via: 'people_api', person_id: alice.personId });
  });

  it('a login_hint naming a signed-in person (dev|<name>) reaches them from an unlinked host; approving links the host to them', async () => {
    const bob = await Person.signedIn(server, 'Bob');
    // A login_hint with no preferred_method asks for CIBA too.
    const { res, agent } = await onUnlinkedHost({ login_hint: bob.personId, binding_message: 'Bob, it is me' });
    expect(res.status, res.text).toBe(200);
    expect(res.json.status).toBe('pending');
    expect(res.json.approval).toEqual(cibaApproval('Bob, it is me'));
    const hostId = res.json.host_id as string;

    const item = await bob.inboxItemFor(agent!.id);
    expect(item).toMatchObject({ method: 'ciba', registration: true, host: { host_id: hostId, linked: false } });
    expect((await receiver.noticeFor(agent!.id)).json.data.person_id).toBe(bob.personId);
    expect((await c.admin('GET', `/admin/hosts/${hostId}`)).json.user_id).toBeUndefined();

    const approved = await bob.decide(item.approval_id, 'approve');
    expect(approved.status, approved.text).toBe(200);
    expect(approved.json.status).toBe('active');
    expect(await agentStatus(agent!)).toBe('active');
    const hostNow = await c.admin('GET', `/admin/hosts/${hostId}`);
    expect(hostNow.json).toMatchObject({ user_id: bob.personId, status: 'active' });
    expect((await bob.get('/people/me/hosts')).json.hosts.map((h: { host_id: string }) => h.host_id)).toContain(hostId);
    expect((await c.execute(agent!, 'weather_lookup', { city: 'Paris' })).status).toBe(200);
  });

  it('preferred_method ciba without anyone to name (an unlinked host, no login_hint) falls back to device authorization', async () => {
    const { res } = await onUnlinkedHost({ preferred_method: 'ciba' });
    expect(res.status, res.text).toBe(200);
    expect(res.json.approval).toMatchObject({ method: 'device_authorization', verification_uri: `${c.issuer}/device` });
    expect(res.json.approval.user_code).toEqual(expect.any(String));
    // A blank login_hint names nobody either.
    const blank = await onUnlinkedHost({ preferred_method: 'ciba', login_hint: '   ' });
    expect(blank.res.json.approval.method).toBe('device_authorization');
  });

  it("a login_hint cannot divert a linked host's approval to someone else: it goes to the host's person only", async () => {
    const owner = await Person.signedIn(server, 'Owner');
    const other = await Person.signedIn(server, 'Other');
    const { agent } = await cibaAgentOf(owner, { login_hint: other.personId });
    expect((await receiver.noticeFor(agent.id)).json.data.person_id).toBe(owner.personId);
    await owner.inboxItemFor(agent.id);
    await afterQueuedWork();
    expect(await other.inbox()).toEqual([]);
    expect(receiver.about(agent.id).map((n) => n.json.data.person_id)).toEqual([owner.personId]);
  });

  it('no enumeration: an unknown login_hint is answered exactly like a known one, and nobody is told or gets it in their inbox', async () => {
    const carol = await Person.signedIn(server, 'Carol');
    const bystander = await Person.signedIn(server, 'Bystander');
    const ghostName = uniqueName('Ghost');
    const body = { preferred_method: 'ciba', binding_message: 'same words for both' };
    // The unknown one first: a notice for it would be queued (and delivered, in order) before the known one's.
    const unknown = await onUnlinkedHost({ ...body, login_hint: `dev|${ghostName}` });
    const known = await onUnlinkedHost({ ...body, login_hint: carol.personId });
    for (const r of [unknown.res, known.res]) expect(r.status, r.text).toBe(200);

    const shape = (r: HttpResult) => ({
      keys: Object.keys(r.json).sort(),
      status: r.json.status,
      mode: r.json.mode,
      name: r.json.name,
      approval: r.json.approval,
      grants: r.json.agent_capability_grants.map((g: Record<string, unknown>) => ({ ...g, id: typeof g.id })),
    });
    expect(shape(unknown.res)).toEqual(shape(known.res));
    expect(unknown.res.json.approval).toEqual(cibaApproval('same words for both'));
    expect(unknown.res.headers.get('content-length')).toBe(known.res.headers.get('content-length'));

    // The known person is told; once their notice and a later one are in, nothing came for the unknown one.
    await receiver.noticeFor(known.agent!.id);
    await carol.inboxItemFor(known.agent!.id);
    await afterQueuedWork();
    expect(receiver.about(unknown.agent!.id)).toEqual([]);
    expect((await carol.inbox()).map((a) => a.agent.agent_id)).toEqual([known.agent!.id]);
    expect(await bystander.inbox()).toEqual([]);
    // Whoever signs in under the hinted name later was never sent it: not in their inbox, not theirs to decide.
    const ghost = new Person(server, ghostName);
    await ghost.browser.signIn(ghostName);
    const me = await ghost.get('/people/me');
    ghost.personId = me.json.person_id;
    ghost.csrf = me.json.csrf_token;
    expect(ghost.personId).toBe(`dev|${ghostName}`);
    expect(await ghost.inbox()).toEqual([]);
    expect(code(await ghost.decide(await approvalIdOf(unknown.agent!.id), 'approve'))).toBe('404 not_found');
    expect(await agentStatus(unknown.agent!)).toBe('pending');
  });

  it("another signed-in person cannot see, open or decide someone's CIBA request: empty inbox, 404, a not-found page, a wrong code", async () => {
    const dana = await Person.signedIn(server, 'Dana');
    const mallory = await Person.signedIn(server, 'Mallory');
    const { agent } = await cibaAgentOf(dana, { binding_message: 'for Dana only' });
    const item = await dana.inboxItemFor(agent.id);
    const approvalId = item.approval_id as string;

    expect(await mallory.inbox()).toEqual([]);
    expect(JSON.stringify((await mallory.get('/people/me/approvals')).json)).not.toContain(approvalId);
    for (const verdict of ['approve', 'deny'] as const) expect(code(await mallory.decide(approvalId, verdict))).toBe('404 not_found');
    // The same answer as for an approval that never existed.
    expect(code(await mallory.decide('apr_never_existed', 'approve'))).toBe('404 not_found');

    const page = await mallory.browser.request('GET', `/inbox/${approvalId}`);
    expectClearPage(page, 404);
    expect(page.text).not.toContain('for Dana only');
    expect(page.text).not.toContain(agent.id);
    const never = await mallory.browser.request('GET', '/inbox/apr_never_existed');
    expectClearPage(never, 404);

    // The code derived from the approval id finds nothing for Mallory on the device page.
    const userCode = server.app.deps.userCodes.codeFor(approvalId);
    const byCode = await mallory.browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
    expect(byCode.text).not.toContain('Allow this agent?');
    expect(byCode.text).not.toContain('for Dana only');

    // Nothing changed: still pending, still in Dana's inbox.
    expect(await agentStatus(agent)).toBe('pending');
    expect((await dana.inbox()).map((a) => a.approval_id)).toEqual([approvalId]);
  });

  it('a CIBA request sent by login_hint from an unlinked host cannot be taken by someone else: not by its derived code, the inbox form or the API', async () => {
    const olga = await Person.signedIn(server, 'Olga');
    const mallory = await Person.signedIn(server, 'Mallory');
    const { res, agent } = await onUnlinkedHost({ login_hint: olga.personId, binding_message: 'for Olga' });
    expect(res.json.approval.method).toBe('ciba');
    const item = await olga.inboxItemFor(agent!.id);
    const approvalId = item.approval_id as string;

    // The code an approval id derives is never shown to anyone; typed anyway, it finds nothing for Mallory.
    const userCode = server.app.deps.userCodes.codeFor(approvalId);
    const byCode = await mallory.browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
    expect(byCode.text).not.toContain('Allow this agent?');
    expect(byCode.text).not.toContain('for Olga');
    // The inbox's decision form, posted by Mallory with her own session's token and Olga's ids.
    const inboxPage = await mallory.browser.request('GET', '/inbox');
    expect(inboxPage.status).toBe(200);
    const csrf = mallory.browser.csrfOf(inboxPage.text);
    for (const verdict of ['approve', 'deny']) {
      const posted = await mallory.browser.request('POST', '/inbox/decision', { csrf, agent_id: agent!.id, approval_id: approvalId, verdict });
      expectClearPage(posted, 404);
    }
    expect(code(await mallory.decide(approvalId, 'approve'))).toBe('404 not_found');
    expectClearPage(await mallory.browser.request('GET', `/inbox/${approvalId}`), 404);

    // Nothing changed: still pending, the host still linked to nobody, still in Olga's inbox.
    expect(await agentStatus(agent!)).toBe('pending');
    expect((await c.admin('GET', `/admin/hosts/${res.json.host_id}`)).json.user_id).toBeUndefined();
    expect((await olga.inbox()).map((a) => a.approval_id)).toEqual([approvalId]);
  });

  it("the inbox page lists the person's request with the agent's name and binding message as escaped text, never markup", async () => {
    const erin = await Person.signedIn(server, 'Erin');
    const bindingMessage = 'Check <b>4711</b> & "go" <script>x()</script>';
    const { agent } = await cibaAgentOf(erin, { name: 'inbox <i>bot</i>', binding_message: bindingMessage });
    const item = await erin.inboxItemFor(agent.id);

    // A fresh sign-in straight onto the inbox page.
    const browser = new PersonBrowser(server.baseUrl);
    const page = await browser.signIn(erin.name, '/inbox');
    expect(page.status, page.text.slice(0, 1500)).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.text).toContain('inbox &lt;i&gt;bot&lt;/i&gt;');
    expect(page.text).toContain('Check &lt;b&gt;4711&lt;/b&gt; &amp; &quot;go&quot; &lt;script&gt;x()&lt;/script&gt;');
    expect(page.text).not.toContain('<b>4711</b>');
    expect(page.text).not.toContain('<i>bot</i>');
    expect(page.text).not.toContain('<script>x()');
    expect(page.text).toContain(`href="/inbox/${item.approval_id}"`);

    // An agent whose name imitates agentgate's own (mixing alphabets) is listed with the same warning the item page gives.
    const { agent: imitator } = await cibaAgentOf(erin, { name: 'аgentgate' });
    await erin.inboxItemFor(imitator.id);
    const listed = await browser.request('GET', '/inbox');
    const imitatorItem = listed.text.slice(listed.text.indexOf('аgentgate'));
    expect(imitatorItem.slice(0, imitatorItem.indexOf('</section>'))).toContain('Careful: it');

    // The item's own page shows the binding message, escaped, with the decision form.
    const itemPage = await browser.request('GET', `/inbox/${item.approval_id}`);
    expect(itemPage.status, itemPage.text.slice(0, 1500)).toBe(200);
    expect(itemPage.text).toContain('Allow this agent?');
    expect(itemPage.text).toContain('Check &lt;b&gt;4711&lt;/b&gt;');
    expect(itemPage.text).not.toContain('<b>4711</b>');
    expect(itemPage.text).toContain('action="/inbox/decision"');

    // Someone else's inbox page shows none of it.
    const other = new PersonBrowser(server.baseUrl);
    const theirs = await other.signIn(uniqueName('Frank'), '/inbox');
    expect(theirs.status).toBe(200);
    expect(theirs.text).toContain('Nothing waits for you');
    expect(theirs.text).not.toContain('4711');
  });

  it('a denial on the inbox page needs its CSRF token; with it the agent is rejected and the audit trail says via inbox', async () => {
    const gina = await Person.signedIn(server, 'Gina');
    const { agent } = await cibaAgentOf(gina, { binding_message: 'deny me' });
    const item = await gina.inboxItemFor(agent.id);
    const browser = new PersonBrowser(server.baseUrl);
    await browser.signIn(gina.name, '/inbox');
    const page = await browser.request('GET', `/inbox/${item.approval_id}`);
    expect(page.status, page.text.slice(0, 1500)).toBe(200);
    const field = (name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(page.text)?.[1];
    expect(field('agent_id')).toBe(agent.id);
    expect(field('approval_id')).toBe(item.approval_id);
    const form = { agent_id: agent.id, approval_id: item.approval_id as string, verdict: 'deny' };

    // Without the token, or with another's: refused, nothing changed.
    // (gina.csrf is the token of her other session, the one the people's API uses.)
    expect(gina.csrf).not.toBe(browser.csrfOf(page.text, '/inbox/decision'));
    for (const csrf of [undefined, '', 'x'.repeat(43), gina.csrf]) {
      const refused = await browser.request('POST', '/inbox/decision', csrf === undefined ? form : { ...form, csrf });
      expectClearPage(refused, 403);
    }
    expect(await agentStatus(agent)).toBe('pending');
    expect((await gina.inbox()).map((a) => a.approval_id)).toEqual([item.approval_id]);
    expect(await auditOf(agent.id, 'approval.denied')).toEqual([]);

    const denied = await browser.request('POST', '/inbox/decision', { ...form, csrf: browser.csrfOf(page.text, '/inbox/decision') });
    expect(denied.status, denied.text.slice(0, 1500)).toBe(200);
    expect(denied.text).toContain('You denied');
    expect(await agentStatus(agent)).toBe('rejected');
    expect(await gina.inbox()).toEqual([]);
    const events = await auditOf(agent.id, 'approval.denied');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ actor: 'person', via: 'inbox', person_id: gina.personId, agent_id: agent.id, outcome: 'rejected' });
  });

  it('a capability that needs presence is not approved from the inbox without a passkey: not by the page form, not by the API', async () => {
    const hana = await Person.signedIn(server, 'Hana');
    const { agent } = await cibaAgentOf(hana, { capabilities: ['echo', 'transfer_money'], binding_message: 'pay rent' });
    const item = await hana.inboxItemFor(agent.id);
    expect(item.capabilities.find((c: { capability: string }) => c.capability === 'transfer_money').approval_strength).toBe('presence');
    const browser = new PersonBrowser(server.baseUrl);
    await browser.signIn(hana.name, '/inbox');
    const page = await browser.request('GET', `/inbox/${item.approval_id}`);
    expect(page.status, page.text.slice(0, 1500)).toBe(200);
    const form = { agent_id: agent.id, approval_id: item.approval_id as string, verdict: 'approve', capabilities: ['transfer_money'], csrf: browser.csrfOf(page.text, '/inbox/decision') };
    expectClearPage(await browser.request('POST', '/inbox/decision', form), 403);
    const viaApi = await hana.decide(item.approval_id, 'approve', ['transfer_money']);
    expect(code(viaApi), viaApi.text).toBe('403 unauthorized');
    expect(await agentStatus(agent)).toBe('pending');
    const grants = (await server.store.getAgent(agent.id))!.grants.map((g) => `${g.capability}:${g.status}`).sort();
    // echo is the host's default (active at once); transfer_money still waits for a passkey.
    expect(grants).toEqual(['echo:active', 'transfer_money:pending']);
  });

  it('a binding message that is not one line of visible text, or longer than 500 characters, is refused on register (400)', async () => {
    const person = await Person.signedIn(server, 'Hana');
    const { host, hostId } = await hostLinkedTo(person);
    const refused = {
      'a newline': 'line one\nline two',
      'a carriage return': 'line one\rline two',
      'U+202E (right-to-left override)': 'pay \u202Eevil',
      'a zero-width space': 'ok\u200Bay',
      'U+2028 (line separator)': 'one\u2028two',
      'a lone surrogate': 'x\uD800y',
      'blank': '   ',
      '501 characters': 'x'.repeat(501),
    };
    for (const [what, bindingMessage] of Object.entries(refused)) {
      const { res } = await c.register(host, { mode: 'delegated', capabilities: [WEATHER_PARIS], preferred_method: 'ciba', binding_message: bindingMessage });
      expect([what, code(res)]).toEqual([what, '400 invalid_request']);
    }
    expect(await server.store.listHostAgentIds(hostId)).toEqual([]);
    // 500 characters of visible text (emoji count as one each) are accepted as sent.
    const longest = '\u{1F600}'.repeat(10) + 'y'.repeat(490);
    const { res } = await c.register(host, { mode: 'delegated', capabilities: [WEATHER_PARIS], preferred_method: 'ciba', binding_message: longest });
    expect(res.status, res.text).toBe(200);
    expect(res.json.approval).toEqual(cibaApproval(longest));
  });

  it('the binding message is refused on request-capability and reactivate too, before anything changes', async () => {
    const person = await Person.signedIn(server, 'Ines');
    const { host } = await hostLinkedTo(person);
    const registered = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    expect(registered.res.json.status).toBe('active');
    const agent = registered.agent!;

    for (const bindingMessage of ['a\nb', 'a\u202Eb', 'a\u200Bb', 'z'.repeat(501)]) {
      const res = await c.requestCapability(agent, { capabilities: [WEATHER_PARIS], preferred_method: 'ciba', binding_message: bindingMessage });
      expect([bindingMessage.slice(0, 8), code(res)]).toEqual([bindingMessage.slice(0, 8), '400 invalid_request']);
    }
    const after = (await server.store.getAgent(agent.id))!;
    expect(after.agent.approval).toBeUndefined();
    expect(after.grants.map((g) => g.capability)).toEqual(['echo']);

    expect((await c.admin('POST', `/admin/agents/${agent.id}/expire`)).status).toBe(200);
    for (const bindingMessage of ['a\nb', 'a\u2028b', 'a\uFEFFb', 'q'.repeat(501)]) {
      const res = await c.hostPost('/agent/reactivate', host, { agent_id: agent.id, preferred_method: 'ciba', binding_message: bindingMessage });
      expect([bindingMessage.slice(0, 8), code(res)]).toEqual([bindingMessage.slice(0, 8), '400 invalid_request']);
    }
    expect(await agentStatus(agent)).toBe('expired');
    // A message that is fine is accepted: the reactivation goes through.
    const ok = await c.hostPost('/agent/reactivate', host, { agent_id: agent.id, preferred_method: 'ciba', binding_message: 'fine' });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.status).toBe('active');
  });

  it('request-capability with preferred_method ciba on an active agent of a linked host asks its person by CIBA: notified, in the inbox, approved, executed', async () => {
    const jon = await Person.signedIn(server, 'Jon');
    const { host, hostId } = await hostLinkedTo(jon);
    const registered = await c.register(host, { mode: 'delegated', name: 'growing bot', capabilities: ['echo'] });
    expect(registered.res.json.status).toBe('active');
    const agent = registered.agent!;

    const res = await c.requestCapability(agent, { capabilities: [{ name: 'weather_lookup', constraints: { city: 'Oslo' } }], preferred_method: 'ciba', binding_message: 'more weather' });
    expect(res.status, res.text).toBe(200);
    expect(res.json.status).toBe('pending');
    expect(res.json.approval).toEqual(cibaApproval('more weather'));
    expect(res.text).not.toMatch(/user_code|verification_uri/);

    const approvalId = await approvalIdOf(agent.id);
    const notice = await receiver.noticeFor(agent.id);
    expect(notice.verified).toBe(true);
    expect(notice.json.data).toMatchObject({
      approval_id: approvalId, agent_id: agent.id, host_id: hostId, person_id: jon.personId, capabilities: ['weather_lookup'], binding_message: 'more weather',
      link: `${c.issuer}/inbox/${approvalId}`,
    });
    const item = await jon.inboxItemFor(agent.id);
    expect(item).toMatchObject({ approval_id: approvalId, method: 'ciba', registration: false, agent: { status: 'active' } });

    expect((await jon.decide(approvalId, 'approve')).status).toBe(200);
    expect((await c.execute(agent, 'weather_lookup', { city: 'Oslo' })).status).toBe(200);
  });

  it('reactivate with preferred_method ciba asks the host\'s person by CIBA for a capability they withdrew before', async () => {
    const lou = await Person.signedIn(server, 'Lou');
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo', 'weather_lookup'], user_id: lou.personId });
    expect(created.status).toBe(201);
    const registered = await c.register(host, { mode: 'delegated', name: 'returning bot', capabilities: ['echo', 'weather_lookup'] });
    expect(registered.res.json.status).toBe('active');
    const agent = registered.agent!;
    // Withdrawn once, a default capability is never granted again without asking.
    expect((await c.hostPost('/agent/revoke-capability', host, { agent_id: agent.id, capabilities: ['weather_lookup'] })).status).toBe(200);
    expect((await c.admin('POST', `/admin/agents/${agent.id}/expire`)).status).toBe(200);

    const res = await c.hostPost('/agent/reactivate', host, { agent_id: agent.id, preferred_method: 'ciba', binding_message: 'welcome back' });
    expect(res.status, res.text).toBe(200);
    expect(res.json.status).toBe('pending');
    expect(res.json.approval).toEqual(cibaApproval('welcome back'));
    const approvalId = await approvalIdOf(agent.id);
    const notice = await receiver.noticeFor(agent.id);
    expect(notice.verified).toBe(true);
    expect(notice.json.data).toMatchObject({ approval_id: approvalId, person_id: lou.personId, capabilities: ['weather_lookup'], binding_message: 'welcome back' });
    const item = await lou.inboxItemFor(agent.id);
    expect(item).toMatchObject({ approval_id: approvalId, method: 'ciba', binding_message: 'welcome back' });
    expect((await lou.decide(approvalId, 'approve')).json.status).toBe('active');
    expect((await c.execute(agent, 'weather_lookup', { city: 'Rome' })).status).toBe(200);
  });

  it('a pending registration retried after its CIBA request lapsed gets a new one, back in the same inbox, without a second notice', async () => {
    const max = await Person.signedIn(server, 'Max');
    const { host } = await hostLinkedTo(max);
    const agentKey = await newEd25519();
    const body = { mode: 'delegated', name: 'patient bot', capabilities: ['echo', WEATHER_PARIS], preferred_method: 'ciba', binding_message: 'still me' };
    const first = await c.register(host, body, { agentKey });
    expect(first.res.json.approval).toEqual(cibaApproval('still me'));
    const agentId = first.agent!.id;
    const firstApprovalId = await approvalIdOf(agentId);
    await receiver.noticeFor(agentId);
    await max.inboxItemFor(agentId);
    server.clock.advance((EXPIRES_IN_SECONDS + 1) * 1000);
    try {
      expect(await max.inbox()).toEqual([]);
      const retried = await c.register(host, body, { agentKey });
      expect(retried.res.status, retried.res.text).toBe(200);
      expect(retried.res.json.agent_id).toBe(agentId);
      expect(retried.res.json.approval).toEqual(cibaApproval('still me'));
      const renewedId = await approvalIdOf(agentId);
      expect(renewedId).not.toBe(firstApprovalId);
      const item = await max.inboxItemFor(agentId);
      expect(item).toMatchObject({ approval_id: renewedId, method: 'ciba', binding_message: 'still me' });
      expect(code(await max.decide(firstApprovalId, 'approve'))).toBe('404 not_found');
      await afterQueuedWork();
      expect(receiver.about(agentId).map((n) => n.json.data.approval_id)).toEqual([firstApprovalId]);
      expect((await max.decide(renewedId, 'approve')).json.status).toBe('active');
    } finally {
      server.clock.advance(-(EXPIRES_IN_SECONDS + 1) * 1000);
    }
  });

  it('a lapsed CIBA request leaves the inbox and can no longer be decided (404), on the API and the pages', async () => {
    const kim = await Person.signedIn(server, 'Kim');
    const { agent } = await cibaAgentOf(kim, { binding_message: 'soon gone' });
    const item = await kim.inboxItemFor(agent.id);
    const approvalId = item.approval_id as string;
    server.clock.advance((EXPIRES_IN_SECONDS + 1) * 1000);
    try {
      expect(await kim.inbox()).toEqual([]);
      expect(code(await kim.decide(approvalId, 'approve'))).toBe('404 not_found');
      expect(code(await kim.decide(approvalId, 'deny'))).toBe('404 not_found');
      const browser = new PersonBrowser(server.baseUrl);
      const inboxPage = await browser.signIn(kim.name, '/inbox');
      expect(inboxPage.status).toBe(200);
      expect(inboxPage.text).toContain('Nothing waits for you');
      expect(inboxPage.text).not.toContain('soon gone');
      expectClearPage(await browser.request('GET', `/inbox/${approvalId}`), 404);
      // Still waiting, undecided: the agent never became active.
      const stored = (await server.store.getAgent(agent.id))!;
      expect(stored.agent.status).toBe('pending');
      expect(stored.grants.find((g) => g.capability === 'weather_lookup')!.status).toBe('pending');
    } finally {
      server.clock.advance(-(EXPIRES_IN_SECONDS + 1) * 1000);
    }
  });

  it('an administrator can still decide a CIBA request whose login_hint named nobody; the host is linked to whom they name', async () => {
    const { res, agent } = await onUnlinkedHost({ preferred_method: 'ciba', login_hint: 'nobody-here@example.invalid' });
    expect(res.status, res.text).toBe(200);
    expect(res.json.approval).toEqual(cibaApproval());
    const hostId = res.json.host_id as string;
    const approved = await c.admin('POST', `/admin/agents/${agent!.id}/approve`, { user_id: 'admin-picked-person' });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.json).toMatchObject({ status: 'active', user_id: 'admin-picked-person' });
    expect(await agentStatus(agent!)).toBe('active');
    expect((await c.admin('GET', `/admin/hosts/${hostId}`)).json.user_id).toBe('admin-picked-person');
    expect((await c.execute(agent!, 'weather_lookup', { city: 'Paris' })).status).toBe(200);
    expect((await auditOf(agent!.id, 'approval.approved'))[0]).toMatchObject({ actor: 'admin', via: 'admin_api', person_id: 'admin-picked-person' });
    expect(receiver.about(agent!.id)).toEqual([]);
  });

  it('the notices sent are counted in /metrics by channel and outcome, so an operator sees one that could not be delivered', async () => {
    const olga = await Person.signedIn(server, 'Olga');
    const { agent } = await cibaAgentOf(olga);
    await receiver.noticeFor(agent.id);
    const scrape = async () => (await http('GET', c.url('/metrics'), { token: METRICS_TOKEN })).text;
    const delivered = async () => Number(/^agentgate_approval_notices_total\{channel="webhook",outcome="delivered"\} (\d+)$/m.exec(await scrape())?.[1] ?? 0);
    // Counted when the receiver's answer is read, a moment after the receiver has the body.
    await eventually('the delivered notice counted', async () => ((await delivered()) >= 1 ? true : undefined));
    const text = await scrape();
    expect(text).toMatch(/^agentgate_approval_notices_total\{channel="webhook",outcome="dropped"\} 0$/m);
    expect(text).not.toContain('channel="email"');
  });

  it('every notice the server sent verifies against the shared secret, and one changed in transit does not', async () => {
    // At least one of its own, so the test stands alone too.
    const pia = await Person.signedIn(server, 'Pia');
    await receiver.noticeFor((await cibaAgentOf(pia)).agent.id);
    for (const notice of receiver.notices) {
      expect(notice.verified).toBe(true);
      expect(notice.headers['x-agentgate-signature']).toMatch(/^v1=[0-9a-f]{64}$/);
      expect(notice.headers['x-agentgate-timestamp']).toMatch(/^\d+$/);
    }
    // A body changed in transit does not verify.
    const [first] = receiver.notices;
    const headers = { timestamp: String(first!.headers['x-agentgate-timestamp']), signature: String(first!.headers['x-agentgate-signature']) };
    expect(verifyWebhookSignature(SECRET, first!.body.replace('approval.waiting', 'approval.waitinG'), headers, Math.floor(Date.now() / 1000), TOLERANCE_SECONDS)).toBe(false);
  });

  describe('hourly budgets', () => {
    const PER_PERSON = 2;
    const PER_HOST = 4;
    const burst = testServerForBlock(() => ({
      store: storeKind,
      env: cibaEnv(receiver.url, { RATE_LIMIT_CIBA_PER_PERSON_PER_HOUR: String(PER_PERSON), RATE_LIMIT_CIBA_PER_HOST_PER_HOUR: String(PER_HOST) }),
    }));
    const b = new Client(burst);

    const expect429 = (res: HttpResult) => {
      expect(code(res)).toBe('429 rate_limited');
      expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    };

    /** One registration from a new unlinked host naming `loginHint`. */
    const fromNewHost = async (loginHint: string) => (await b.register(await newEd25519(), { mode: 'delegated', capabilities: [WEATHER_PARIS], login_hint: loginHint })).res;

    it("a burst of CIBA requests to one person beyond the person's budget is refused (429, Retry-After) and creates no agent", async () => {
      const lena = await Person.signedIn(burst, 'Lena');
      const host = await newEd25519();
      const created = await b.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: lena.personId });
      expect(created.status).toBe(201);
      const hostId = created.json.host_id as string;
      const ask = () => b.register(host, { mode: 'delegated', capabilities: ['echo', WEATHER_PARIS], preferred_method: 'ciba' });
      for (let i = 0; i < PER_PERSON; i++) expect((await ask()).res.json.approval.method).toBe('ciba');
      const agentsBefore = (await burst.store.listHostAgentIds(hostId)).sort();
      expect(agentsBefore).toHaveLength(PER_PERSON);
      const { res, agent } = await ask();
      expect429(res);
      expect(agent).toBeNull();
      expect((await burst.store.listHostAgentIds(hostId)).sort()).toEqual(agentsBefore);
      // The person's inbox holds only what was let through.
      await eventually('both admitted requests in the inbox', async () => ((await lena.inbox()).length === PER_PERSON ? true : undefined));
      // Device authorization is not CIBA: it spends nothing of the person's budget.
      const device = await b.register(host, { mode: 'delegated', capabilities: ['echo', WEATHER_PARIS] });
      expect(device.res.json.approval.method).toBe('device_authorization');
    });

    it('a known and an unknown login_hint run into the same per-person budget, counted by the hint as normalized', async () => {
      const mia = await Person.signedIn(burst, 'Mia');
      const knownCodes: string[] = [];
      for (let i = 0; i <= PER_PERSON; i++) knownCodes.push(code(await fromNewHost(mia.personId)));
      const ghost = `${uniqueName('ghost')}@example.invalid`;
      // One address, written three ways: one budget.
      const unknownCodes: string[] = [];
      for (const hint of [ghost, ` ${ghost.toUpperCase()} `, ghost.replace(/^g/, 'G')]) unknownCodes.push(code(await fromNewHost(hint)));
      expect(knownCodes).toEqual([...Array(PER_PERSON).fill('200'), '429 rate_limited']);
      expect(unknownCodes).toEqual(knownCodes);
      expect429(await fromNewHost(ghost));
      expect429(await fromNewHost(mia.personId));
    });

    it('a CIBA registration refused by its budget from a host key new to the server stores no host either', async () => {
      const hint = `${uniqueName('flood')}@example.invalid`;
      for (let i = 0; i < PER_PERSON; i++) expect(code(await fromNewHost(hint))).toBe('200');
      const newcomer = await newEd25519();
      const { res } = await b.register(newcomer, { mode: 'delegated', capabilities: [WEATHER_PARIS], login_hint: hint });
      expect429(res);
      expect(await burst.store.findHostByThumbprint(newcomer.thumbprint)).toBeNull();
    });

    it('retrying a pending CIBA registration (same host, same agent key) asks nobody again and spends nothing of the budgets', async () => {
      const host = await newEd25519();
      const agentKey = await newEd25519();
      const hint = `${uniqueName('retry')}@example.invalid`;
      const answers: HttpResult[] = [];
      for (let i = 0; i < PER_PERSON + 2; i++) {
        answers.push((await b.register(host, { mode: 'delegated', capabilities: [WEATHER_PARIS], login_hint: hint }, { agentKey })).res);
      }
      expect(answers.map(code)).toEqual(answers.map(() => '200'));
      expect(new Set(answers.map((a) => a.json.agent_id)).size).toBe(1);
      expect(answers.map((a) => a.json.approval.method)).toEqual(answers.map(() => 'ciba'));
      // The one point it spent leaves room for exactly one more request naming that hint.
      expect(code(await fromNewHost(hint))).toBe('200');
      expect429(await fromNewHost(hint));
    });

    it("a burst of CIBA requests from one host to different people beyond the host's budget is refused (429) and creates no agent", async () => {
      const host = await newEd25519();
      const ask = async (loginHint: string) => b.register(host, { mode: 'delegated', capabilities: [WEATHER_PARIS], preferred_method: 'ciba', login_hint: loginHint });
      let hostId = '';
      for (let i = 0; i < PER_HOST; i++) {
        const { res } = await ask(`${uniqueName('target')}@example.invalid`);
        expect(res.status, res.text).toBe(200);
        expect(res.json.approval.method).toBe('ciba');
        hostId = res.json.host_id;
      }
      const agentsBefore = (await burst.store.listHostAgentIds(hostId)).sort();
      expect(agentsBefore).toHaveLength(PER_HOST);
      const { res, agent } = await ask(`${uniqueName('target')}@example.invalid`);
      expect429(res);
      expect(agent).toBeNull();
      expect((await burst.store.listHostAgentIds(hostId)).sort()).toEqual(agentsBefore);
      // The same host may still ask by device authorization.
      expect((await b.register(host, { mode: 'delegated', capabilities: [WEATHER_PARIS] })).res.json.approval.method).toBe('device_authorization');
    });
  });

  describe('without a notification channel', () => {
    const plain = testServerForBlock(() => ({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true' } }));
    const p = new Client(plain);

    it('discovery offers device_authorization only, and a caller asking for ciba by name gets device authorization', async () => {
      const discovery = await http('GET', p.url('/.well-known/agent-configuration'));
      expect(discovery.json.approval_methods).toEqual(['device_authorization']);
      const nina = await Person.signedIn(plain, 'Nina');
      const { res } = await p.register(await newEd25519(), { mode: 'delegated', capabilities: [WEATHER_PARIS], preferred_method: 'ciba', login_hint: nina.personId });
      expect(res.status, res.text).toBe(200);
      expect(res.json.approval).toMatchObject({ method: 'device_authorization', verification_uri: `${p.issuer}/device` });
      expect(res.json.approval.user_code).toEqual(expect.any(String));
      // A device approval puts nothing in any inbox, at once or later: there is no CIBA work to wait for.
      expect(await nina.inbox()).toEqual([]);
    });
  });
});
