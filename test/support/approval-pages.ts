// What a person does on the approval pages, as steps the race and fault tests share: open the
// approval a code names, read its decision form, prove presence and add passkeys with a software
// authenticator, and say whether an answer is a page a person can read.
import { expect } from 'vitest';
import type { HttpResult } from './client.ts';
import { PersonBrowser } from './person-browser.ts';
import { dataBlock, SoftwarePasskey } from './software-passkey.ts';

export type PageAnswer = Awaited<ReturnType<PersonBrowser['request']>>;

/** The decision form of an approval page, as the browser would post it (every capability ticked). */
export function decisionForm(page: PageAnswer, browser: PersonBrowser, verdict: 'approve' | 'deny', userCode: string): Record<string, string | string[]> {
  const field = (name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(page.text)?.[1];
  const approvalId = field('approval_id');
  const agentId = field('agent_id');
  if (!approvalId || !agentId) throw new Error(`not an approval page (${page.status}):\n${page.text.slice(0, 2000)}`);
  const capabilities = [...page.text.matchAll(/name="capabilities" value="([^"]+)"[^>]*checked/g)].map((m) => m[1]!);
  return { csrf: browser.csrfOf(page.text, '/device/decision'), agent_id: agentId, approval_id: approvalId, user_code: userCode, verdict, capabilities };
}

/** The approval id an approval page shows. */
export const approvalIdOf = (page: PageAnswer) => /name="approval_id" value="([^"]+)"/.exec(page.text)?.[1];

/** A signed-in browser on the approval page of `userCode`. */
export async function openApproval(browser: PersonBrowser, userCode: string): Promise<PageAnswer> {
  const page = await browser.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
  expect(page.status, page.text.slice(0, 1500)).toBe(200);
  expect(page.text).toContain('Allow this agent?');
  return page;
}

/** A new browser signed in through the dev sign-in as `name`, on the approval page of `userCode` when given. */
export async function signedInBrowser(baseUrl: string, name: string, userCode?: string): Promise<{ browser: PersonBrowser; page: PageAnswer }> {
  const browser = new PersonBrowser(baseUrl);
  const page = await browser.signIn(name, userCode === undefined ? '/device' : `/device?user_code=${encodeURIComponent(userCode)}`);
  expect(page.status, page.text.slice(0, 1500)).toBe(200);
  return { browser, page };
}

/** Whether a page's decision said "decided" (and which way). */
export const saidApproved = (page: PageAnswer) => page.status === 200 && page.text.includes('You approved');
export const saidDenied = (page: PageAnswer) => page.status === 200 && page.text.includes('You denied');
export const ALREADY_DECIDED = 'This request was already decided, in another window or by someone else';

/**
 * A refusal a person can read: an HTML page of ours with the message in words, never JSON, a stack
 * or an internal error; `status` when given.
 */
export function expectClearPage(res: PageAnswer | HttpResult, status?: number): void {
  const context = `${res.status} ${res.headers.get('content-type')}: ${res.text.slice(0, 600)}`;
  if (status !== undefined) expect(res.status, context).toBe(status);
  expect(res.status, context).not.toBe(500);
  expect(res.headers.get('content-type') ?? '', context).toMatch(/^text\/html/);
  expect(res.text, context).toMatch(/<h1>That did not work<\/h1><p class="error" role="alert">[^<]{10,}<\/p>/);
  expect(res.text, context).not.toMatch(/\bat [\w.<>]+ \(|node_modules|\.ts:\d+|internal_error/);
}

/** Adds a passkey through GET /passkeys/new and POST /passkeys, proving `existing` when the person has one. */
export async function addPasskey(browser: PersonBrowser, origin: string, passkey: SoftwarePasskey, existing?: SoftwarePasskey) {
  const { form } = await passkeyForm(browser, origin, passkey, existing);
  return browser.request('POST', '/passkeys', form);
}

/** The form POST /passkeys takes, answered by `passkey` (and proven by `existing`), from a fresh GET /passkeys/new. */
export async function passkeyForm(browser: PersonBrowser, origin: string, passkey: SoftwarePasskey, existing?: SoftwarePasskey) {
  const page = await browser.request('GET', '/passkeys/new?return_to=%2Fdevice');
  expect(page.status, page.text.slice(0, 1500)).toBe(200);
  const registration = dataBlock(page.text, 'passkey-registration-options');
  const proof = dataBlock(page.text, 'passkey-proof-options');
  expect(registration).not.toBeNull();
  if (proof && !existing) throw new Error('the page asks for a proof but the test gave no existing passkey');
  const form: Record<string, string> = {
    csrf: browser.csrfOf(page.text, '/passkeys'),
    return_to: '/device',
    response: JSON.stringify(passkey.register(registration, origin)),
    proof: proof && existing ? JSON.stringify(existing.assert(proof, origin)) : '',
  };
  return { form, registrationOptions: registration, proofOptions: proof };
}

/** The decision form of an approval page that needs presence, with `passkey`'s assertion for the page's challenge. */
export function presenceDecisionForm(page: PageAnswer, browser: PersonBrowser, userCode: string, origin: string, passkey: SoftwarePasskey) {
  const options = dataBlock(page.text, 'presence-options');
  if (!options) throw new Error(`the approval page offers no presence ceremony:\n${page.text.slice(0, 2000)}`);
  return { ...decisionForm(page, browser, 'approve', userCode), webauthn_response: JSON.stringify(passkey.assert(options, origin)) };
}
