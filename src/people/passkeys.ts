// Proof of presence for approvals that change things (protocol §10: a capability marked
// `approval_strength: "presence"` needs more than a sign-in, since an agent that controls a browser
// could click "approve" itself). Approving such a capability takes a fresh WebAuthn assertion with
// user verification, whose challenge was issued for that one approval (kept in the person's session,
// cleared before it is checked), so an assertion can neither be replayed nor moved to another
// approval. Presence means a person with their authenticator, so a passkey is never added with the
// browser session alone (an agent driving the browser has that too): a further passkey needs a
// user-verified assertion of one the person holds, and the first one needs credentials entered at
// the identity provider minutes before. Passkeys are stored one field each (store.addPasskey and
// friends), so ceremonies racing each other or a removal cannot lose or resurrect one.
// @simplewebauthn/server does the WebAuthn checks. WebAuthn needs a domain as relying-party id:
// with an issuer that is an IP address presence approvals cannot work, and start-up says so.
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import {
  generateAuthenticationOptions,
  generateRegistrationOptions,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
  type AuthenticationResponseJSON,
  type AuthenticatorTransport,
  type RegistrationResponseJSON,
} from '@simplewebauthn/server';
import { z } from 'zod';
import type { AuditLog } from '../audit/log.ts';
import type { Clock } from '../common/clock.ts';
import { ApiError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { PersonRecords, ReplayRecords } from '../store/store.ts';
import type { PasskeyCeremony, PersonSession, PersonSessions, SessionData } from './sessions.ts';

/** What the passkey ceremonies need: the person's records and session, and where to record what they did. */
interface PasskeyDeps {
  /** Passkeys are person records; a ceremony's challenge is used once, as a replay record. */
  store: PersonRecords & ReplayRecords;
  clock: Clock;
  logger: Logger;
  audit: Pick<AuditLog, 'record'>;
  sessions: PersonSessions;
  /** WebAuthn settings; null when the issuer's host cannot be a relying-party id. */
  passkeys: PasskeySettings | null;
}

export interface PasskeySettings {
  rpId: string;
  rpName: string;
  /** The exact origin pages are served from, port included. */
  origin: string;
}

/** Passkey settings for this issuer, or null when its host is an IP address (no valid RP id). */
export function passkeySettingsFor(issuer: string, providerName: string): PasskeySettings | null {
  const url = new URL(issuer);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) !== 0) return null;
  return { rpId: host, rpName: providerName, origin: url.origin };
}

/** ES256 and RS256: what authenticators offer, and no experimental algorithm warnings on Node 24. */
const ALGORITHMS = [-7, -257];
/** A ceremony must finish within this; an older challenge is refused. */
const CHALLENGE_TTL_MS = 5 * 60_000;
const MAX_PASSKEYS = 20;
/**
 * A person's first passkey needs credentials entered at the identity provider this recently (a
 * sign-in with prompt=login whose auth_time fell within our flow): the browser session alone, which
 * an agent driving the browser also holds, never adds one.
 */
export const FIRST_PASSKEY_LOGIN_WINDOW_MS = 5 * 60_000;

const storedPasskeySchema = z.object({
  publicKey: z.string().min(1).max(4096),
  counter: z.number().int().min(0),
  transports: z.array(z.string().max(32)).max(10).optional(),
  createdAtMs: z.number(),
  lastUsedAtMs: z.number().optional(),
});
type StoredPasskey = z.infer<typeof storedPasskeySchema>;

/** One of a person's passkeys: its credential id and what is kept of it. */
export interface Passkey extends StoredPasskey {
  id: string;
}

/** The person's passkeys, oldest first. A record that does not parse is a bug or tampering: refuse. */
export async function listPasskeys(deps: Pick<PasskeyDeps, 'store'>, personId: string): Promise<Passkey[]> {
  const stored = await deps.store.listPasskeys(personId);
  return stored.map(({ id, json }) => {
    const parsed = storedPasskeySchema.safeParse(JSON.parse(json));
    if (!parsed.success) throw new Error(`a stored passkey of person ${personId} is malformed`);
    return { id, ...parsed.data };
  }).sort((a, b) => a.createdAtMs - b.createdAtMs || a.id.localeCompare(b.id));
}

const descriptorsOf = (passkeys: readonly Passkey[]) => passkeys.map((p) => ({ id: p.id, transports: p.transports as AuthenticatorTransport[] | undefined }));
const storedJson = ({ id: _id, ...kept }: Passkey) => JSON.stringify(kept);

