// The approval page's use cases (protocol §10, DESIGN §8): a signed-in person enters the code an
// agent's host showed them, sees exactly what that approval decides, and approves all, some or none.
// The code is checked against the approval it names (never stored; services/user-codes.ts), wrong
// codes are counted per session and per address, and the decision goes through the same atomic
// transition as every approval, bound to the approval id the person was shown.
import type { AgentRecord, Constraints, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { approveAgent, denyAgent } from './admin.ts';
import type { ServiceDeps } from './deps.ts';
import type { PasskeySettings } from './passkeys.ts';
import { verifyPresence } from './passkeys.ts';
import { MAX_FAILED_CODE_LOOKUPS, type PersonSession, type Sessions } from './people.ts';

/** One capability the approval decides, as the person sees it. */
export interface RequestedForPerson {
  capability: string;
  description: string;
  constraints: Constraints | undefined;
  reason: string | undefined;
  /** Approving it needs proof of presence (a passkey), not only a fresh sign-in. */
  presence: boolean;
}

/** What the page shows about one open approval. */
export interface ApprovalForPerson {
  agent: Pick<AgentRecord, 'id' | 'name' | 'mode' | 'reason' | 'status'>;
  host: Pick<HostRecord, 'id' | 'name'>;
  approvalId: string;
  expiresAtMs: number;
  /** True when the agent itself waits (a registration), not only some of its grants. */
  registration: boolean;
  requested: RequestedForPerson[];
}

export interface PageDeps extends ServiceDeps {
  sessions: Sessions;
  /** WebAuthn settings for presence approvals; null when the issuer's host cannot be an RP id. */
  passkeys: PasskeySettings | null;
}

const wrongCode = () => new ApiError('invalid_request', 'That code is not valid. Check it against the one your agent shows and try again.');

/**
 * The approval a typed code names, for a signed-in person. Refused, and counted as a failed
 * attempt, when the code is malformed, unknown, expired or replaced; refused outright when this
 * session or this address has tried too many.
 */
export async function findApprovalByCode(deps: PageDeps, session: PersonSession, typed: string, clientIp: string): Promise<ApprovalForPerson> {
  if (deps.sessions.recentFailedLookups(session) >= MAX_FAILED_CODE_LOOKUPS) {
    throw new ApiError('rate_limited', 'Too many wrong codes. Wait a few minutes, then try again.', undefined, { 'Retry-After': '900' });
  }
  await deps.limits.consume('userCodeAttempt', clientIp);
  const found = await lookUp(deps, typed);
  if (!found) {
    deps.sessions.recordFailedLookup(session);
    throw wrongCode();
  }
  const person = session.data.person!;
  const { snapshot, host } = found;
  const { agent } = snapshot;
  // A delegated agent acts for its host's person: once the host is linked, only that person decides.
  if (host.userId !== undefined && host.userId !== person.personId) throw wrongCode();
  if (agent.mode !== 'delegated') {
    throw new ApiError('unauthorized', 'This agent acts for no person: an administrator approves it.');
  }
  const approval = agent.approval!;
  const decides = new Set(approval.grantIds);
  return {
    agent: { id: agent.id, name: agent.name, mode: agent.mode, reason: agent.reason, status: agent.status },
    host: { id: host.id, name: host.name },
    approvalId: approval.id,
    expiresAtMs: approval.expiresAtMs,
    registration: agent.status === 'pending',
    requested: snapshot.grants
      .filter((g) => g.status === 'pending' && decides.has(g.id))
      .map((g) => ({
        capability: g.capability,
        description: deps.catalog.get(g.capability)?.description ?? '(this capability is no longer offered)',
        constraints: g.constraints,
        reason: g.reason,
        presence: deps.catalog.get(g.capability)?.approval_strength === 'presence',
      })),
  };
}

async function lookUp(deps: PageDeps, typed: string) {
  const lookupKey = deps.userCodes.lookupKey(typed);
  if (lookupKey === null) return null;
  const agentId = await deps.store.findAgentIdByUserCode(lookupKey);
  if (agentId === null) return null;
  const snapshot = await deps.store.getAgent(agentId);
  const approval = snapshot?.agent.approval;
  // The index outlives a decided or replaced approval: the code must be the current approval's.
  if (!snapshot || !approval || approval.expiresAtMs <= deps.clock.nowMs() || !deps.userCodes.matches(typed, approval.id)) return null;
  const host = await deps.store.getHost(snapshot.agent.hostId);
  return host ? { snapshot, host } : null;
}

export interface PageDecision {
  agentId: string;
  approvalId: string;
  verdict: 'approve' | 'deny';
  /** The capabilities approved (the approval's others are denied); ignored for a denial. */
  capabilities: string[];
  /** The WebAuthn assertion (JSON) that proves presence, when an approved capability needs it. */
  webauthnResponse?: string | undefined;
}

/** Approves or denies, as the signed-in person, exactly the approval the page showed. */
export async function decideAsPerson(deps: PageDeps, session: PersonSession, decision: PageDecision) {
  const person = session.data.person;
  if (!person || !deps.sessions.isFresh(session)) {
    throw new ApiError('authentication_required', 'Sign in again to decide: approvals need a recent sign-in.');
  }
  const snapshot = await deps.store.getAgent(decision.agentId);
  const host = snapshot ? await deps.store.getHost(snapshot.agent.hostId) : null;
  if (!snapshot || !host || (host.userId !== undefined && host.userId !== person.personId) || snapshot.agent.mode !== 'delegated') {
    throw new ApiError('not_found', 'This approval is no longer open.');
  }
  if (decision.verdict === 'approve') {
    const decided = new Set(snapshot.agent.approval?.id === decision.approvalId ? snapshot.agent.approval.grantIds : []);
    const needsPresence = snapshot.grants.some((g) => decided.has(g.id) && g.status === 'pending'
      && decision.capabilities.includes(g.capability) && deps.catalog.get(g.capability)?.approval_strength === 'presence');
    if (needsPresence) await verifyPresence(deps, session, decision.approvalId, decision.webauthnResponse);
  }
  const asPerson = { userId: person.personId, approvalId: decision.approvalId, by: { actor: 'person', via: 'approval_page' } as const };
  const after = decision.verdict === 'approve'
    ? await approveAgent(deps, decision.agentId, { ...asPerson, capabilities: decision.capabilities })
    : await denyAgent(deps, decision.agentId, asPerson);
  // What this decision decided: the grants of the approval the person was shown (the check above
  // made sure it is the open one), as they are now.
  const decidedIds = new Set(snapshot.agent.approval?.id === decision.approvalId ? snapshot.agent.approval.grantIds : []);
  const decided = after.grants.filter((g) => decidedIds.has(g.id));
  return {
    snapshot: after,
    approved: decided.filter((g) => g.status === 'active').map((g) => g.capability),
    denied: decided.filter((g) => g.status === 'denied').map((g) => g.capability),
  };
}
