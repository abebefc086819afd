// Redis failing in the middle of the approval flow's ceremonies: the sign-in callback, the decision
// POST (with and without a passkey's proof of presence) and POST /passkeys. A proxy between the
// server and Redis (test/support/redis-faults.ts) cuts Redis off at each Redis command of the
// ceremony in turn, once before the command reaches Redis and once just after (the write happens,
// its answer is lost), and freezes it at the moments that matter (the write lands after the server
// gave up). A command cut off before Redis saw it may still land once Redis is back: ioredis sends
// commands it never got an answer for again when it reconnects (autoResendUnfulfilledCommands).
// Each moment is a fresh ceremony, found by recording one
// ceremony that went through. For every moment:
// - the person gets a page of ours that says what happened, status 503: never a hang, never a 500,
//   never JSON or a stack; except when the only thing that failed was keeping the session after a
//   form's change was made (a decision, a passkey): then the change stands and the person is told
//   so, and it must be whole;
// - once Redis is back, nothing the person did not complete authorizes anything: the agent
//   executes only if the approval is written through (the agent approved by this person, its copy
//   of the host active, the host active and linked to them); otherwise the approval is still open
//   (the same code shows it) or half-written and refused;
// - doing it again (reloading the approval, or sending the same form again, as a person would)
//   finishes it: the agent executes, and the person sees it among their agents.
// Failures are collected softly, so one run names every moment at which a guarantee broke.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listPasskeys } from '../../src/people/passkeys.ts';
import { createRedisStore, type RedisStore } from '../../src/store/redis/redis-store.ts';
import {
  addPasskey, decisionForm, expectClearPage, passkeyForm, presenceDecisionForm, saidApproved, signedInBrowser, type PageAnswer,
} from '../support/approval-pages.ts';
import { Client, http, type TestAgent } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { signInHeadless, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startFaultProxy, type FaultKind, type FaultProxy, type SeenCommand } from '../support/redis-faults.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { SoftwarePasskey } from '../support/software-passkey.ts';

/** Short, so a frozen command gives up quickly; the cut ones fail at once anyway. */
const COMMAND_TIMEOUT_MS = 300;

let proxy: FaultProxy;
let provider: TestOidcProvider;
let server: TestServer;
let direct: RedisStore;
let c: Client;
let prefix: string;
let origin: string;
let people = 0;

beforeAll(async () => {
  const redisUrl = await redisUrlForTests();
  proxy = await startFaultProxy(redisUrl);
  server = await startTestServer({
    store: 'redis',
    redisUrl: proxy.url,
    issuerHost: 'localhost',
    env: {
      INSECURE_DEV_SIGN_IN: 'true',
      REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS),
      RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR: '1000000',
    },
    oidc: async (redirectUri) => {
      provider = await startOidcProvider({ redirectUris: [redirectUri] });
      return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
    },
  });
  c = new Client(server);
  prefix = server.config.REDIS_KEY_PREFIX;
  origin = server.baseUrl;
  // The test reads the store around the proxy, so what it sees is what Redis holds.
  direct = await createRedisStore({ url: redisUrl, keyPrefix: prefix });
});
afterAll(async () => {
  proxy.restore();
  await direct?.close();
  await server?.close();
  await provider?.close();
  await proxy?.close();
});

// ---- moments -------------------------------------------------------------------------------------

/** A command as a kind: the script or command, and its key with the prefix and the ids taken out. */
function signatureOf(command: SeenCommand): string {
  // Ids sit in hash tags; a rate limit's key ends with a hash of the session or the address.
  const key = (command.key ?? '').startsWith(prefix)
    ? command.key!.slice(prefix.length).replace(/\{[^}]*\}/g, '{}').replace(/^(rl:[^:]+:).*$/, '$1*')
    : '(none)';
  return `${command.script ?? command.name} ${key}`;
}

/** Background work that is not part of any ceremony: the audit trail's writer, pub/sub, connection set-up. */
const BACKGROUND = /^(agentgateAudit|XADD|XTRIM|XREADGROUP|XAUTOCLAIM|XACK|XGROUP|SUBSCRIBE|PSUBSCRIBE|INFO|PING|CLIENT|SELECT|CONFIG)/;