function requirePasskeys(deps: PasskeyDeps): PasskeySettings {
  if (!deps.passkeys) {
    throw new ApiError('unauthorized', "Passkeys cannot work here: this server's address is an IP address (an administrator sets ISSUER to a host name, e.g. http://localhost:3000).");
  }
  return deps.passkeys;
}

function signedIn(session: PersonSession) {
  const person = session.data?.person;
  if (!person) throw new ApiError('authentication_required', 'Sign in first.');
  return { person, data: session.data! };
}

/** What adding a passkey takes for this person now. */
type PasskeyAddition =
  /** They hold passkeys: the new one needs a user-verified assertion of one of them. */
  | { kind: 'prove_existing'; passkeys: Passkey[] }
  /** Their first, and they entered their credentials at the identity provider moments ago. */
  | { kind: 'first'; passkeys: [] }
  /** Their first, but their last sign-in was answered from the provider's own session: sign in again. */
  | { kind: 'needs_fresh_login'; passkeys: [] };

export async function passkeyAddition(deps: PasskeyDeps, session: PersonSession): Promise<PasskeyAddition> {
  const { person } = signedIn(session);
  const passkeys = await listPasskeys(deps, person.personId);
  if (passkeys.length > 0) return { kind: 'prove_existing', passkeys };
  return deps.sessions.loggedInFreshly(session, FIRST_PASSKEY_LOGIN_WINDOW_MS) ? { kind: 'first', passkeys: [] } : { kind: 'needs_fresh_login', passkeys: [] };
}

/**
 * Options for the browser to create a passkey and, when the person holds passkeys already, to prove
 * one of them first; both challenges wait in the session, each for its own ceremony.
 */
export async function passkeyRegistrationOptions(deps: PasskeyDeps, session: PersonSession, addition: PasskeyAddition) {
  const settings = requirePasskeys(deps);
  const { person, data } = signedIn(session);
  if (addition.kind === 'needs_fresh_login') throw freshLoginNeeded();
  const registration = await generateRegistrationOptions({
    rpName: settings.rpName,
    rpID: settings.rpId,
    userID: new TextEncoder().encode(person.personId),
    userName: person.email ?? person.name ?? person.personId,
    attestationType: 'none',
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
    supportedAlgorithmIDs: ALGORITHMS,
    excludeCredentials: descriptorsOf(addition.passkeys),
  });
  const expiresAtMs = deps.clock.nowMs() + CHALLENGE_TTL_MS;
  data.passkeyChallenges.register = { challenge: registration.challenge, expiresAtMs };
  let proof = null;
  if (addition.kind === 'prove_existing') {
    proof = await generateAuthenticationOptions({ rpID: settings.rpId, userVerification: 'required', allowCredentials: descriptorsOf(addition.passkeys) });
    data.passkeyChallenges.proof = { challenge: proof.challenge, expiresAtMs };
  } else {
    delete data.passkeyChallenges.proof;
  }
  return { registration, proof };
}

const freshLoginNeeded = () => new ApiError('authentication_required', 'Your first passkey needs a fresh sign-in at your identity provider: sign in again, then add it.');

/**
 * Adds the passkey the browser created (user verification required), after the proof that adding
 * one takes: an assertion of one of the person's passkeys, or, for their first, credentials entered
 * at the identity provider within FIRST_PASSKEY_LOGIN_WINDOW_MS. Recorded in the audit trail.
 */
