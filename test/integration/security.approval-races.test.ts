// Races of the approval flow, each run many times against real Redis and named after the guarantee
// it protects: two tabs (or two people, or the page and the people's API) deciding one approval,
// an approval racing each door of revocation, adding a passkey racing a presence approval (and
// racing another addition), and the clean-up job on two instances racing itself and an approval.
// Each round starts both sides with a head start of 0-6 ms for one of them (swept over the rounds),
// so which side the store lets win varies from round to round; the guarantee must hold either way.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeStalePending } from '../../src/services/cleanup.ts';
import {
  ALREADY_DECIDED, addPasskey, decisionForm, openApproval, passkeyForm, presenceDecisionForm, saidApproved, saidDenied, signedInBrowser, type PageAnswer,
} from '../support/approval-pages.ts';
import { Client, http, type HttpResult, type TestAgent } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import type { PersonBrowser } from '../support/person-browser.ts';
import { startTestServer, twoInstancesForBlock, type TestServer } from '../support/server.ts';
import { SoftwarePasskey } from '../support/software-passkey.ts';

const PAGE_ENV = {
  INSECURE_DEV_SIGN_IN: 'true',
  // Every round looks a right code up from this one address; the per-address budget is not what these tests are about.
  RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR: '1000000',
  AGENTS_PER_HOST_MAX: '100000',
};

/**
 * Starts both sides of a race, one `round % 7` milliseconds after the other (the first leads on
 * even rounds, the second on odd ones): the two paths differ in length, so sweeping the head start
 * lets each side win in some rounds. Nothing waits for anything to happen.
 */
async function together<A, B>(round: number, first: () => Promise<A>, second: () => Promise<B>): Promise<[A, B]> {
  const headStartMs = round % 7;
  const lead = round % 2 === 0 ? 'first' : 'second';
  const a = lead === 'first' ? first() : delayed(headStartMs, first);
  const b = lead === 'second' ? second() : delayed(headStartMs, second);
  return Promise.all([a, b]);
}

function delayed<T>(ms: number, start: () => Promise<T>): Promise<T> {
  return ms === 0 ? start() : new Promise<void>((resolve) => setTimeout(resolve, ms)).then(start);
}

/** The page's main part, for failure messages. */
const mainOf = (page: PageAnswer) => page.text.slice(page.text.indexOf('<main>'), page.text.indexOf('</main>') + 7);
/** The message of a refusal page. */
const alertOf = (page: PageAnswer) => /<p class="error" role="alert">([^<]*)<\/p>/.exec(page.text)?.[1] ?? mainOf(page);

