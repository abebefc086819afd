// What the consent tests (test/integration/security.consent.test.ts, security.pages.test.ts,
// browser.consent.test.ts) do again and again, over real HTTP: a person's page ceremonies with a
// software passkey (adding one, approving with one), the people's API with the session's CSRF token,
// and reading the audit trail. Each helper answers the raw responses, so a test can say what a
// refusal looked like; none of them asserts anything a test did not ask for.
import { decodeAttestationObject, parseAuthenticatorData } from '@simplewebauthn/server/helpers';
import type { Logger } from '../../src/logger.ts';
import { http, type Client, type HttpResult } from './client.ts';
import { PersonBrowser } from './person-browser.ts';
import { dataBlock, type SoftwarePasskey } from './software-passkey.ts';

export type PageResponse = Awaited<ReturnType<PersonBrowser['request']>>;

/** The approval id the approval page's form carries. */
export function approvalIdOf(pageText: string): string {
  const match = /name="approval_id" value="([^"]+)"/.exec(pageText);
  if (!match) throw new Error(`no approval form on the page:\n${pageText.slice(0, 2000)}`);
  return match[1]!;
}

/** The text a person reads on a page: tags dropped, entities of ours decoded, spacing collapsed. */
export function visibleText(pageText: string): string {
  const body = /<main>([\s\S]*)<\/main>/.exec(pageText)?.[1] ?? pageText;
  return body
    .replace(/<script[\s\S]*?<\/script>/g, ' ')
    // Inline elements run on with the text around them; every other tag separates words.
    .replace(/<\/?(?:code|strong|em|span|a|label)(?:\s[^>]*)?>/g, '')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&#x27;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&')
    .replace(/\s+/g, ' ')
    .trim();
}

/** The checkbox of one capability on the approval page, as markup (to read checked / disabled). */
export function checkboxOf(pageText: string, capability: string): string {
  const match = new RegExp(`<input type="checkbox"[^>]*value="${capability}"[^>]*>`).exec(pageText);
  if (!match) throw new Error(`no checkbox for ${capability} on the page`);
  return match[0];
}

export interface PasskeyAttempt {
  /** GET /passkeys/new (200 with the options, or 303 to a sign-in). */
  page: PageResponse;
  /** POST /passkeys, when the page offered the ceremony. */
  posted?: PageResponse;
}

/**
 * Adds `passkey` on the page as the person's browser would: GET /passkeys/new, then POST /passkeys
 * with the registration answered by `passkey` and, when the page asks for proof, the proof answered
 * by `proofBy` (or no proof when `proofBy` is null: what a session alone can send).
 */
export async function addPasskeyOnPage(
  person: PersonBrowser, origin: string, passkey: SoftwarePasskey, options: { proofBy?: SoftwarePasskey | null; returnTo?: string } = {},
): Promise<PasskeyAttempt> {
  const returnTo = options.returnTo ?? '/device';
  const page = await person.request('GET', `/passkeys/new?return_to=${encodeURIComponent(returnTo)}`);
  if (page.status !== 200) return { page };
  const registration = dataBlock(page.text, 'passkey-registration-options');
  const proofOptions = dataBlock(page.text, 'passkey-proof-options');
  const form: Record<string, string> = {
    csrf: person.csrfOf(page.text, '/passkeys'),
    return_to: returnTo,
    response: JSON.stringify(passkey.register(registration, origin)),
  };
  if (proofOptions && options.proofBy) form.proof = JSON.stringify(options.proofBy.assert(proofOptions, origin));
  const posted = await person.request('POST', '/passkeys', form);
  return { page, posted };
}

export interface PageDecision {
  page: PageResponse;
  decided: PageResponse;
}

/**
 * Opens the approval page for `userCode` and posts a decision on it: `capabilities` ticked, and,
 * when `passkey` is given and the page offers presence options, the assertion bound to this
 * approval (`presenceOptions` replaces the page's: to replay another approval's challenge).
 */
export async function decideOnPage(
  person: PersonBrowser, userCode: string, agentId: string,
  options: { verdict?: 'approve' | 'deny'; capabilities?: string[]; passkey?: SoftwarePasskey; origin?: string; presenceOptions?: unknown } = {},
): Promise<PageDecision> {
  const page = await person.request('GET', `/device?user_code=${encodeURIComponent(userCode)}`);
  if (page.status !== 200) throw new Error(`the approval page answered ${page.status}: ${visibleText(page.text)}`);
  const form: Record<string, string | string[]> = {
    csrf: person.csrfOf(page.text, '/device/decision'),
    agent_id: agentId,
    approval_id: approvalIdOf(page.text),
    user_code: userCode,
    verdict: options.verdict ?? 'approve',
    capabilities: options.capabilities ?? [],
  };
  const presence = options.presenceOptions ?? dataBlock(page.text, 'presence-options');
  if (options.passkey && presence) form.webauthn_response = JSON.stringify(options.passkey.assert(presence as never, options.origin!));
  const decided = await person.request('POST', '/device/decision', form);
  return { page, decided };
}