export async function registerPasskey(deps: PasskeyDeps, session: PersonSession, responseJson: string, proofJson: string | undefined): Promise<Passkey> {
  const settings = requirePasskeys(deps);
  const { person, data } = signedIn(session);
  const challenge = await takeChallenge(deps, data, 'register');
  const passkeys = await listPasskeys(deps, person.personId);
  if (passkeys.length > 0) {
    if (!proofJson || !data.passkeyChallenges.proof) {
      delete data.passkeyChallenges.proof;
      throw new ApiError('unauthorized', 'Adding a passkey needs one of your passkeys first. Reload the page and try again.');
    }
    const proofChallenge = await takeChallenge(deps, data, 'proof');
    await verifyAssertion(deps, settings, person.personId, passkeys, proofChallenge, proofJson, 'passkey addition');
  } else if (!deps.sessions.loggedInFreshly(session, FIRST_PASSKEY_LOGIN_WINDOW_MS)) {
    throw freshLoginNeeded();
  }
  let verification;
  try {
    verification = await verifyRegistrationResponse({
      response: parseResponse(responseJson) as RegistrationResponseJSON,
      expectedChallenge: challenge,
      expectedOrigin: settings.origin,
      expectedRPID: settings.rpId,
      requireUserVerification: true,
      supportedAlgorithmIDs: ALGORITHMS,
    });
  } catch (error) {
    deps.logger.warn('passkey registration refused', { personId: person.personId, error: (error as Error).message });
    throw new ApiError('invalid_request', 'The passkey could not be verified. Try again.');
  }
  if (!verification.verified) throw new ApiError('invalid_request', 'The passkey could not be verified. Try again.');
  const { credential } = verification.registrationInfo;
  const passkey: Passkey = {
    id: credential.id,
    publicKey: Buffer.from(credential.publicKey).toString('base64url'),
    counter: credential.counter,
    ...(credential.transports ? { transports: credential.transports } : {}),
    createdAtMs: deps.clock.nowMs(),
  };
  const added = await deps.store.addPasskey(person.personId, passkey.id, storedJson(passkey), MAX_PASSKEYS);
  if (added === 'full') throw new ApiError('invalid_request', `A person keeps at most ${MAX_PASSKEYS} passkeys: remove one first.`);
  if (added === 'exists') throw new ApiError('invalid_request', 'This passkey is yours already.');
  deps.audit.record({ type: 'passkey.added', actor: 'person', via: 'approval_page', person_id: person.personId, passkey_id: passkey.id, proof: passkeys.length > 0 ? 'passkey' : 'fresh_login' });
  return passkey;
}

/**
 * Removes one of the person's passkeys (the people's API), with a user-verified assertion of one of
 * their passkeys (that one or another): the session alone must not be able to clear a person's
 * passkeys and then add one of its own as their "first". Without `assertionJson` it refuses with
 * the options to answer (`assertion_options`), whose challenge waits in the session for this
 * passkey's removal only. Recorded in the audit trail.
 */
export async function removePasskey(
  deps: PasskeyDeps, session: PersonSession, passkeyId: string, assertionJson: string | undefined, via: 'people_api' | 'account_page' = 'people_api',
): Promise<void> {
  const settings = requirePasskeys(deps);
  const { person, data } = signedIn(session);
  const passkeys = await listPasskeys(deps, person.personId);
  if (!passkeys.some((p) => p.id === passkeyId)) throw new ApiError('not_found', 'you have no passkey with this id');
  if (assertionJson === undefined) {
    const options = await generateAuthenticationOptions({ rpID: settings.rpId, userVerification: 'required', allowCredentials: descriptorsOf(passkeys) });
    data.passkeyChallenges.remove = { challenge: options.challenge, approvalId: passkeyId, expiresAtMs: deps.clock.nowMs() + CHALLENGE_TTL_MS };
    throw new ApiError('unauthorized', 'Removing a passkey needs one of your passkeys: answer assertion_options with it and send the answer as assertion.', { assertion_options: options });
  }
  const challenge = await takeChallenge(deps, data, 'remove', passkeyId);
  await verifyAssertion(deps, settings, person.personId, passkeys, challenge, assertionJson, `removal of ${passkeyId}`);
  if (!(await deps.store.removePasskey(person.personId, passkeyId))) throw new ApiError('not_found', 'you have no passkey with this id');
  deps.audit.record({ type: 'passkey.removed', actor: 'person', via, person_id: person.personId, passkey_id: passkeyId });
}

/**
 * An administrator removes a person's passkeys (one, or all): the way back for a person who lost
 * the authenticator every further passkey would need. Recorded in the audit trail.
 */
export async function removePasskeysAsAdmin(deps: Pick<PasskeyDeps, 'store' | 'audit'>, personId: string, passkeyId: string | undefined): Promise<number> {
  const ids = passkeyId !== undefined ? [passkeyId] : (await deps.store.listPasskeys(personId)).map((p) => p.id);
  let removed = 0;
  for (const id of ids) {
    if (!(await deps.store.removePasskey(personId, id))) continue;
    removed++;
    deps.audit.record({ type: 'passkey.removed', actor: 'admin', via: 'admin_api', person_id: personId, passkey_id: id });
  }
  if (passkeyId !== undefined && removed === 0) throw new ApiError('not_found', 'this person has no passkey with this id');
  return removed;
}

/**
 * Options for the browser to prove presence for one approval, or null when the person has no
 * passkey yet or passkeys cannot work here. The challenge is issued only for this approval.
 */
