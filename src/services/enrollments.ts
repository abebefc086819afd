// Hosts a person sets up (docs/approving.md, "Enrolling a host"): a signed-in person sets up a host
// through their API or their page, with the host's public key or without one, and gets an
// enrollment token to give the machine that will be the host. That machine proves it holds its key
// and binds it with POST /host/enroll, and the host is made then, active, linked to the person,
// with the default capabilities they chose (services/host-setup.ts holds the rules every door
// shares). No existing host is ever linked or changed from here (docs/stances.md).
//
// Why a key the person gives does not make a host at once: a public key is public. A host linked to
// a person on the strength of a key alone would be found by that key's holder the first time it
// calls, whoever it is, and its agents would act in that person's name. So the host is made only
// when a machine shows both the token (the person meant this machine) and its key (a host JWT
// signed by it); a key the person gave pins which key the token binds.
//
// The token is the only secret of POST /host/enroll, so it is random (256 bits), shown once, and
// kept only as its SHA-256: records are found by that hash, and the token is never stored, logged
// or put in the audit trail. It binds a key for an hour; the record is kept a day, so a late token
// is told "expired" rather than "wrong", and is forgotten after that.
import { createHash, randomBytes } from 'node:crypto';
import { jwkThumbprint, parsePublicJwk } from '../auth/keys.ts';
import type { AuditBy } from '../audit/events.ts';
import type { EnrollmentRecord, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { PersonSession } from '../people/sessions.ts';
import type { AgentRecords, HostEnrollments, HostRecords, PendingIndex, PersonRecords, StoreBackend } from '../store/store.ts';
import type { PersonServiceDepsOver, ServiceDepsOver } from './deps.ts';
import { checkDefaultCapabilities, createPersonHost, existingHostRefusal, refuseKnownHostKey } from './host-setup.ts';
import { newHostId } from './ids.ts';
import { signedInPerson } from './person-account.ts';

type EnrollmentRoles = HostEnrollments & HostRecords & AgentRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>;
/** What enrolling may touch of the store: enrollments, and what creating and linking a host does. */
type EnrollDeps = ServiceDepsOver<EnrollmentRoles>;
/** The same, for the signed-in person who sets a host up. */
type PersonSetupDeps = PersonServiceDepsOver<EnrollmentRoles>;

/** How long an enrollment token binds a key. */
export const ENROLLMENT_TTL_SECONDS = 3600;
/** How long an enrollment is remembered after it was made: past its hour it is told expired, after this it is unknown. */
export const ENROLLMENT_RETAIN_MS = 24 * 3600 * 1000;

/** Every token starts so, for people and secret scanners to recognise one. */
export const ENROLLMENT_TOKEN_PREFIX = 'agent_enroll_';
/** The prefix and 32 random bytes in base64url: anything else cannot be a token, and is refused without a lookup. */
const TOKEN_SHAPE = /^agent_enroll_[A-Za-z0-9_-]{43}$/;

/** Which door a person came through, for the audit trail. */
type PersonDoor = 'people_api' | 'account_page';

/** The SHA-256 of a token, base64url: what is stored and looked up, never the token. */
const tokenHashOf = (token: string) => createHash('sha256').update(token).digest('base64url');

/**
 * The enrollment budget is kept per person (set-ups) and per address (enroll attempts), under keys
 * that cannot meet: a person's is hashed (a person id may hold any character) and both carry their
 * kind, so no address, however a proxy reports it, can spend a person's budget.
 */
const personBudgetKey = (personId: string) => `person:${createHash('sha256').update(`person:${personId}`).digest('base64url')}`;
const addressBudgetKey = (clientIp: string) => `address:${clientIp}`;

export interface HostSetupRequest {
  name: string;
  defaultCapabilities: string[];
  /** The host's public JWK, when the person has it: then only that key can be bound. */
  publicKey?: unknown;
}

/** The enrollment and its token, which is in this answer only: it is not stored anywhere, so it can never be shown again. */
export interface HostSetup {
  enrollment: EnrollmentRecord;
  token: string;
}

/**
 * A signed-in person sets up a host. Giving a host default capabilities grants authority in their
 * name, so, like a decision, it needs a recent sign-in (401 otherwise). The answer is an enrollment
 * and its token; with a key, the token binds that key only, and a key some host holds already is
 * refused now rather than at enroll.
 */
export async function setUpHostAsPerson(deps: PersonSetupDeps, session: PersonSession, request: HostSetupRequest, via: PersonDoor): Promise<HostSetup> {
  const person = signedInPerson(session);
  if (!deps.sessions.isFresh(session)) {
    throw new ApiError('authentication_required', 'Sign in again to set up a host: giving a host default capabilities needs a recent sign-in.');
  }
  checkDefaultCapabilities(deps.catalog, request.defaultCapabilities);
  let keyThumbprint: string | undefined;
  if (request.publicKey !== undefined) {
    keyThumbprint = jwkThumbprint(parsePublicJwk(request.publicKey, deps.config.ALGORITHMS, 'public_key').jwk);
    await refuseKnownHostKey(deps, keyThumbprint);
  }
  // Each enrollment is stored for a day whether or not it is used: a person's hourly budget bounds what one person can make agentgate keep.
  await deps.limits.consume('enrollment', personBudgetKey(person.personId));
  const token = `${ENROLLMENT_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
  const nowMs = deps.clock.nowMs();
  const enrollment: EnrollmentRecord = {
    id: `enr_${randomBytes(16).toString('base64url')}`,
    personId: person.personId,
    name: request.name,
    defaultCapabilities: [...request.defaultCapabilities],
    tokenHash: tokenHashOf(token),
    ...(keyThumbprint !== undefined ? { keyThumbprint } : {}),
    createdAtMs: nowMs,
    expiresAtMs: nowMs + ENROLLMENT_TTL_SECONDS * 1000,
    state: 'pending',
  };
  // A second record under one hash would need two equal 256-bit random tokens.
  if (!(await deps.store.createEnrollment(enrollment, ENROLLMENT_RETAIN_MS))) throw new Error('an enrollment token was drawn twice');
  const by: AuditBy = { actor: 'person', via, person_id: person.personId };
  deps.audit.record({ type: 'host.enrollment_created', ...by, enrollment_id: enrollment.id, default_capabilities: enrollment.defaultCapabilities, key_given: keyThumbprint !== undefined });
  return { enrollment, token };
}

export interface EnrollRequest {
  token: string;
  /** The key to bind, as the body gives it: it must be the key that signed `hostJwt`. */
  publicKey: unknown;
  /** A host JWT signed by that key (Authorization: Bearer): the proof that the caller holds it. */
  hostJwt: string | null;
  /** Replaces the name the person gave, when the machine names itself. */
  name?: string | undefined;
  /** The caller's address: anyone may try a token, so each address has an hourly budget of tries. */
  clientIp: string;
}

/**
 * POST /host/enroll: the token's holder proves it holds its key and binds it, and the person's host
 * is made with it. The address's budget is spent before anything is looked up. A token that is
 * wrong, malformed or forgotten is 401 enrollment_token_invalid; one past its hour 401
 * enrollment_token_expired; one used already 400 host_not_pending_enrollment. The host JWT must
 * verify with the body's key (401 invalid_jwt otherwise, and the token is not spent), which must be
 * the key the person gave, if they gave one (400). A key some host holds is 409
 * (services/host-setup.ts existingHostRefusal), and then the token is not spent.
 *
 * The enrollment is bound to the new host id (store.completeEnrollment, atomic) before the host is
 * made, so two enrolls with one token make at most one host: the second finds it used. Should the
 * key be taken by another host in the instant between the check and the creation, the token stays
 * spent and the person makes a new one; a crash after the binding does the same, never more.
 */
export async function enrollHost(deps: EnrollDeps, request: EnrollRequest): Promise<{ host: HostRecord; enrollment: EnrollmentRecord }> {
  await deps.limits.consume('enrollment', addressBudgetKey(request.clientIp));
  const { jwk } = parsePublicJwk(request.publicKey, deps.config.ALGORITHMS, 'public_key');
  const invalid = () => new ApiError('enrollment_token_invalid', 'no enrollment has this token: check it, or ask for a new one');
  if (!TOKEN_SHAPE.test(request.token)) throw invalid();
  const tokenHash = tokenHashOf(request.token);
  const enrollment = await deps.store.findEnrollment(tokenHash);
  const nowMs = deps.clock.nowMs();
  // The store forgets a record when its day is over; on this clock it may not have yet.
  if (!enrollment || nowMs >= enrollment.createdAtMs + ENROLLMENT_RETAIN_MS) throw invalid();
  if (enrollment.state !== 'pending') throw new ApiError('host_not_pending_enrollment', 'this enrollment token was used already; a token binds one key, once');
  if (nowMs >= enrollment.expiresAtMs) throw new ApiError('enrollment_token_expired', 'this enrollment token has expired (it binds a key for an hour); ask for a new one');
  const thumbprint = jwkThumbprint(jwk);
  await proveKeyHeld(deps, request, thumbprint);
  if (enrollment.keyThumbprint !== undefined && enrollment.keyThumbprint !== thumbprint) {
    throw new ApiError('invalid_request', 'this enrollment token binds the key its person gave, not this one');
  }
  await refuseKnownHostKey(deps, thumbprint);
  const hostId = newHostId();
  const completion = await deps.store.completeEnrollment(tokenHash, hostId, nowMs);
  if (completion === 'not_pending') throw new ApiError('host_not_pending_enrollment', 'this enrollment token was used already; a token binds one key, once');
  if (completion === 'not_found') throw invalid();
  const by: AuditBy = { actor: 'host', via: 'host_enroll' };
  const host = await createPersonHost(deps, {
    hostId, thumbprint, publicJwk: jwk, personId: enrollment.personId, name: request.name ?? enrollment.name, defaultCapabilities: enrollment.defaultCapabilities, by,
  });
  deps.audit.record({
    type: 'host.enrolled', ...by, host_id: host.id, person_id: enrollment.personId, enrollment_id: enrollment.id, outcome: host.status, default_capabilities: enrollment.defaultCapabilities,
  });
  return { host, enrollment: { ...enrollment, state: 'enrolled', hostId, enrolledAtMs: nowMs } };
}

/**
 * The proof of possession: a host JWT (protocol §5.2, as for a first registration: `iss` the key's
 * thumbprint, `host_public_key` the key, signed by it, fresh, its jti never used before), whose key
 * is the body's. A key some host already holds verifies as that host, and is refused as such.
 */
async function proveKeyHeld(deps: EnrollDeps, request: EnrollRequest, thumbprint: string): Promise<void> {
  if (request.hostJwt === null) {
    throw new ApiError('invalid_jwt', 'POST /host/enroll needs a host JWT signed by public_key (Authorization: Bearer), to show the caller holds the key');
  }
  const verified = await deps.hostAuth.verify(request.hostJwt, { allowUnknown: true, allowPending: true, clientIp: request.clientIp });
  if (verified.host) throw existingHostRefusal(verified.host);
  if (verified.presentedJwksUrl !== undefined) throw new ApiError('invalid_request', 'an enrolled host gives its key inline (host_public_key), not by a JWKS URL');
  if (verified.thumbprint !== thumbprint) throw new ApiError('invalid_jwt', 'the host JWT is not signed by public_key');
}