interface Moment {
  signature: string;
  /** Which occurrence of the signature within the ceremony, from 1. */
  nth: number;
}

const describeMoment = (moment: Moment, kind: FaultKind) => `${kind} ${moment.signature} #${moment.nth}`;

/** The Redis commands one ceremony sends, as moments, recorded while `ceremony` goes through. */
async function momentsOf(ceremony: () => Promise<void>): Promise<Moment[]> {
  proxy.record();
  await ceremony();
  const counts = new Map<string, number>();
  const moments: Moment[] = [];
  for (const command of proxy.commands) {
    const signature = signatureOf(command);
    if (BACKGROUND.test(signature)) continue;
    const nth = (counts.get(signature) ?? 0) + 1;
    counts.set(signature, nth);
    moments.push({ signature, nth });
  }
  return moments;
}

/** Arms `kind` at `moment`; answers a function that says, after the request, whether it fired. */
function armAt(kind: FaultKind, moment: Moment): () => boolean {
  let seen = 0;
  let fired = false;
  void proxy.arm(kind, (command) => signatureOf(command) === moment.signature && ++seen === moment.nth).then(() => {
    fired = true;
  });
  return () => {
    proxy.disarm();
    return fired;
  };
}

/** Redis back, and the server talking to it again. */
async function restore(): Promise<void> {
  proxy.restore();
  await expect.poll(async () => (await http('GET', c.url('/readyz'))).status, { timeout: 10_000, interval: 25 }).toBe(200);
}

/** Sends `request` with a fault armed at `moment`; answers the page and whether the fault fired. */
async function withFault(kind: FaultKind, moment: Moment, request: () => Promise<PageAnswer>): Promise<{ answer: PageAnswer; fired: boolean }> {
  const firedYet = armAt(kind, moment);
  try {
    const answer = await request();
    return { answer, fired: firedYet() };
  } finally {
    firedYet();
    await restore();
  }
}

// ---- what the store holds about one approval -----------------------------------------------------

type ApprovalProgress = 'open' | 'half' | 'written' | 'done';

/**
 * How far an approval got, read from Redis itself: still `open`; `written` (the agent approved by
 * this person, its copy of the host active, the host active and linked to them: what an agent may
 * execute with); `done` (written, and the host in the person's own list, so they see and can revoke
 * it); or `half`: anything in between, described.
 */
async function approvalState(agent: TestAgent, personId: string, capabilities: string[]): Promise<{ state: ApprovalProgress; detail: string }> {
  const snapshot = (await direct.getAgent(agent.id))!;
  const host = (await direct.getHost(snapshot.agent.hostId))!;
  const listed = (await direct.listPersonHostIds(personId)).includes(host.id);
  const grants = snapshot.grants.map((g) => `${g.capability}:${g.status}`).sort();
  const detail = `agent ${snapshot.agent.status} (its host copy ${snapshot.agent.hostStatus}, approval ${snapshot.agent.approval ? 'open' : 'none'}, user ${snapshot.agent.userId}), `
    + `grants ${grants.join(',')}, host ${host.status} linked to ${host.userId}, in the person's list: ${listed}`;
  if (snapshot.agent.status === 'pending' && snapshot.agent.approval && snapshot.grants.every((g) => g.status === 'pending')) return { state: 'open', detail };
  const written = snapshot.agent.status === 'active' && snapshot.agent.hostStatus === 'active' && snapshot.agent.userId === personId
    && host.status === 'active' && host.userId === personId && grants.join() === capabilities.map((name) => `${name}:active`).sort().join();
  return { state: !written ? 'half' : listed ? 'done' : 'written', detail };
}

/** The capability each test agent executes, with arguments its schema takes. */
const EXECUTE: Record<string, unknown> = { echo: {}, transfer_money: { amount: 3, currency: 'EUR' } };

/** What execute answers now for each of `capabilities`. */
async function executesAny(agent: TestAgent, capabilities: string[]): Promise<number[]> {
  return Promise.all(capabilities.map(async (name) => (await c.execute(agent, name, EXECUTE[name])).status));
}