export async function presenceOptions(deps: PasskeyDeps, session: PersonSession, approvalId: string) {
  if (!deps.passkeys) return null;
  const { person, data } = signedIn(session);
  const passkeys = await listPasskeys(deps, person.personId);
  if (passkeys.length === 0) return null;
  const options = await generateAuthenticationOptions({ rpID: deps.passkeys.rpId, userVerification: 'required', allowCredentials: descriptorsOf(passkeys) });
  data.passkeyChallenges.approve = { challenge: options.challenge, approvalId, expiresAtMs: deps.clock.nowMs() + CHALLENGE_TTL_MS };
  return options;
}

/**
 * Checks a presence assertion for exactly this approval: its challenge must be the one issued for
 * this approval id (and is used up by this check, pass or fail), from one of the person's passkeys,
 * with user verification.
 */
export async function verifyPresence(deps: PasskeyDeps, session: PersonSession, approvalId: string, responseJson: string | undefined): Promise<void> {
  const settings = requirePasskeys(deps);
  const { person, data } = signedIn(session);
  if (!responseJson) throw new ApiError('unauthorized', 'Approving this needs your passkey.');
  const challenge = await takeChallenge(deps, data, 'approve', approvalId);
  const passkeys = await listPasskeys(deps, person.personId);
  await verifyAssertion(deps, settings, person.personId, passkeys, challenge, responseJson, `approval ${approvalId}`);
}

/**
 * A user-verified assertion by one of `passkeys` for `challenge`. The passkey's counter and last use
 * are kept, not relied on (synced passkeys often report 0), and rewritten only while the passkey
 * exists: one removed while this ran is refused, never brought back.
 */
async function verifyAssertion(
  deps: PasskeyDeps, settings: PasskeySettings, personId: string, passkeys: readonly Passkey[], challenge: string, responseJson: string, purpose: string,
): Promise<void> {
  const response = parseResponse(responseJson) as AuthenticationResponseJSON;
  const passkey = passkeys.find((p) => p.id === response?.id);
  if (!passkey) throw new ApiError('unauthorized', 'That passkey is not one of yours.');
  let verification;
  try {
    verification = await verifyAuthenticationResponse({
      response,
      expectedChallenge: challenge,
      expectedOrigin: settings.origin,
      expectedRPID: settings.rpId,
      requireUserVerification: true,
      credential: {
        id: passkey.id,
        publicKey: Buffer.from(passkey.publicKey, 'base64url'),
        counter: passkey.counter,
        transports: passkey.transports as AuthenticatorTransport[] | undefined,
      },
    });
  } catch (error) {
    deps.logger.warn('passkey assertion refused', { personId, purpose, error: (error as Error).message });
    throw new ApiError('unauthorized', 'Your passkey could not be verified. Try again.');
  }
  if (!verification.verified) throw new ApiError('unauthorized', 'Your passkey could not be verified. Try again.');
  const used: Passkey = { ...passkey, counter: Math.max(passkey.counter, verification.authenticationInfo.newCounter), lastUsedAtMs: deps.clock.nowMs() };
  if (!(await deps.store.updatePasskey(personId, passkey.id, storedJson(used)))) {
    throw new ApiError('unauthorized', 'That passkey was removed. Use another one.');
  }
}

/**
 * The session's challenge for this ceremony, removed from the session whatever happens next, and
 * used up in the store: the session is a copy each request reads, so two requests carrying one
 * ceremony's answer would otherwise both find it (one proof adding two passkeys, say). `boundTo` is
 * what it was issued for (an approval id, or the passkey to remove).
 */
async function takeChallenge(deps: PasskeyDeps, data: SessionData, ceremony: PasskeyCeremony, boundTo?: string): Promise<string> {
  const held = data.passkeyChallenges[ceremony];
  delete data.passkeyChallenges[ceremony];
  const nowMs = deps.clock.nowMs();
  if (!held || held.expiresAtMs <= nowMs || (boundTo !== undefined && held.approvalId !== boundTo)) throw outOfDate();
  if (!(await deps.store.useChallenge(createHash('sha256').update(held.challenge).digest('base64url'), held.expiresAtMs - nowMs))) throw outOfDate();
  return held.challenge;
}

const outOfDate = () => new ApiError('unauthorized', 'This passkey request is out of date. Reload the page and try again.');

function parseResponse(json: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    throw new ApiError('invalid_request', 'The passkey answer was not readable.');
  }
}