describe('deciding one approval twice at once (Redis)', () => {
  let server: TestServer;
  let c: Client;
  let person = 0;

  beforeAll(async () => {
    server = await startTestServer({ store: 'redis', env: PAGE_ENV });
    c = new Client(server);
  });
  afterAll(() => server.close());

  /** A delegated agent of a new host, waiting for a person: the registration is the approval. */
  async function waitingRegistration() {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    return { agent: agent!, userCode: res.json.approval.user_code as string };
  }

  /**
   * After one approve and one deny raced: exactly one was done, the store agrees with the winner,
   * and the loser's page says the request was already decided (or, to another person than the
   * winner, that it is no longer open: who decided is not theirs to know). A loser told anything
   * else is collected in `untold`, so one run lists every round where that happened.
   */
  async function expectOneWinner(round: number, agent: TestAgent, approved: PageAnswer, denied: PageAnswer, approverId: string, untold: string[], twoPeople = false) {
    const context = `round ${round}: approve ${approved.status}, deny ${denied.status}\n${mainOf(approved)}\n${mainOf(denied)}`;
    const approveWon = saidApproved(approved);
    const denyWon = saidDenied(denied);
    expect(approveWon !== denyWon, context).toBe(true);
    const loser = approveWon ? denied : approved;
    expect(loser.status, context).toBeGreaterThanOrEqual(400);
    expect(loser.status, context).toBeLessThan(500);
    const toldDecided = loser.status === 400 && loser.text.includes(ALREADY_DECIDED);
    const toldClosed = twoPeople && loser.status === 404 && alertOf(loser) === 'This approval is no longer open.';
    if (!toldDecided && !toldClosed) {
      untold.push(`round ${round}: the ${approveWon ? 'denying' : 'approving'} loser got ${loser.status} "${alertOf(loser)}"`);
    }
    const stored = (await server.store.getAgent(agent.id))!;
    if (approveWon) {
      expect(stored.agent.status, context).toBe('active');
      expect(stored.agent.userId).toBe(approverId);
      expect(stored.grants.map((g) => `${g.capability}:${g.status}`)).toEqual(['echo:active']);
      expect((await c.execute(agent, 'echo', { round })).status, context).toBe(200);
    } else {
      expect(stored.agent.status, context).toBe('rejected');
      expect(stored.grants.map((g) => `${g.capability}:${g.status}`)).toEqual(['echo:denied']);
      expect((await c.execute(agent, 'echo', { round })).status, context).toBe(403);
    }
    return approveWon;
  }

  it('two tabs of one person approving and denying one approval: exactly one decision wins, the other tab is told', async () => {
    const wins = { approve: 0, deny: 0 };
    const untold: string[] = [];
    for (let round = 0; round < 40; round++) {
      const { agent, userCode } = await waitingRegistration();
      const name = `Tabs ${++person}`;
      const { browser, page: tabA } = await signedInBrowser(server.baseUrl, name, userCode);
      const tabB = await openApproval(browser, userCode);
      const [approved, denied] = await together(
        round,
        () => browser.request('POST', '/device/decision', decisionForm(tabA, browser, 'approve', userCode)),
        () => browser.request('POST', '/device/decision', decisionForm(tabB, browser, 'deny', userCode)),
      );
      wins[(await expectOneWinner(round, agent, approved, denied, `dev|${name}`, untold)) ? 'approve' : 'deny']++;
    }
    console.info('two tabs, winners over 40 rounds:', wins);
    expect(untold, 'every loser is told the request was already decided').toEqual([]);
  }, 60_000);

  it('two people approving and denying one approval: exactly one decision wins, the other person is told', async () => {
    const wins = { approve: 0, deny: 0 };
    const untold: string[] = [];
    for (let round = 0; round < 40; round++) {
      const { agent, userCode } = await waitingRegistration();
      const alice = await signedInBrowser(server.baseUrl, `Alice ${++person}`, userCode);
      const bob = await signedInBrowser(server.baseUrl, `Bob ${person}`, userCode);
      const [approved, denied] = await together(
        round,
        () => alice.browser.request('POST', '/device/decision', decisionForm(alice.page, alice.browser, 'approve', userCode)),
        () => bob.browser.request('POST', '/device/decision', decisionForm(bob.page, bob.browser, 'deny', userCode)),
      );
      const approveWon = await expectOneWinner(round, agent, approved, denied, `dev|Alice ${person}`, untold, true);
      wins[approveWon ? 'approve' : 'deny']++;
      // Whoever won, the host is the winner's only if the approval won; the loser never got it.
      const host = await server.store.findHostByThumbprint(agent.host.thumbprint);
      expect(host!.userId).toBe(approveWon ? `dev|Alice ${person}` : undefined);
    }
    console.info('two people, winners over 40 rounds:', wins);
    expect(untold, 'every loser is told the request was already decided').toEqual([]);
  }, 60_000);

  it("the page approving while the people's API denies (and the reverse): exactly one decision wins, the other is told", async () => {
    for (let round = 0; round < 30; round++) {
      const name = `Both doors ${++person}`;
      const { agent, userCode, browser } = await linkedAgentAskingForMore(name);
      const page = await openApproval(browser, userCode);
      const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
      const pageVerdict = round % 2 === 0 ? 'approve' : 'deny';
      const apiVerdict = pageVerdict === 'approve' ? 'deny' : 'approve';
      const [onPage, viaApi] = await together(
        round,
        () => browser.request('POST', '/device/decision', decisionForm(page, browser, pageVerdict, userCode)),
        () => personPost(browser, `/people/me/approvals/${approvalId}`, { verdict: apiVerdict }),
      );
      const context = `round ${round}: page ${pageVerdict} ${onPage.status}, api ${apiVerdict} ${viaApi.status} ${viaApi.text}\n${onPage.text.slice(-600)}`;
      const pageWon = pageVerdict === 'approve' ? saidApproved(onPage) : saidDenied(onPage);
      const apiWon = viaApi.status === 200;
      expect(pageWon !== apiWon, context).toBe(true);
      if (apiWon) {
        expect(onPage.status, context).toBe(400);
        expect(onPage.text, context).toContain(ALREADY_DECIDED);
      } else {
        // The API's loser: the approval is no longer open (404), or was decided under it (400); told either way.
        expect([400, 404], context).toContain(viaApi.status);
        expect(viaApi.json?.error, context).toMatch(/^(not_found|invalid_request)$/);
      }
      const approvedWon = (pageWon && pageVerdict === 'approve') || (apiWon && apiVerdict === 'approve');
      const stored = (await server.store.getAgent(agent.id))!;
      expect(stored.agent.status).toBe('active');
      expect(stored.agent.approval).toBeUndefined();
      expect(stored.grants.find((g) => g.capability === 'weather_lookup')!.status, context).toBe(approvedWon ? 'active' : 'denied');
      expect((await c.execute(agent, 'weather_lookup', { city: 'Lyon' })).status, context).toBe(approvedWon ? 200 : 403);
    }
  }, 60_000);

  it('an approval racing a revocation (by the host, the admin or the person) ends revoked: no active grant, execute refused', async () => {
    const doors = ['host', 'admin', 'person'] as const;
    const approvers = ['page', 'api'] as const;
    for (let round = 0; round < 36; round++) {
      const door = doors[round % 3]!;
      const approver = approvers[Math.floor(round / 3) % 2]!;
      const name = `Revoke race ${++person}`;
      const { agent, userCode, browser } = await linkedAgentAskingForMore(name);
      const page = await openApproval(browser, userCode);
      const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
      const approve = () => approver === 'page'
        ? browser.request('POST', '/device/decision', decisionForm(page, browser, 'approve', userCode))
        : personPost(browser, `/people/me/approvals/${approvalId}`, { verdict: 'approve' });
      const revoke = () => revokeThrough(door, agent, browser);
      const [revoked] = await together(round, revoke, approve);
      const context = `round ${round}: ${approver} approval vs ${door} revocation: ${revoked.status} ${revoked.text}`;
      expect(revoked.status, context).toBe(200);
      const stored = (await server.store.getAgent(agent.id))!;
      expect(stored.agent.status, context).toBe('revoked');
      expect(stored.grants.filter((g) => g.status === 'active' || g.status === 'pending'), context).toEqual([]);
      expect((await c.execute(agent, 'echo', {})).status, context).toBe(403);
      expect((await c.execute(agent, 'weather_lookup', { city: 'Oslo' })).status, context).toBe(403);
    }
  }, 60_000);

  it("a registration's approval racing the admin's revocation ends revoked, and the host gets nothing from it", async () => {
    for (let round = 0; round < 30; round++) {
      const { agent, userCode } = await waitingRegistration();
      const { browser, page } = await signedInBrowser(server.baseUrl, `Registration race ${++person}`, userCode);
      const [revoked] = await together(
        round,
        () => c.admin('POST', `/admin/agents/${agent.id}/revoke`),
        () => browser.request('POST', '/device/decision', decisionForm(page, browser, 'approve', userCode)),
      );
      expect(revoked.status).toBe(200);
      const stored = (await server.store.getAgent(agent.id))!;
      expect(stored.agent.status, `round ${round}`).toBe('revoked');
      expect(stored.grants.filter((g) => g.status === 'active' || g.status === 'pending')).toEqual([]);
      expect((await c.execute(agent, 'echo', {})).status).toBe(403);
    }
  }, 60_000);

  /**
   * A person's host (linked by the admin to them) with an active agent holding echo, which asked
   * for weather_lookup: the open approval any door can decide and every door can revoke.
   */
  async function linkedAgentAskingForMore(name: string) {
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: `dev|${name}` });
    expect(created.status).toBe(201);
    const { res, agent } = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    expect(res.json.status).toBe('active');
    const asked = await c.requestCapability(agent!, { capabilities: ['weather_lookup'] });
    expect(asked.json.status, asked.text).toBe('pending');
    const { browser } = await signedInBrowser(server.baseUrl, name);
    return { agent: agent!, userCode: asked.json.approval.user_code as string, browser };
  }

  function revokeThrough(door: 'host' | 'admin' | 'person', agent: TestAgent, browser: PersonBrowser): Promise<HttpResult> {
    if (door === 'host') return c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
    if (door === 'admin') return c.admin('POST', `/admin/agents/${agent.id}/revoke`);
    return personPost(browser, `/people/me/agents/${agent.id}/revoke`, {});
  }

  /** A POST to the people's API with the browser's session and its CSRF token (GET /people/me gives it). */
  async function personPost(browser: PersonBrowser, path: string, json: unknown): Promise<HttpResult> {
    const me = await http('GET', c.url('/people/me'), { headers: { cookie: browser.cookie } });
    return http('POST', c.url(path), { json, headers: { cookie: browser.cookie, 'x-csrf-token': me.json.csrf_token } });
  }
});