/** The agents the person sees through their own API (GET /people/me/agents). */
async function agentsThePersonSees(browser: PersonBrowser): Promise<string[]> {
  const res = await http('GET', c.url('/people/me/agents'), { headers: { cookie: browser.cookie } });
  return res.status === 200 ? (res.json.agents as Array<{ agent_id: string }>).map((a) => a.agent_id) : [`(GET /people/me/agents answered ${res.status})`];
}

// ---- the checks every moment of an approval gets ------------------------------------------------

interface ApprovalCeremony {
  agent: TestAgent;
  userCode: string;
  personId: string;
  browser: PersonBrowser;
  capabilities: string[];
  /** The form the person sends (with a fresh proof of presence when one is needed). */
  form: () => Promise<Record<string, string | string[]>>;
}

/**
 * After the faulted decision: its answer was a clear 503 page; with Redis back the agent executes
 * nothing while the approval is open or half-written, and an open one still shows under its code;
 * and the person doing it again (the approval page if the code still shows it, else the same form
 * sent again) finishes it: `done`, executing, and in the person's own list.
 */
async function checkApprovalAfterFault(where: string, ceremony: ApprovalCeremony, answer: PageAnswer, sentForm: Record<string, string | string[]>) {
  const { agent, personId, browser, capabilities } = ceremony;
  const before = await approvalState(agent, personId, capabilities);
  // A decision whose only failure came after it was made (keeping the session) stands, and the
  // person is told it was approved: then it must be done, whole, at once.
  if (answer.status === 200 && saidApproved(answer)) {
    expect.soft(before.state, `${where}: the page said approved, but the approval is ${before.state}: ${before.detail}`).toBe('done');
    expect.soft(await executesAny(agent, capabilities), `${where}: said approved, yet execute refuses`).toEqual(capabilities.map(() => 200));
    return;
  }
  expect.soft(answer.status, `${where}: the decision answered ${answer.status} ${answer.headers.get('content-type')}: ${answer.text.slice(0, 300)}`).toBe(503);
  softClearPage(where, answer);
  const executed = await executesAny(agent, capabilities);
  if (before.state === 'open' || before.state === 'half') {
    expect.soft(executed.filter((s) => s === 200), `${where}: the agent executed while the approval was ${before.state}: ${before.detail}`).toEqual([]);
  }
  if (before.state === 'open') {
    const reopened = await browser.request('GET', `/device?user_code=${encodeURIComponent(ceremony.userCode)}`);
    expect.soft(reopened.text.includes('Allow this agent?'), `${where}: the approval is open but its code does not show it (${reopened.status})`).toBe(true);
  }
  // The person does it again: the approval page while the code still shows it, else the same form.
  const page = await browser.request('GET', `/device?user_code=${encodeURIComponent(ceremony.userCode)}`);
  const again = page.status === 200 && page.text.includes('Allow this agent?')
    ? await browser.request('POST', '/device/decision', await ceremony.form())
    : await browser.request('POST', '/device/decision', sentForm);
  const after = await approvalState(agent, personId, capabilities);
  const executes = await executesAny(agent, capabilities);
  const sees = (await agentsThePersonSees(browser)).includes(agent.id);
  const finished = after.state === 'done' && executes.every((s) => s === 200) && sees;
  expect.soft(finished, `${where}: doing it again (${again.status} "${alertOf(again) ?? 'approved'}") did not finish the approval: it is ${after.state} `
    + `(was ${before.state} before); execute answers ${executes.join(',')}; the person sees it in their agents: ${sees}; ${after.detail}`).toBe(true);
}

const alertOf = (page: PageAnswer) => /<p class="error" role="alert">([^<]*)<\/p>/.exec(page.text)?.[1];

/** expectClearPage, softly, with where it happened. */
function softClearPage(where: string, answer: PageAnswer): void {
  try {
    expectClearPage(answer);
  } catch (error) {
    expect.soft(false, `${where}: not a clear page: ${(error as Error).message.split('\n')[0]}`).toBe(true);
  }
}

