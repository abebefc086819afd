// A signed-in person's own hosts, agents and approvals (DESIGN §8), behind both the people's API
// (http/people.ts) and the account page (http/device/account.ts): what the approval page does, and a little more,
// for the signed-in person, over their own hosts and agents only. "Mine" is decided here, once:
// a host is the person's while it is in their host links (store.listPersonHostIds) AND its record
// still names them (`userId`); its agents are theirs, except a delegated agent that acts for someone
// else. Anything else is answered exactly as if it did not exist (404), never 403, so the API does
// not tell one person which ids another person has.
//
// Decisions (approve, deny, a proactive grant) need a fresh sign-in, checked here rather than in
// the handler so no route can forget it. Revocations only take power away and need none.
import { grantCovers } from '../domain/constraints.ts';
import { pruneHistory } from '../domain/grant-history.ts';
import { agentRefusal } from '../domain/lifecycle.ts';
import { checkLiveGrantLimits } from '../domain/limits.ts';
import type { AgentSnapshot, Constraints, GrantRecord, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { PersonSession, SignedIn } from '../people/sessions.ts';
import { revokeAgentById } from './agents.ts';
import { approveAgent, denyAgent } from './approvals/decide.ts';
import { withoutGrants } from './approvals/open.ts';
import { approvalForPerson, decidesFor, sentTo, type ApprovalForPerson } from './approvals/view.ts';
import type { PersonServiceDepsOver, ServiceDepsOver } from './deps.ts';
import { confirmWithdrawal } from './durability.ts';
import { decideNewGrants, validateRequests } from './grant-decisions.ts';
import { revokeHost, withdrawHostTrust } from './hosts.ts';
import { transitionAgent } from './transitions.ts';
import type { AgentRecords, HostRecords, PersonRecords, PendingIndex, StoreBackend } from '../store/store.ts';

/** What a person's own account may touch of the store: the roles below, no others. */
type PersonAccountDeps = PersonServiceDepsOver<AgentRecords & HostRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;
type AccountDeps = ServiceDepsOver<AgentRecords & HostRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/** Which door a person came through, for the audit trail: their JSON API, or their account page. */
type PersonDoor = 'people_api' | 'account_page';

// One message per kind of id, the same whether the id is unknown or someone else's.
const noSuchHost = () => new ApiError('host_not_found', 'you have no host with this id');
const noSuchAgent = () => new ApiError('agent_not_found', 'you have no agent with this id');
const noSuchApproval = () => new ApiError('not_found', 'you have no open approval with this id');
const noSuchGrant = () => new ApiError('not_found', 'this agent of yours has no grant with this id');

/** The person the session is signed in as; 401 when nobody is. */
export function signedInPerson(session: PersonSession): SignedIn {
  const person = session.data?.person;
  if (!person) throw new ApiError('authentication_required', 'Sign in first (the approval page at /signin): this API uses its session.');
  return person;
}

/** The person, signed in recently enough to decide (SIGN_IN_FRESH_SECONDS); 401 otherwise. */
export function decidingPerson(deps: PersonAccountDeps, session: PersonSession): SignedIn {
  const person = signedInPerson(session);
  if (!deps.sessions.isFresh(session)) {
    throw new ApiError('authentication_required', 'Sign in again to decide: approvals and grants need a recent sign-in.');
  }
  return person;
}

// ---- what is mine -------------------------------------------------------------------------------

const isMyHost = (host: HostRecord | null, personId: string): host is HostRecord => host !== null && host.userId === personId;

/** A delegated agent acts for one person; on my host it is mine unless it names someone else. */
const isMyAgent = (snapshot: AgentSnapshot, personId: string) =>
  snapshot.agent.mode !== 'delegated' || snapshot.agent.userId === undefined || snapshot.agent.userId === personId;

/** My hosts: linked to me, and still naming me (an administrator may have linked one to someone else since). */
export async function myHosts(deps: AccountDeps, personId: string): Promise<HostRecord[]> {
  const hosts = await Promise.all((await deps.store.listPersonHostIds(personId)).map((id) => deps.store.getHost(id)));
  return hosts.filter((h) => isMyHost(h, personId));
}

async function myHost(deps: AccountDeps, personId: string, hostId: string): Promise<HostRecord> {
  const linked = await deps.store.listPersonHostIds(personId);
  if (!linked.includes(hostId)) throw noSuchHost();
  const host = await deps.store.getHost(hostId);
  if (!isMyHost(host, personId)) throw noSuchHost();
  return host;
}

interface MyAgent {
  host: HostRecord;
  snapshot: AgentSnapshot;
}

/** The most agents one call reads (GET /people/me/agents and /people/me/approvals): a bounded page. */
export const MAX_AGENTS_PER_PAGE = 200;
/** Agents read from the store at once while building a page. */
const READ_CONCURRENCY = 25;

export interface Page<T> {
  items: T[];
  /** Where the next page starts; null when this page read the last agent. */
  nextCursor: string | null;
}

/** A page cursor: the host and agent ids of the last agent a page read (ids never contain '/'). */
const cursorOf = (hostId: string, agentId: string) => `${hostId}/${agentId}`;
const CURSOR = /^([^/]{1,128})\/([^/]{1,128})$/;

/**
 * One page of the agents of my hosts, host by host and agent by agent in id order: at most `limit`
 * agent records are read, so a person with many hosts of many agents (up to AGENTS_PER_HOST_MAX
 * each) costs one bounded read per call, never all of them. `cursor` is a previous page's
 * nextCursor; an unreadable one is 400.
 */
export async function myAgents(deps: AccountDeps, personId: string, cursor: string | null = null, limit = MAX_AGENTS_PER_PAGE): Promise<Page<MyAgent>> {
  const budget = Math.min(Math.max(1, Math.trunc(limit)), MAX_AGENTS_PER_PAGE);
  const after = cursor === null ? null : CURSOR.exec(cursor);
  if (cursor !== null && after === null) throw new ApiError('invalid_request', 'cursor: must be a next_cursor this endpoint answered');
  const items: MyAgent[] = [];
  let read = 0;
  let last: string | null = null;
  for (const host of await myHosts(deps, personId)) {
    if (after && host.id < after[1]!) continue;
    const ids = (await deps.store.listHostAgentIds(host.id)).sort().filter((id) => !after || host.id > after[1]! || id > after[2]!);
    for (let start = 0; start < ids.length; start += READ_CONCURRENCY) {
      const chunk = ids.slice(start, Math.min(start + READ_CONCURRENCY, start + budget - read));
      const snapshots = await Promise.all(chunk.map((id) => deps.store.getAgent(id)));
      snapshots.forEach((snapshot) => {
        if (snapshot && isMyAgent(snapshot, personId)) items.push({ host, snapshot });
      });
      read += chunk.length;
      last = cursorOf(host.id, chunk[chunk.length - 1]!);
      if (read >= budget) return { items, nextCursor: last };
    }
  }
  return { items, nextCursor: null };
}

async function myAgent(deps: AccountDeps, personId: string, agentId: string): Promise<MyAgent> {
  const snapshot = await deps.store.getAgent(agentId);
  if (!snapshot || !isMyAgent(snapshot, personId)) throw noSuchAgent();
  const linked = await deps.store.listPersonHostIds(personId);
  if (!linked.includes(snapshot.agent.hostId)) throw noSuchAgent();
  const host = await deps.store.getHost(snapshot.agent.hostId);
  if (!isMyHost(host, personId)) throw noSuchAgent();
  return { host, snapshot };
}

/** What remembering a person who signed in touches: one store role's write, and the log. */
export interface RememberDeps {
  store: Pick<PersonRecords, 'savePersonContact'>;
  logger: Pick<Logger, 'warn'>;
}

/**
 * After a sign-in: the person's id, and the address their provider verified (if any), now name them
 * as a CIBA login_hint, and the address is where their notices go. A failure is logged, not
 * answered: the sign-in itself succeeded, and the next one saves it again.
 */
export async function rememberPerson(deps: RememberDeps, personId: string, verifiedEmail: string | undefined): Promise<void> {
  try {
    await deps.store.savePersonContact(personId, verifiedEmail);
  } catch (err) {
    deps.logger.warn('could not save how to reach a person who signed in; CIBA cannot name them until they sign in again', { personId, err });
  }
}

// ---- approvals ----------------------------------------------------------------------------------

/** One open approval of one of my agents: exactly what the approval page would show for its code. */
export type MyApproval = ApprovalForPerson;

/** The open approvals among one page of my agents (myAgents says what a page is). */
export async function myApprovals(deps: AccountDeps, personId: string, cursor: string | null = null): Promise<Page<MyApproval>> {
  const nowMs = deps.clock.nowMs();
  const page = await myAgents(deps, personId, cursor);
  const items = page.items
    .filter(({ host, snapshot }) => decidesFor(personId, host, snapshot.agent))
    .map(({ host, snapshot }) => approvalForPerson(deps.catalog, host, snapshot, nowMs))
    .filter((a): a is MyApproval => a !== null);
  return { items, nextCursor: page.nextCursor };
}

/**
 * One of my open approvals, by its id, read without listing anything: an approval's user code is
 * derived from its id, and the code's lookup index names the agent (services/approvals/user-codes.ts).
 */
export async function myOpenApproval(deps: AccountDeps, personId: string, approvalId: string): Promise<MyApproval> {
  const agentId = await deps.store.findAgentIdByUserCode(deps.userCodes.lookupKey(deps.userCodes.codeFor(approvalId))!);
  if (agentId === null) throw noSuchApproval();
  // Mine: an agent of one of my hosts, or one whose CIBA approval was sent to me (its host may be
  // linked to nobody yet: approving links it to me, as the approval page does).
  const snapshot = await deps.store.getAgent(agentId);
  const found = snapshot && sentTo(personId, snapshot.agent)
    ? { snapshot, host: await deps.store.getHost(snapshot.agent.hostId) }
    : await myAgent(deps, personId, agentId).catch(() => null);
  if (!found?.host) throw noSuchApproval();
  const { host } = found;
  const approval = decidesFor(personId, host, found.snapshot.agent) ? approvalForPerson(deps.catalog, host, found.snapshot, deps.clock.nowMs()) : null;
  if (approval === null || approval.approvalId !== approvalId) throw noSuchApproval();
  return approval;
}

/** Inbox items read at most per call; the inbox keeps INBOX_MAX_ITEMS, latest deadline first. */
export const MAX_INBOX_ITEMS_LISTED = 100;

/**
 * My inbox: the open CIBA approvals sent to me, latest deadline first, at most MAX_INBOX_ITEMS_LISTED.
 * An item decided, replaced or withdrawn since it was put there is left out (the inbox is an index;
 * the agent's record is the truth).
 */
export async function myInbox(deps: AccountDeps, personId: string): Promise<MyApproval[]> {
  const nowMs = deps.clock.nowMs();
  const ids = await deps.store.listInbox(personId, nowMs, MAX_INBOX_ITEMS_LISTED);
  const items: MyApproval[] = [];
  for (let start = 0; start < ids.length; start += READ_CONCURRENCY) {
    const snapshots = await Promise.all(ids.slice(start, start + READ_CONCURRENCY).map((id) => deps.store.getAgent(id)));
    for (const snapshot of snapshots) {
      if (!snapshot || !sentTo(personId, snapshot.agent)) continue;
      const host = await deps.store.getHost(snapshot.agent.hostId);
      const approval = host && decidesFor(personId, host, snapshot.agent) ? approvalForPerson(deps.catalog, host, snapshot, nowMs) : null;
      if (approval) items.push(approval);
    }
  }
  return items;
}

interface MyDecision {
  verdict: 'approve' | 'deny';
  /** The capabilities approved (the approval's others are denied); all of them when absent. Ignored for a denial. */
  capabilities?: string[] | undefined;
}

/**
 * Approves or denies one of my open approvals, by its id, through the same atomic transition as
 * the page and the admin API (approvals/decide.ts): bound to that approval id, so an approval
 * replaced meanwhile is not decided by a click on the old one.
 */
export async function decideMyApproval(deps: PersonAccountDeps, session: PersonSession, approvalId: string, decision: MyDecision): Promise<AgentSnapshot> {
  const person = decidingPerson(deps, session);
  const approval = await myOpenApproval(deps, person.personId, approvalId);
  const asPerson = { userId: person.personId, approvalId, by: { actor: 'person', via: 'people_api' } as const };
  if (decision.verdict === 'deny') return denyAgent(deps, approval.agent.id, asPerson);
  const offered = new Map(approval.requested.map((r) => [r.capability, r]));
  const chosen = decision.capabilities ?? [...offered.keys()];
  const outside = chosen.filter((name) => !offered.has(name));
  if (outside.length > 0) throw new ApiError('invalid_request', `not decided by this approval: ${outside.join(', ')}`);
  refusePresence(chosen.filter((name) => offered.get(name)!.approvalStrength === 'presence'));
  return approveAgent(deps, approval.agent.id, { ...asPerson, capabilities: chosen });
}

/**
 * DESIGN §8: a capability whose approval_strength is "presence" needs a fresh passkey assertion
 * bound to its approval. This API carries none, so it never approves or grants one: an agent that
 * holds a person's browser session could otherwise call it for itself.
 */
function refusePresence(names: string[]): void {
  if (names.length === 0) return;
  throw new ApiError('unauthorized', `approving ${names.join(', ')} needs proof of presence: approve it on the approval page with your passkey`);
}

// ---- grants -------------------------------------------------------------------------------------

interface ProactiveGrant {
  capability: string;
  constraints?: Constraints | undefined;
}

/**
 * A person grants a capability to one of their delegated agents without being asked. The policy
 * still decides (`request_capability`): what it denies (unknown or blocked capabilities, a revoked
 * host) no person can grant, and constraints it imposes narrow the grant, exactly as when the person
 * approves a request; "needs approval" is what this call is. Written in one transition over the
 * state it checked, so a racing revoke cannot be followed by the new grant.
 */
export async function grantToMyAgent(deps: PersonAccountDeps, session: PersonSession, agentId: string, request: ProactiveGrant): Promise<{ snapshot: AgentSnapshot; grant: GrantRecord }> {
  const person = decidingPerson(deps, session);
  const { host, snapshot } = await myAgent(deps, person.personId, agentId);
  if (snapshot.agent.mode !== 'delegated') throw new ApiError('unauthorized', 'this agent acts for no person: an administrator decides its capabilities');
  const capability = deps.catalog.get(request.capability);
  if (!capability) {
    throw new ApiError('invalid_capabilities', `unknown capability: ${request.capability}`, { invalid_capabilities: [request.capability] });
  }
  const requests = [{ name: request.capability, constraints: request.constraints }];
  validateRequests(deps, requests);
  let grant: GrantRecord | undefined;
  const after = await transitionAgent(deps.store, agentId, (current) => {
    const nowMs = deps.clock.nowMs();
    const refusal = agentRefusal(current.agent, current.sessionExpiresAtMs, nowMs);
    if (refusal) throw refusal;
    const covered = current.grants.some((g) => g.capability === request.capability && g.status === 'active' && grantCovers(g.constraints, request.constraints));
    if (covered) throw new ApiError('already_granted', `${request.capability} is already granted with these constraints or wider ones`);
    checkLiveGrantLimits(current.grants, [{ capability: request.capability }]);
    const [decided] = decideNewGrants(deps, {
      action: 'request_capability', host, agent: current.agent, requests, existing: current.grants, agentId, nowMs,
    });
    refusePresence(capability.approval_strength === 'presence' ? [request.capability] : []);
    // The policy's reason ("user approval required") is what the person just gave.
    const { reason: _policyReason, reasonBy: _reasonBy, ...fields } = decided!;
    grant = { ...fields, status: 'active', grantedBy: person.personId };
    return { replaceGrants: pruneHistory([...current.grants, grant]), set: { updatedAtMs: nowMs } };
  });
  deps.logger.info('capability granted by a person', { agentId, capability: request.capability, personId: person.personId, grantId: grant!.id });
  deps.audit.record({
    type: 'grant.granted', actor: 'person', via: 'people_api', person_id: person.personId, agent_id: agentId, host_id: host.id,
    capability: request.capability, grant_id: grant!.id, outcome: 'active',
  });
  return { snapshot: after, grant: grant! };
}

// ---- revocations --------------------------------------------------------------------------------

/** Revokes one of my agents and every grant it holds (protocol §4.7's effect); idempotent. */
export async function revokeMyAgent(deps: AccountDeps, personId: string, agentId: string, via: PersonDoor = 'people_api'): Promise<AgentSnapshot> {
  await myAgent(deps, personId, agentId);
  return revokeAgentById(deps, agentId, undefined, (result) => {
    deps.logger.info('agent revoked by a person', { agentId, personId });
    deps.audit.record({ type: 'agent.revoked', actor: 'person', via, person_id: personId, agent_id: agentId, host_id: result.agent.hostId });
  });
}

/**
 * Revokes one grant of one of my agents, by id: an active grant stops allowing at once (execute
 * reads grants on every call), a pending one leaves the approval that was to decide it. A grant
 * already revoked or denied is left as it is.
 */
export async function revokeMyGrant(
  deps: AccountDeps, personId: string, agentId: string, grantId: string, via: PersonDoor = 'people_api',
): Promise<{ snapshot: AgentSnapshot; grant: GrantRecord }> {
  await myAgent(deps, personId, agentId);
  let grant: GrantRecord | undefined;
  let changed = false;
  const snapshot = await transitionAgent(deps.store, agentId, (current) => {
    const found = current.grants.find((g) => g.id === grantId);
    if (!found) throw noSuchGrant();
    grant = found;
    changed = false;
    if (found.status !== 'active' && found.status !== 'pending') return null;
    changed = true;
    const nowMs = deps.clock.nowMs();
    grant = { ...found, status: 'revoked', updatedAtMs: nowMs };
    const approval = current.agent.approval;
    const approvalChange = found.status === 'pending' && approval
      ? { approval: withoutGrants(approval, new Set([found.id]), current.agent.status === 'pending') }
      : {};
    return { upsertGrants: [grant], set: { updatedAtMs: nowMs, ...approvalChange } };
  });
  deps.logger.info('grant revoked by a person', { agentId, grantId, personId });
  if (changed) {
    deps.audit.record({
      type: 'grant.revoked', actor: 'person', via, person_id: personId, agent_id: agentId, host_id: snapshot.agent.hostId,
      capability: grant!.capability, grant_ids: [grantId],
    });
  }
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the revocation');
  return { snapshot, grant: grant! };
}

/** Revokes one of my hosts and, with it, every agent it has (protocol §4.10's effect). */
export async function revokeMyHost(deps: AccountDeps, personId: string, hostId: string, via: PersonDoor = 'people_api') {
  return revokeHost(deps, await myHost(deps, personId, hostId), { actor: 'person', via, person_id: personId });
}

/**
 * Unlinks one of my hosts: I no longer vouch for it, so it gets nothing more without a new approval
 * and every agent it runs is revoked (services/hosts.ts withdrawHostTrust says why and in which
 * order). The host is not revoked: nothing says its key is compromised, and someone may vouch for it
 * again by approving one of its agents.
 */
export async function unlinkMyHost(deps: AccountDeps, personId: string, hostId: string, via: PersonDoor = 'people_api'): Promise<{ host: HostRecord; agentsRevoked: number }> {
  return withdrawHostTrust(deps, await myHost(deps, personId, hostId), { actor: 'person', via, person_id: personId });
}
