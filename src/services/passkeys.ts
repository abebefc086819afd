// Proof of presence for approvals that change things (protocol §10: a capability marked
// `approval_strength: "presence"` needs more than a sign-in, since an agent that controls a browser
// could click "approve" itself). A person registers a passkey once after signing in; approving such
// a capability then takes a fresh WebAuthn assertion with user verification, whose challenge was
// issued for that one approval (kept in the person's session, cleared before it is checked), so an
// assertion can neither be replayed nor moved to another approval. @simplewebauthn/server does the
// WebAuthn checks. WebAuthn needs a domain as relying-party id: with an issuer that is an IP address
// (the default http://127.0.0.1:3000) presence approvals cannot work, and start-up says so.
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
import { ApiError } from '../errors.ts';
import type { PageDeps } from './device-approvals.ts';
import type { PersonSession } from './people.ts';

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

const passkeySchema = z.object({
  id: z.string().min(1).max(1024),
  publicKey: z.string().min(1).max(4096),
  counter: z.number().int().min(0),
  transports: z.array(z.string().max(32)).max(10).optional(),
  createdAtMs: z.number(),
});
const personRecordSchema = z.object({ passkeys: z.array(passkeySchema).max(MAX_PASSKEYS).default([]) });
type PersonRecord = z.infer<typeof personRecordSchema>;

async function loadPersonRecord(deps: PageDeps, personId: string): Promise<PersonRecord> {
  const json = await deps.store.loadPerson(personId);
  if (json === null) return { passkeys: [] };
  const parsed = personRecordSchema.safeParse(JSON.parse(json));
  if (!parsed.success) throw new Error(`the stored record of person ${personId} is malformed`);
  return parsed.data;
}

function requirePasskeys(deps: PageDeps): PasskeySettings {
  if (!deps.passkeys) {
    throw new ApiError('service_unavailable', "Passkeys cannot work here: this server's address is an IP address (set ISSUER to a host name, e.g. http://localhost:3000).");
  }
  return deps.passkeys;
}

function signedIn(session: PersonSession) {
  const person = session.data.person;
  if (!person) throw new ApiError('authentication_required', 'Sign in first.');
  return person;
}

export async function hasPasskey(deps: PageDeps, personId: string): Promise<boolean> {
  return (await loadPersonRecord(deps, personId)).passkeys.length > 0;
}

/** Options for the browser to create a passkey; the challenge waits in the session. */
export async function passkeyRegistrationOptions(deps: PageDeps, session: PersonSession) {
  const settings = requirePasskeys(deps);
  const person = signedIn(session);
  const record = await loadPersonRecord(deps, person.personId);
  const options = await generateRegistrationOptions({
    rpName: settings.rpName,
    rpID: settings.rpId,
    userID: new TextEncoder().encode(person.personId),
    userName: person.email ?? person.name ?? person.personId,
    attestationType: 'none',
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
    supportedAlgorithmIDs: ALGORITHMS,
    excludeCredentials: record.passkeys.map((p) => ({ id: p.id, transports: p.transports as AuthenticatorTransport[] | undefined })),
  });
  session.data.passkeyChallenge = { purpose: 'register', challenge: options.challenge, expiresAtMs: deps.clock.nowMs() + CHALLENGE_TTL_MS };
  return options;
}

/** Verifies the browser's new passkey (user verification required) and keeps it. */
export async function registerPasskey(deps: PageDeps, session: PersonSession, responseJson: string): Promise<void> {
  const settings = requirePasskeys(deps);
  const person = signedIn(session);
  const challenge = takeChallenge(deps, session, 'register');
  const record = await loadPersonRecord(deps, person.personId);
  if (record.passkeys.length >= MAX_PASSKEYS) throw new ApiError('invalid_request', `A person keeps at most ${MAX_PASSKEYS} passkeys.`);
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
  record.passkeys.push({
    id: credential.id,
    publicKey: Buffer.from(credential.publicKey).toString('base64url'),
    counter: credential.counter,
    ...(credential.transports ? { transports: credential.transports } : {}),
    createdAtMs: deps.clock.nowMs(),
  });
  await deps.store.savePerson(person.personId, JSON.stringify(record));
}

/**
 * Options for the browser to prove presence for one approval, or null when the person has no
 * passkey yet. The challenge is issued only for this approval and only while it is open.
 */
export async function presenceOptions(deps: PageDeps, session: PersonSession, approvalId: string) {
  if (!deps.passkeys) return null;
  const person = signedIn(session);
  const record = await loadPersonRecord(deps, person.personId);
  if (record.passkeys.length === 0) return null;
  const options = await generateAuthenticationOptions({
    rpID: deps.passkeys.rpId,
    userVerification: 'required',
    allowCredentials: record.passkeys.map((p) => ({ id: p.id, transports: p.transports as AuthenticatorTransport[] | undefined })),
  });
  session.data.passkeyChallenge = { purpose: 'approve', approvalId, challenge: options.challenge, expiresAtMs: deps.clock.nowMs() + CHALLENGE_TTL_MS };
  return options;
}

/**
 * Checks a presence assertion for exactly this approval: its challenge must be the one issued for
 * this approval id (and is used up by this check, pass or fail), from one of the person's passkeys,
 * with user verification.
 */
export async function verifyPresence(deps: PageDeps, session: PersonSession, approvalId: string, responseJson: string | undefined): Promise<void> {
  const settings = requirePasskeys(deps);
  const person = signedIn(session);
  if (!responseJson) throw new ApiError('unauthorized', 'Approving this needs your passkey.');
  const challenge = takeChallenge(deps, session, 'approve', approvalId);
  const response = parseResponse(responseJson) as AuthenticationResponseJSON;
  const record = await loadPersonRecord(deps, person.personId);
  const passkey = record.passkeys.find((p) => p.id === response.id);
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
    deps.logger.warn('presence proof refused', { personId: person.personId, approvalId, error: (error as Error).message });
    throw new ApiError('unauthorized', 'Your passkey could not be verified for this approval. Try again.');
  }
  if (!verification.verified) throw new ApiError('unauthorized', 'Your passkey could not be verified for this approval. Try again.');
  // The counter is kept, not relied on: synced passkeys often report 0.
  passkey.counter = Math.max(passkey.counter, verification.authenticationInfo.newCounter);
  await deps.store.savePerson(person.personId, JSON.stringify(record));
}

/** The session's challenge for this ceremony, removed from the session whatever happens next. */
function takeChallenge(deps: PageDeps, session: PersonSession, purpose: 'register' | 'approve', approvalId?: string): string {
  const held = session.data.passkeyChallenge;
  delete session.data.passkeyChallenge;
  if (!held || held.purpose !== purpose || held.expiresAtMs <= deps.clock.nowMs() || (approvalId !== undefined && held.approvalId !== approvalId)) {
    throw new ApiError('unauthorized', 'This passkey request is out of date. Reload the page and try again.');
  }
  return held.challenge;
}

function parseResponse(json: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    throw new ApiError('invalid_request', 'The passkey answer was not readable.');
  }
}