/** A new person, signed in with the dev sign-in, and a delegated agent of a new host waiting for them. */
async function approvalCeremony(capabilities: string[], presence?: SoftwarePasskey): Promise<ApprovalCeremony & { page: PageAnswer }> {
  const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities });
  expect(res.json.status).toBe('pending');
  const userCode = res.json.approval.user_code as string;
  const name = `Fault ${++people}`;
  const { browser, page: first } = await signedInBrowser(server.baseUrl, name);
  let page = first;
  if (presence) expect((await addPasskey(browser, origin, presence)).status).toBe(303);
  page = await browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
  expect(page.status, page.text.slice(0, 800)).toBe(200);
  const form = async () => {
    const current = await browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
    return presence ? presenceDecisionForm(current, browser, userCode, origin, presence) : decisionForm(current, browser, 'approve', userCode);
  };
  return { agent: agent!, userCode, personId: `dev|${name}`, browser, capabilities, form, page };
}

// ---- the tests -----------------------------------------------------------------------------------

describe('Redis failing at each moment of a decision on the approval page', () => {
  it('cut before or after each Redis command of the decision POST: a clear 503 page, nothing half-approved executes, and doing it again finishes it', async () => {
    const moments = await momentsOf(async () => {
      const ceremony = await approvalCeremony(['echo']);
      proxy.record();
      expect(saidApproved(await ceremony.browser.request('POST', '/device/decision', decisionForm(ceremony.page, ceremony.browser, 'approve', ceremony.userCode)))).toBe(true);
    });
    expect(moments.length).toBeGreaterThan(8);
    for (const moment of moments) {
      for (const kind of ['cut-before', 'cut-after'] as const) {
        const ceremony = await approvalCeremony(['echo']);
        const form = decisionForm(ceremony.page, ceremony.browser, 'approve', ceremony.userCode);
        const { answer, fired } = await withFault(kind, moment, () => ceremony.browser.request('POST', '/device/decision', form));
        const where = describeMoment(moment, kind);
        expect(fired, `${where}: the fault never fired`).toBe(true);
        await checkApprovalAfterFault(where, ceremony, answer, form);
      }
    }
  }, 120_000);

  it('frozen at the moments that matter (reading the session, writing the approval, linking the host, keeping the session): a 503 page, not a hang, and the late write authorizes nothing until the person finishes', async () => {
    const moments: Moment[] = [
      { signature: 'GET psession:{}', nth: 1 },
      { signature: 'agentgateCasAgent {}', nth: 1 },
      { signature: 'agentgateUpdateHost host:{}', nth: 1 },
      { signature: 'agentgateCasAgent {}', nth: 2 },
      { signature: 'SET psession:{}', nth: 1 },
    ];
    for (const moment of moments) {
      const ceremony = await approvalCeremony(['echo']);
      const form = decisionForm(ceremony.page, ceremony.browser, 'approve', ceremony.userCode);
      const { answer, fired } = await withFault('freeze', moment, () => ceremony.browser.request('POST', '/device/decision', form));
      const where = describeMoment(moment, 'freeze');
      expect(fired, `${where}: the fault never fired`).toBe(true);
      await checkApprovalAfterFault(where, ceremony, answer, form);
    }
  }, 60_000);

  it('cut before or after each Redis command of opening the approval (GET /device with the code): a clear 503 page, and the approval is still open and shows again', async () => {
    const moments = await momentsOf(async () => {
      const ceremony = await approvalCeremony(['echo']);
      proxy.record();
      expect((await ceremony.browser.request('GET', `/device?user_code=${ceremony.userCode}`)).status).toBe(200);
    });
    expect(moments.some((m) => m.signature.startsWith('GET ucode'))).toBe(true);
    for (const moment of moments) {
      for (const kind of ['cut-before', 'cut-after'] as const) {
        const ceremony = await approvalCeremony(['echo']);
        const { answer, fired } = await withFault(kind, moment, () => ceremony.browser.request('GET', `/device?user_code=${ceremony.userCode}`));
        const where = `opening the approval: ${describeMoment(moment, kind)}`;
        expect(fired, `${where}: the fault never fired`).toBe(true);
        expect.soft(answer.status, `${where}: GET /device answered ${answer.status}: ${answer.text.slice(0, 300)}`).toBe(503);
        softClearPage(where, answer);
        const state = await approvalState(ceremony.agent, ceremony.personId, ceremony.capabilities);
        expect.soft(state.state, `${where}: ${state.detail}`).toBe('open');
        expect.soft((await executesAny(ceremony.agent, ceremony.capabilities)).filter((s) => s === 200), where).toEqual([]);
        const again = await ceremony.browser.request('GET', `/device?user_code=${ceremony.userCode}`);
        expect.soft(again.text.includes('Allow this agent?'), `${where}: the approval does not show again (${again.status} "${alertOf(again)}")`).toBe(true);
      }
    }
  }, 60_000);

  it('cut before or after each Redis command of a decision proven with a passkey: a clear 503 page, the presence capability never executes half-approved, and doing it again finishes it', async () => {
    const capabilities = ['echo', 'transfer_money'];
    const moments = await momentsOf(async () => {
      const passkey = new SoftwarePasskey();
      const ceremony = await approvalCeremony(capabilities, passkey);
      const form = presenceDecisionForm(ceremony.page, ceremony.browser, ceremony.userCode, origin, passkey);
      proxy.record();
      const decided = await ceremony.browser.request('POST', '/device/decision', form);
      expect(saidApproved(decided), decided.text.slice(-600)).toBe(true);
    });
    expect(moments.some((m) => m.signature.startsWith('agentgateUpdatePasskey'))).toBe(true);
    for (const moment of moments) {
      for (const kind of ['cut-before', 'cut-after'] as const) {
        const passkey = new SoftwarePasskey();
        const ceremony = await approvalCeremony(capabilities, passkey);
        const form = presenceDecisionForm(ceremony.page, ceremony.browser, ceremony.userCode, origin, passkey);
        const { answer, fired } = await withFault(kind, moment, () => ceremony.browser.request('POST', '/device/decision', form));
        const where = `presence: ${describeMoment(moment, kind)}`;
        expect(fired, `${where}: the fault never fired`).toBe(true);
        await checkApprovalAfterFault(where, ceremony, answer, form);
      }
    }
  }, 120_000);
});

