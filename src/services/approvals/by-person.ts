// A signed-in person decides on the approval page (protocol §10, DESIGN §8): they enter the code an
// agent's host showed them, see exactly what that approval decides (approvals/view.ts), and approve
// all, some or none. The code is checked against the approval it names (never stored;
// approvals/user-codes.ts), wrong codes are counted per session and per address (atomically, in the
// store), and the decision goes through the one approval core (approvals/decide.ts), bound to the
// approval id the person was shown.
import type { AgentSnapshot, GrantRecord, HostRecord } from '../../domain/types.ts';
import { ApiError, isApiError } from '../../errors.ts';
import { verifyPresence } from '../../people/passkeys.ts';
import type { PersonSession } from '../../people/sessions.ts';
import type { AgentRecords, HostRecords, PendingIndex, PersonRecords, ReplayRecords, StoreBackend } from '../../store/store.ts';
import type { PersonServiceDepsOver } from '../deps.ts';
import { approveAgent, awaitsHostLink, denyAgent } from './decide.ts';
import { approvalForPerson, decidesFor, type ApprovalForPerson } from './view.ts';

/** What a person's decision may touch of the store: what the decision writes, and the passkey and challenge records presence reads. */
type PersonDecisionDeps = PersonServiceDepsOver<AgentRecords & HostRecords & PersonRecords & PendingIndex & ReplayRecords & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

const wrongCode = () => new ApiError('invalid_request', 'That code is not valid. Check it against the one your agent shows and try again.');
const usedCode = () => new ApiError('invalid_request', 'That code was used already, or the agent asked again since (a code works once). Ask your agent for the code it shows now.');

/**
 * The approval a typed code names, for a signed-in person. Every lookup spends a point of this
 * session's and this address's budgets first, atomically in the store (so parallel guesses cannot
 * all pass one check); a right code gives the session's point back, so only wrong codes count
 * against a person. A code for an agent that acts for someone else is answered as wrong.
 */
export async function findApprovalByCode(deps: PersonDecisionDeps, session: PersonSession, typed: string, clientIp: string): Promise<ApprovalForPerson> {
  const person = signedInPerson(session);
  const sessionKey = deps.sessions.limitKey(session);
  await spendAttempt(deps, 'userCodeSession', sessionKey);
  await spendAttempt(deps, 'userCodeAttempt', clientIp);
  const found = await lookUp(deps, typed);
  if (found === 'unknown') throw wrongCode();
  if (found === 'used') throw usedCode();
  const { snapshot, host } = found;
  if (snapshot.agent.mode !== 'delegated') {
    throw new ApiError('unauthorized', 'This agent acts for no person: an administrator approves it.');
  }
  if (!decidesFor(person.personId, host, snapshot.agent)) throw wrongCode();
  const view = approvalForPerson(deps.catalog, host, snapshot, deps.clock.nowMs());
  if (!view) throw wrongCode();
  await deps.limits.refund('userCodeSession', sessionKey);
  return view;
}

/** One attempt against a budget; the refusal speaks to a person, not to a client. */
async function spendAttempt(deps: PersonDecisionDeps, limit: 'userCodeSession' | 'userCodeAttempt', key: string): Promise<void> {
  try {
    await deps.limits.consume(limit, key);
  } catch (err) {
    if (isApiError(err) && err.code === 'rate_limited') {
      throw new ApiError('rate_limited', 'Too many wrong codes. Wait a few minutes, then try again.', undefined, err.headers);
    }
    throw err;
  }
}

function signedInPerson(session: PersonSession) {
  const person = session.data?.person;
  if (!person) throw new ApiError('authentication_required', 'Sign in first.');
  return person;
}

/**
 * The approval a typed code names: found, `used` (the code was issued here, but its approval was
 * decided, replaced by a newer request or lapsed: codes work once), or `unknown` (a typo, or a code
 * never issued). Telling the two apart lets a person who typed right know to ask for a new code;
 * it tells a guesser nothing a wrong guess would not (the index of a used code expires with its
 * approval's deadline, and every lookup is counted against the same budgets).
 */
async function lookUp(deps: PersonDecisionDeps, typed: string): Promise<{ snapshot: AgentSnapshot; host: HostRecord } | 'used' | 'unknown'> {
  const lookupKey = deps.userCodes.lookupKey(typed);
  if (lookupKey === null) return 'unknown';
  const agentId = await deps.store.findAgentIdByUserCode(lookupKey);
  if (agentId === null) return 'unknown';
  const snapshot = await deps.store.getAgent(agentId);
  const approval = snapshot?.agent.approval;
  // The index outlives a decided or replaced approval: the code must be the current approval's.
  if (!snapshot || !approval || approval.expiresAtMs <= deps.clock.nowMs() || !deps.userCodes.matches(typed, approval.id)) return 'used';
  const host = await deps.store.getHost(snapshot.agent.hostId);
  return host ? { snapshot, host } : 'used';
}