/**
 * A person signed in through the development sign-in (INSECURE_DEV_SIGN_IN) as `name`, on the
 * server at `baseUrl`: their browser, the page the sign-in landed them on (`returnTo`), and the
 * people's API on their session. A development sign-in makes the person `dev|<name>`.
 */
export async function devSignedIn(baseUrl: string, name: string, returnTo = '/device') {
  const browser = new PersonBrowser(baseUrl);
  const landed = await browser.signIn(name, returnTo);
  return { name, personId: `dev|${name}`, browser, landed, api: new PeopleApi(browser, baseUrl) };
}

/** The people's API with a person's page session: GETs with the cookie, POSTs with the CSRF token too. */
export class PeopleApi {
  readonly #person: PersonBrowser;
  readonly #base: string;
  constructor(person: PersonBrowser, base: string) {
    this.#person = person;
    this.#base = base;
  }

  get(path: string): Promise<HttpResult> {
    return http('GET', `${this.#base}${path}`, { headers: { cookie: this.#person.cookie } });
  }

  /** A POST with the session's CSRF token (read from GET /people/me), or none when `csrf` is null. */
  async post(path: string, json: unknown = {}, csrf?: string | null): Promise<HttpResult> {
    const token = csrf === undefined ? (await this.get('/people/me')).json?.csrf_token : csrf;
    return http('POST', `${this.#base}${path}`, { json, headers: { cookie: this.#person.cookie, ...(token ? { 'x-csrf-token': token } : {}) } });
  }

  /**
   * Removes a passkey as the people's API asks: a first call answers 403 with `assertion_options`,
   * a second carries `by`'s assertion of them. Answers both calls' results.
   */
  async removePasskey(passkeyId: string, by: SoftwarePasskey, origin: string): Promise<{ challenge: HttpResult; removed: HttpResult }> {
    const path = `/people/me/passkeys/${encodeURIComponent(passkeyId)}/remove`;
    const challenge = await this.post(path);
    const options = challenge.json?.assertion_options;
    if (challenge.status !== 403 || !options) return { challenge, removed: challenge };
    return { challenge, removed: await this.post(path, { assertion: by.assert(options, origin) }) };
  }

  async passkeyIds(): Promise<string[]> {
    const res = await this.get('/people/me/passkeys');
    if (res.status !== 200) throw new Error(`GET /people/me/passkeys answered ${res.status} ${res.text}`);
    return (res.json.passkeys as Array<{ passkey_id: string }>).map((p) => p.passkey_id);
  }
}

/** An audit event as GET /admin/audit answers it. */
export type AuditEvent = Record<string, any> & { type: string; actor: string; at: string };

/** Every audit event the query matches, newest first (following next_cursor, bounded). */
export async function auditEvents(c: Client, query: Record<string, string> = {}): Promise<AuditEvent[]> {
  const events: AuditEvent[] = [];
  let cursor: string | null = null;
  for (let i = 0; i < 50; i++) {
    const params = new URLSearchParams({ limit: '500', ...query, ...(cursor ? { cursor } : {}) });
    const res = await c.admin('GET', `/admin/audit?${params}`);
    if (res.status !== 200) throw new Error(`GET /admin/audit answered ${res.status} ${res.text}`);
    events.push(...(res.json.events as AuditEvent[]));
    cursor = res.json.next_cursor;
    if (cursor === null) return events;
  }
  throw new Error('the audit trail did not end within 50 pages');
}

/**
 * The stored form of a software passkey whose registration response is `registration` (the
 * COSE public key, as people/passkeys.ts keeps it), for a test that must give a person a
 * passkey the page would refuse to register: one on an authenticator that does not verify the
 * user, as if moved to one (docs/research/approvals.md §2).
 */
export function storedPasskeyJson(registration: { response: { attestationObject: string } }, createdAtMs: number): string {
  const attestation = decodeAttestationObject(Buffer.from(registration.response.attestationObject, 'base64url'));
  const parsed = parseAuthenticatorData(attestation.get('authData'));
  if (!parsed.credentialPublicKey) throw new Error('the registration carries no public key');
  return JSON.stringify({ publicKey: Buffer.from(parsed.credentialPublicKey).toString('base64url'), counter: 0, createdAtMs });
}

/** One line a capturing logger kept. */
export interface LoggedLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}

/**
 * A logger that keeps what the server logs at info and above, so a test can check why a refusal
 * happened (the page says only "could not be verified"; the log says which check failed) and that
 * what an anonymous caller is not told went to the log instead.
 */
export function capturingLogger(): { logger: Logger; lines: LoggedLine[] } {
  const lines: LoggedLine[] = [];
  const keep = (level: LoggedLine['level']) => (msg: string, fields: Record<string, unknown> = {}) => {
    if (lines.length < 10_000) lines.push({ level, msg, fields });
  };
  return { logger: { debug: () => {}, info: keep('info'), warn: keep('warn'), error: keep('error'), isLevelEnabled: (level) => level !== 'debug' }, lines };
}