describe('Redis failing at each moment of adding a passkey', () => {
  /**
   * After the faulted POST /passkeys: a clear 503 page; with Redis back every stored passkey is
   * whole, none the person had is lost, and the new one is there or not at all; adding it again
   * ends with it there once, and it proves presence for an approval.
   */
  async function checkPasskeyAfterFault(where: string, browser: PersonBrowser, personId: string, had: SoftwarePasskey[], added: SoftwarePasskey, answer: PageAnswer) {
    // A passkey whose only failure came after it was stored (keeping the session) stands, and the
    // person is sent on as for any addition: then it must be stored, whole.
    const stood = answer.status === 303;
    if (!stood) {
      expect.soft(answer.status, `${where}: POST /passkeys answered ${answer.status}: ${answer.text.slice(0, 300)}`).toBe(503);
      softClearPage(where, answer);
    }
    let stored: string[] = [];
    try {
      stored = (await listPasskeys({ store: direct }, personId)).map((p) => p.id);
    } catch (error) {
      expect.soft(false, `${where}: a stored passkey does not parse: ${(error as Error).message}`).toBe(true);
    }
    if (stood) expect.soft(stored, `${where}: POST /passkeys sent the person on, but the passkey is not stored`).toContain(added.id);
    for (const passkey of had) expect.soft(stored, `${where}: a passkey the person had is gone`).toContain(passkey.id);
    expect.soft(stored.filter((id) => ![...had, added].some((p) => p.id === id)), `${where}: a passkey nobody added is stored`).toEqual([]);
    // Again, as the person would: the page asks for one of the passkeys they hold now.
    const holding = [...had, added].filter((p) => stored.includes(p.id));
    const retried = await addPasskey(browser, origin, added, holding[0]);
    const exists = retried.status === 400 && alertOf(retried) === 'This passkey is yours already.';
    expect.soft(retried.status === 303 || (exists && stored.includes(added.id)), `${where}: adding it again answered ${retried.status} "${alertOf(retried)}"`).toBe(true);
    const now = (await listPasskeys({ store: direct }, personId)).map((p) => p.id).sort();
    expect.soft(now, `${where}: after adding it again`).toEqual([...had, added].map((p) => p.id).sort());
    // The new passkey works: it proves presence for an approval.
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['transfer_money'] });
    const userCode = res.json.approval.user_code as string;
    const page = await browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
    const decided = await browser.request('POST', '/device/decision', presenceDecisionForm(page, browser, userCode, origin, added));
    expect.soft(saidApproved(decided), `${where}: the added passkey did not prove presence: ${decided.status} "${alertOf(decided)}"`).toBe(true);
    expect.soft((await c.execute(agent!, 'transfer_money', EXECUTE.transfer_money)).status, `${where}: approved with the new passkey, yet execute refused`).toBe(200);
  }

  for (const variant of ['the first passkey (credentials entered just now)', 'a further passkey (proven with one the person holds)'] as const) {
    it(`${variant}: cut before or after each Redis command of POST /passkeys: a clear 503 page, no passkey lost or half-stored, and adding it again works`, async () => {
      const further = variant.startsWith('a further');
      const setUp = async () => {
        const name = `Passkey fault ${++people}`;
        const { browser } = await signedInBrowser(server.baseUrl, name);
        const had: SoftwarePasskey[] = [];
        if (further) {
          had.push(new SoftwarePasskey());
          expect((await addPasskey(browser, origin, had[0]!)).status).toBe(303);
        }
        const added = new SoftwarePasskey();
        const { form } = await passkeyForm(browser, origin, added, had[0]);
        return { browser, personId: `dev|${name}`, had, added, form };
      };
      const moments = await momentsOf(async () => {
        const { browser, form } = await setUp();
        proxy.record();
        expect((await browser.request('POST', '/passkeys', form)).status).toBe(303);
      });
      expect(moments.some((m) => m.signature.startsWith('agentgateAddPasskey'))).toBe(true);
      for (const moment of moments) {
        for (const kind of ['cut-before', 'cut-after'] as const) {
          const { browser, personId, had, added, form } = await setUp();
          const { answer, fired } = await withFault(kind, moment, () => browser.request('POST', '/passkeys', form));
          const where = `${further ? 'further' : 'first'} passkey: ${describeMoment(moment, kind)}`;
          expect(fired, `${where}: the fault never fired`).toBe(true);
          await checkPasskeyAfterFault(where, browser, personId, had, added, answer);
        }
      }
    }, 90_000);
  }
});