describe('passkey ceremonies racing (Redis)', () => {
  let server: TestServer;
  let c: Client;
  let origin: string;
  let person = 0;

  beforeAll(async () => {
    server = await startTestServer({ store: 'redis', issuerHost: 'localhost', env: PAGE_ENV });
    c = new Client(server);
    origin = server.baseUrl;
  });
  afterAll(() => server.close());

  /** A person signed in moments ago (the dev sign-in counts as credentials entered now) holding one passkey. */
  async function personWithPasskey() {
    const name = `Passkey race ${++person}`;
    const { browser } = await signedInBrowser(server.baseUrl, name);
    const first = new SoftwarePasskey();
    const added = await addPasskey(browser, origin, first);
    expect(added.status, added.text.slice(0, 1000)).toBe(303);
    return { name, personId: `dev|${name}`, browser, first };
  }

  /** Adds `passkey` for a person who holds `existing`, proving it. */
  async function addPasskeyWithProof(browser: PersonBrowser, passkey: SoftwarePasskey, existing: SoftwarePasskey) {
    return addPasskey(browser, origin, passkey, existing);
  }

  const passkeyIds = async (personId: string) => (await server.store.listPasskeys(personId)).map((p) => p.id).sort();

  it('adding a passkey racing a presence approval (in two tabs, each with one of two passkeys): both complete exactly once, and neither can be sent again', async () => {
    for (let round = 0; round < 24; round++) {
      const { personId, browser, first } = await personWithPasskey();
      const phone = new SoftwarePasskey();
      expect((await addPasskeyWithProof(browser, phone, first)).status).toBe(303);
      const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo', 'transfer_money'] });
      expect(res.json.status).toBe('pending');
      const userCode = res.json.approval.user_code as string;
      // One tab opens "add a passkey", the other the approval; each page holds its own ceremony's challenge.
      const { form: addition, registrationOptions } = await passkeyForm(browser, origin, new SoftwarePasskey(), first);
      const added3 = JSON.parse(addition.response!).id as string;
      const approvalPage = await openApproval(browser, userCode);
      const decision = presenceDecisionForm(approvalPage, browser, userCode, origin, phone);
      const [added, decided] = await together(
        round,
        () => browser.request('POST', '/passkeys', addition),
        () => browser.request('POST', '/device/decision', decision),
      );
      const context = `round ${round}: add ${added.status} ${alertOf(added)}, decide ${decided.status} ${alertOf(decided)}`;
      expect(added.status, context).toBe(303);
      expect(saidApproved(decided), context).toBe(true);
      expect(await passkeyIds(personId), context).toEqual([first.id, phone.id, added3].sort());
      const stored = (await server.store.getAgent(agent!.id))!;
      expect(stored.grants.map((g) => `${g.capability}:${g.status}`).sort()).toEqual(['echo:active', 'transfer_money:active']);
      expect((await c.execute(agent!, 'transfer_money', { amount: 5, currency: 'EUR' })).status, context).toBe(200);
      // Sent again, neither does anything: the addition's proof is spent, and so is the approval.
      const intruder = new SoftwarePasskey();
      const replayed = await browser.request('POST', '/passkeys', { ...addition, response: JSON.stringify(intruder.register(registrationOptions, origin)) });
      expect(replayed.status, `${context}; replayed addition ${replayed.status} ${alertOf(replayed)}`).toBe(403);
      expect(await passkeyIds(personId)).toEqual([first.id, phone.id, added3].sort());
      const again = await browser.request('POST', '/device/decision', decision);
      expect(again.status, context).toBe(400);
      expect(again.text).toContain(ALREADY_DECIDED);
    }
  }, 90_000);

  it('one proof of an existing passkey adds at most one passkey, even when two additions race', async () => {
    const problems: string[] = [];
    for (let round = 0; round < 24; round++) {
      const { personId, browser, first } = await personWithPasskey();
      const mine = new SoftwarePasskey();
      const intruder = new SoftwarePasskey();
      const { form, registrationOptions } = await passkeyForm(browser, origin, mine, first);
      // The person's addition, and the same proof with another authenticator's answer to the same
      // page (an agent driving the browser sees both), sent together.
      const intruding = { ...form, response: JSON.stringify(intruder.register(registrationOptions, origin)) };
      const [a, b] = await together(round, () => browser.request('POST', '/passkeys', form), () => browser.request('POST', '/passkeys', intruding));
      const ids = await passkeyIds(personId);
      if (ids.length !== 2) problems.push(`round ${round}: POST /passkeys answered ${a.status} and ${b.status}; the person now holds ${ids.length} passkeys (${ids.includes(intruder.id) ? 'the intruder\'s among them' : 'no intruder'})`);
      // Whichever lost was refused with a page, not half-stored.
      for (const res of [a, b]) expect([303, 403]).toContain(res.status);
    }
    expect(problems).toEqual([]);
  }, 60_000);
});