export interface PageDecision {
  agentId: string;
  approvalId: string;
  verdict: 'approve' | 'deny';
  /** The capabilities approved (the approval's others are denied); ignored for a denial. */
  capabilities: string[];
  /** The WebAuthn assertion (JSON) that proves presence, when an approved capability needs it. */
  webauthnResponse?: string | undefined;
  /** Which page the person decided on, for the audit trail: the code's page (default) or their inbox. */
  via?: 'approval_page' | 'inbox' | undefined;
}

/** What a person's decision on the page did, said back in full. */
interface PageDecisionOutcome {
  snapshot: AgentSnapshot;
  /** The approval's grants that are now active, with the constraints execute holds them to. */
  approved: Array<Pick<GrantRecord, 'capability' | 'constraints'>>;
  /** The approval's capabilities that were not approved (left unticked, or the whole approval denied). */
  notApproved: string[];
}

/**
 * Approves or denies, as the signed-in person, exactly the approval the page showed: the open one
 * of an agent this person decides for (decidesFor), through the same atomic transition as every
 * door (approvals/decide.ts). A capability that needs presence is approved only with a passkey
 * assertion whose challenge was issued for this approval; on a server where passkeys cannot work
 * it cannot be approved here at all (a 403 that says so, never a 5xx).
 */
export async function decideAsPerson(deps: PersonDecisionDeps, session: PersonSession, decision: PageDecision): Promise<PageDecisionOutcome> {
  const person = session.data?.person;
  if (!person || !deps.sessions.isFresh(session)) {
    throw new ApiError('authentication_required', 'Sign in again to decide: approvals need a recent sign-in.');
  }
  const snapshot = await deps.store.getAgent(decision.agentId);
  const host = snapshot ? await deps.store.getHost(snapshot.agent.hostId) : null;
  if (!snapshot || !host || !decidesFor(person.personId, host, snapshot.agent)) {
    throw new ApiError('not_found', 'This approval is no longer open.');
  }
  const shown = approvalForPerson(deps.catalog, host, snapshot, deps.clock.nowMs());
  if (shown === null && decision.verdict === 'approve' && (await awaitsHostLink(deps, snapshot, host, person.personId))) {
    // This person's approval was written but the store failed before its host was linked: sending
    // the form again finishes it (approvals/decide.ts approveAgent).
    const after = await approveAgent(deps, decision.agentId, { userId: person.personId, by: { actor: 'person', via: decision.via ?? 'approval_page' } });
    return { snapshot: after, approved: after.grants.filter((g) => g.status === 'active'), notApproved: [] };
  }
  if (shown === null || shown.approvalId !== decision.approvalId) throw alreadyDecided(shown !== null);
  if (decision.verdict === 'approve') {
    const needsPresence = shown.requested.filter((r) => r.approvalStrength === 'presence' && decision.capabilities.includes(r.capability));
    if (needsPresence.length > 0) {
      if (!deps.passkeys) {
        throw new ApiError('unauthorized', `Approving ${needsPresence.map((r) => r.capability).join(', ')} needs a passkey, which this server cannot use (its address is an IP address). Approve only the rest, or ask an administrator.`);
      }
      await verifyPresence(deps, session, decision.approvalId, decision.webauthnResponse);
    }
  }
  const asPerson = { userId: person.personId, approvalId: decision.approvalId, by: { actor: 'person', via: decision.via ?? 'approval_page' } as const };
  let after: AgentSnapshot;
  try {
    after = decision.verdict === 'approve'
      ? await approveAgent(deps, decision.agentId, { ...asPerson, capabilities: decision.capabilities })
      : await denyAgent(deps, decision.agentId, asPerson);
  } catch (err) {
    // Two windows (or two people, or a revocation) changed the agent at once: the transition let
    // one win; tell the other what happened instead of the protocol's refusal it ran into.
    if (!isApiError(err) || err.code === 'service_unavailable') throw err;
    const now = await deps.store.getAgent(decision.agentId);
    if (now?.agent.approval?.id === decision.approvalId) throw err;
    if (!now || now.agent.status === 'revoked' || now.agent.hostStatus === 'revoked') {
      throw new ApiError('invalid_request', 'This agent was revoked meanwhile: nothing was approved or denied.');
    }
    throw alreadyDecided(false);
  }
  const decidedIds = new Set(shown.requested.map((r) => r.grantId));
  const decided = after.grants.filter((g) => decidedIds.has(g.id));
  return {
    snapshot: after,
    approved: decided.filter((g) => g.status === 'active'),
    notApproved: decided.filter((g) => g.status !== 'active').map((g) => g.capability),
  };
}

function alreadyDecided(replaced: boolean): ApiError {
  return replaced
    ? new ApiError('invalid_request', 'The agent asked again since this page was shown: this request was replaced. Enter the new code it shows.')
    : new ApiError('invalid_request', 'This request was already decided, in another window or by someone else. Nothing was changed now.');
}