describe('Redis failing at each moment of the sign-in callback', () => {
  /** A browser sent to the provider and back: the callback path it arrives at, not yet requested. */
  async function atCallback(returnTo: string): Promise<{ browser: PersonBrowser; callback: string }> {
    const browser = new PersonBrowser(server.baseUrl);
    const signInPage = await browser.request('GET', `/signin?return_to=${encodeURIComponent(returnTo)}`);
    const startPath = /href="(\/signin\/start[^"]*)"/.exec(signInPage.text)![1]!.replaceAll('&amp;', '&');
    const toProvider = await browser.request('GET', startPath);
    expect(toProvider.status).toBe(303);
    const callback = await signInHeadless(toProvider.headers.get('location')!, 'alice');
    return { browser, callback: `${callback.pathname}${callback.search}` };
  }

  it('cut before or after each Redis command of GET /signin/callback: a clear 503 page, nobody signed in, the callback cannot be replayed, and signing in again works', async () => {
    const { res } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    const returnTo = `/device?user_code=${res.json.approval.user_code}`;
    const moments = await momentsOf(async () => {
      const { browser, callback } = await atCallback(returnTo);
      proxy.record();
      const back = await browser.request('GET', callback);
      expect(back.status).toBe(303);
      expect(back.headers.get('location')).toBe(returnTo);
    });
    expect(moments.some((m) => m.signature === 'SET psession:{}')).toBe(true);
    for (const moment of moments) {
      for (const kind of ['cut-before', 'cut-after', 'freeze'] as const) {
        const { browser, callback } = await atCallback(returnTo);
        const { answer, fired } = await withFault(kind, moment, () => browser.request('GET', callback));
        const where = `sign-in callback: ${describeMoment(moment, kind)}`;
        expect(fired, `${where}: the fault never fired`).toBe(true);
        expect.soft(answer.status, `${where}: the callback answered ${answer.status}: ${answer.text.slice(0, 300)}`).toBe(503);
        softClearPage(where, answer);
        // Nobody is signed in: not this browser, and not whoever replays the callback.
        const device = await browser.request('GET', returnTo);
        expect.soft(device.status, `${where}: the browser is signed in after a failed callback`).toBe(303);
        expect.soft(device.headers.get('location') ?? '', where).toMatch(/^\/signin\?return_to=/);
        const replayed = await browser.request('GET', callback);
        expect.soft(replayed.status, `${where}: the callback was accepted again`).toBe(400);
        const elsewhere = new PersonBrowser(server.baseUrl);
        expect.soft((await elsewhere.request('GET', callback)).status, `${where}: the callback signed in another browser`).toBe(400);
        // Signing in again works, and lands on the approval.
        const again = await atCallback(returnTo);
        const back = await again.browser.request('GET', again.callback);
        expect.soft(back.status, `${where}: signing in again answered ${back.status}`).toBe(303);
        const landed = await again.browser.request('GET', returnTo);
        expect.soft(landed.text.includes('Allow this agent?') && landed.text.includes('signed in as Alice Example'), `${where}: signing in again did not land on the approval`).toBe(true);
      }
    }
  }, 60_000);
});