describe('the clean-up on two instances (Redis)', () => {
  const MAX_AGE_SECONDS = 60;
  const [one, two] = twoInstancesForBlock('cleanup-race', { env: { ...PAGE_ENV, PENDING_MAX_AGE_SECONDS: String(MAX_AGE_SECONDS), APPROVAL_EXPIRES_IN_SECONDS: '600' } });
  const c = new Client(one);
  let person = 0;

  const advanceBoth = (ms: number) => {
    one.clock.advance(ms);
    two.clock.advance(ms);
  };
  const cleanBoth = () => Promise.all([removeStalePending(one.app.deps, MAX_AGE_SECONDS * 1000), removeStalePending(two.app.deps, MAX_AGE_SECONDS * 1000)]);

  /** The audit events of `type` about one agent, from the trail both instances write. */
  async function auditEvents(type: string, agentId: string): Promise<unknown[]> {
    await Promise.all([one.app.deps.audit.flush(), two.app.deps.audit.flush()]);
    const res = await c.admin('GET', `/admin/audit?type=${type}&agent_id=${agentId}`);
    expect(res.status).toBe(200);
    return res.json.events;
  }

  it('two instances cleaning at once remove each stale agent and each lapsed approval exactly once', async () => {
    for (let round = 0; round < 20; round++) {
      const stale: TestAgent[] = [];
      for (let i = 0; i < 3; i++) stale.push((await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] })).agent!);
      const asking: TestAgent[] = [];
      for (let i = 0; i < 2; i++) {
        const agent = await c.activeAgent(['echo']);
        expect((await c.requestCapability(agent, { capabilities: ['weather_lookup'] })).json.status).toBe('pending');
        asking.push(agent);
      }
      advanceBoth(601_000);
      const [a, b] = await cleanBoth();
      // A second pass by either finds nothing left of this round.
      const [again] = await cleanBoth();
      const context = `round ${round}: ${JSON.stringify([a, b, again])}`;
      expect(a.agentsRemoved + b.agentsRemoved, context).toBe(stale.length);
      expect(a.approvalsRemoved + b.approvalsRemoved, context).toBe(asking.length);
      expect(again.agentsRemoved + again.approvalsRemoved, context).toBe(0);
      for (const agent of stale) {
        expect(await one.store.getAgent(agent.id)).toBeNull();
        expect(await auditEvents('agent.removed', agent.id), context).toHaveLength(1);
      }
      for (const agent of asking) {
        const stored = (await one.store.getAgent(agent.id))!;
        expect(stored.agent.approval).toBeUndefined();
        expect(stored.grants.map((g) => `${g.capability}:${g.status}`)).toEqual(['echo:active']);
        expect(await auditEvents('approval.lapsed', agent.id), context).toHaveLength(1);
      }
    }
  }, 90_000);

  it('an approval racing the clean-up of its agent: the agent is approved and kept, or removed and the person told; never removed once approved', async () => {
    const outcomes = { approved: 0, removed: 0 };
    for (let round = 0; round < 30; round++) {
      const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
      const userCode = res.json.approval.user_code as string;
      // Older than PENDING_MAX_AGE_SECONDS, while its approval (600 s) is still open.
      advanceBoth(MAX_AGE_SECONDS * 1000 + 1000);
      const { browser, page } = await signedInBrowser(one.baseUrl, `Cleanup race ${++person}`, userCode);
      const [decided, [a, b]] = await together(
        round,
        () => browser.request('POST', '/device/decision', decisionForm(page, browser, 'approve', userCode)),
        cleanBoth,
      );
      const stored = await one.store.getAgent(agent!.id);
      const context = `round ${round}: ${decided.status} ${decided.text.slice(-500)} removed ${a.agentsRemoved}+${b.agentsRemoved}, stored ${stored?.agent.status}`;
      if (saidApproved(decided)) {
        outcomes.approved++;
        expect(stored?.agent.status, context).toBe('active');
        expect(a.agentsRemoved + b.agentsRemoved, context).toBe(0);
        expect((await c.execute(agent!, 'echo', {})).status, context).toBe(200);
      } else {
        outcomes.removed++;
        expect(stored, context).toBeNull();
        expect(a.agentsRemoved + b.agentsRemoved, context).toBe(1);
        expect([400, 404], context).toContain(decided.status);
        expect(decided.text, context).toMatch(/<p class="error" role="alert">[^<]{10,}<\/p>/);
      }
    }
    console.info('approval vs clean-up over 30 rounds:', outcomes);
  }, 90_000);
});