describe('Redis down for a whole ceremony', () => {
  it('with Redis unreachable, every page of the ceremonies answers a clear 503 page (or works without Redis), and nothing is written', async () => {
    const passkey = new SoftwarePasskey();
    const ceremony = await approvalCeremony(['echo', 'transfer_money'], passkey);
    const form = presenceDecisionForm(ceremony.page, ceremony.browser, ceremony.userCode, origin, passkey);
    const { form: addition } = await passkeyForm(ceremony.browser, origin, new SoftwarePasskey(), passkey);
    const stranger = new PersonBrowser(server.baseUrl);
    proxy.cutNow();
    const answers: Array<[string, PageAnswer]> = [];
    try {
      answers.push(['GET /device (signed in)', await ceremony.browser.request('GET', '/device')]);
      answers.push(['GET /device?user_code (signed in)', await ceremony.browser.request('GET', `/device?user_code=${ceremony.userCode}`)]);
      answers.push(['POST /device/decision', await ceremony.browser.request('POST', '/device/decision', form)]);
      answers.push(['GET /passkeys/new', await ceremony.browser.request('GET', '/passkeys/new')]);
      answers.push(['POST /passkeys', await ceremony.browser.request('POST', '/passkeys', addition)]);
      const signIn = await stranger.request('GET', '/signin?return_to=%2Fdevice');
      // The sign-in form needs nothing stored (its state rides in a sealed cookie): it works.
      expect.soft(signIn.status, 'GET /signin without Redis').toBe(200);
      answers.push(['POST /signin/dev', await stranger.request('POST', '/signin/dev', { csrf: stranger.csrfOf(signIn.text, '/signin/dev'), name: 'Nobody', return_to: '/device' })]);
    } finally {
      await restore();
    }
    for (const [what, answer] of answers) {
      expect.soft(answer.status, `${what} answered ${answer.status} ${answer.headers.get('content-type')}: ${answer.text.slice(0, 200)}`).toBe(503);
      softClearPage(`Redis down: ${what}`, answer);
    }
    const state = await approvalState(ceremony.agent, ceremony.personId, ceremony.capabilities);
    expect(state.state, state.detail).toBe('open');
    expect((await listPasskeys({ store: direct }, ceremony.personId)).map((p) => p.id)).toEqual([passkey.id]);
    expect((await stranger.request('GET', '/device')).status).toBe(303);
  }, 30_000);
});
