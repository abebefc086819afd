// Deciding an approval: the one place where what an agent's open approval waits on becomes active
// or denied (DESIGN §8). Every door decides through approveAgent and denyAgent: the approval page
// and the people's API (approvals/by-person.ts, services/person-account.ts) and the admin API
// (http/admin.ts). A decision applies to exactly the grant ids the approval was created for, is
// written by one atomic transition (services/transitions.ts) over the state it decides on, and is
// recorded in the audit trail with who decided and through which door.
import type { AuditBy } from '../../audit/events.ts';
import { validateConstraints } from '../../domain/constraints.ts';
import { activationClocks, lifetimeSettings, statusRefusal } from '../../domain/lifecycle.ts';
import type { AgentSnapshot, GrantRecord, HostRecord } from '../../domain/types.ts';
import { ApiError } from '../../errors.ts';
import type { AgentChange, AgentRecords, HostRecords, PendingIndex, PersonRecords, StoreBackend } from '../../store/store.ts';
import { releasePendingSlot } from '../agents.ts';
import type { ServiceDepsOver } from '../deps.ts';
import { confirmWithdrawal } from '../durability.ts';
import { activateHost, linkHost } from '../hosts.ts';
import { transitionAgent } from '../transitions.ts';
import type { UserCodes } from './user-codes.ts';

/** What deciding an approval may touch of the store: the roles below, no others. */
type DecisionDeps = ServiceDepsOver<AgentRecords & HostRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/** What a person (or the admin acting for one) decided about an agent's open approval. */
interface ApprovalDecision {
  /** The capabilities to approve (all of the approval's when absent); the approval's others are denied. */
  capabilities?: string[] | undefined;
  userId: string;
  /** The code the approver was shown: when given, it must name the agent's open approval. */
  userCode?: string | undefined;
  /** The approval the approver was shown (the approval page): when given, it must be the open one. */
  approvalId?: string | undefined;
  /** Who decides, for the audit trail; default: the admin API (acting for `userId`). */
  by?: AuditBy | undefined;
}

const ADMIN_API: AuditBy = { actor: 'admin', via: 'admin_api' };

/**
 * Approves what the agent's open approval waits on: its registration and/or exactly the grant ids
 * it was created for (DESIGN §8), the named capabilities becoming active and the rest denied.
 * Approving a delegated agent of an unlinked host links the host to the approving user.
 */
export async function approveAgent(deps: DecisionDeps, agentId: string, decision: ApprovalDecision) {
  const before = await deps.store.getAgent(agentId);
  if (!before) throw new ApiError('agent_not_found', 'no agent has this id');
  const host = await deps.store.getHost(before.agent.hostId);
  if (!host) throw new ApiError('host_not_found', "the agent's host does not exist");
  if (host.status === 'revoked' || host.status === 'rejected') throw new ApiError('host_revoked', "the agent's host can no longer be approved");
  const by = { ...(decision.by ?? ADMIN_API), person_id: decision.userId };
  // The approval was written but linking its host was not finished (the store failed in between):
  // the agent's record names this person as its approver, so the same person asking again finishes it.
  if (await awaitsHostLink(deps, before, host, decision.userId)) return completeHostLink(deps, before, host, decision.userId, by);
  const nowMs = deps.clock.nowMs();
  let decided: AgentChange | null = null;
  const snapshot = await transitionAgent(deps.store, agentId, (current) => (decided = approvalChange(deps, current, decision, nowMs)));
  recordDecision(deps, 'approval.approved', snapshot, decided, by);
  await releasePendingSlot(deps, snapshot);
  return completeHostLink(deps, snapshot, host, decision.userId, by);
}

/**
 * Whether an agent this person approved still waits for its host's link to be finished: the
 * approval is written (active, no open approval, this person named as its person) while the host is
 * pending or unlinked, or linked to this person without every step of the link done (the agent's
 * copy of the host status, the person's list of hosts). Until then the agent either cannot act (its
 * copy of the host status is not active) or acts unseen by its person; finishing is idempotent.
 */
export async function awaitsHostLink(deps: { store: Pick<PersonRecords, 'listPersonHostIds'> }, snapshot: AgentSnapshot, host: HostRecord, userId: string): Promise<boolean> {
  const { agent } = snapshot;
  if (agent.status !== 'active' || agent.approval || agent.mode !== 'delegated' || agent.userId !== userId) return false;
  if (host.status === 'pending' || host.userId === undefined) return true;
  if (host.userId !== userId) return false;
  return agent.hostStatus !== 'active' || !(await deps.store.listPersonHostIds(userId)).includes(host.id);
}

/**
 * After an approval: a pending host becomes active, and the host of a delegated agent is linked to
 * the person who approved it. Written after the agent (so a failure here leaves the agent unable to
 * act, never the host vouched for without an approval), and idempotent (linkHost redoes every step),
 * so asking again finishes it.
 */
async function completeHostLink(deps: DecisionDeps, snapshot: AgentSnapshot, host: HostRecord, userId: string, by: AuditBy) {
  const delegated = snapshot.agent.mode === 'delegated';
  const unfinished = delegated && host.userId === userId && (await awaitsHostLink(deps, snapshot, host, userId));
  if (host.status === 'pending' || (delegated && host.userId === undefined) || unfinished) {
    if (delegated) await linkHost(deps, host, userId, by);
    else await activateHost(deps, host, by);
  }
  return (await deps.store.getAgent(snapshot.agent.id)) ?? snapshot;
}

/** Denies what the agent's open approval waits on: a pending agent becomes rejected, its grants denied. */
export async function denyAgent(deps: DecisionDeps, agentId: string, decision: Omit<ApprovalDecision, 'capabilities'>) {
  const nowMs = deps.clock.nowMs();
  let decided: AgentChange | null = null;
  const snapshot = await transitionAgent(deps.store, agentId, (current) => (decided = denialChange(deps.userCodes, current, decision, nowMs)));
  recordDecision(deps, 'approval.denied', snapshot, decided, { ...(decision.by ?? ADMIN_API), person_id: decision.userId });
  await releasePendingSlot(deps, snapshot);
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the denial', "read the agent's status shortly, and deny again if it waits for approval again");
  return snapshot;
}

/** An approval decided: what became active and what denied, and whether the agent itself waited. */
function recordDecision(deps: DecisionDeps, type: 'approval.approved' | 'approval.denied', after: AgentSnapshot, change: AgentChange | null, by: AuditBy): void {
  const grants = change?.upsertGrants ?? [];
  deps.audit.record({
    type, ...by, agent_id: after.agent.id, host_id: after.agent.hostId, outcome: after.agent.status,
    approved: grants.filter((g) => g.status === 'active').map((g) => g.capability),
    denied: grants.filter((g) => g.status === 'denied').map((g) => g.capability),
  });
}


/**
 * The grants an approval decision applies to: exactly those of the agent's open approval, which
 * must still be open and, when the approver names a code, be the one that code shows. Decided on
 * the state the change is written over, so a host revoked meanwhile cannot be approved into.
 */
function decidedGrants(userCodes: UserCodes, current: AgentSnapshot, decision: ApprovalDecision, nowMs: number): GrantRecord[] {
  const { agent, grants } = current;
  if (agent.hostStatus === 'revoked' || agent.hostStatus === 'rejected') throw new ApiError('host_revoked', "the agent's host can no longer be approved");
  if (agent.status !== 'pending' && agent.status !== 'active') throw statusRefusal({ status: agent.status })!;
  const approval = agent.approval;
  if (!approval) throw new ApiError('invalid_request', 'the agent has nothing awaiting approval (it was decided already, or never asked)');
  if (decision.userCode !== undefined && !userCodes.matches(decision.userCode, approval.id)) {
    throw new ApiError('invalid_request', "the user code does not name the agent's open approval (it was superseded by a newer request, or never existed)");
  }
  if (decision.approvalId !== undefined && decision.approvalId !== approval.id) {
    throw new ApiError('invalid_request', 'this approval was replaced by a newer request; look at the new code');
  }
  if (approval.expiresAtMs <= nowMs) throw new ApiError('expired_token', 'the approval has expired; the agent must ask again');
  const decides = new Set(approval.grantIds);
  return grants.filter((g) => g.status === 'pending' && decides.has(g.id));
}

const denied = (g: GrantRecord, userId: string, nowMs: number): GrantRecord => ({ ...g, status: 'denied', deniedBy: userId, updatedAtMs: nowMs });

/** Approval: the chosen capabilities' grants become active (the rest denied) and a pending agent active. */
function approvalChange(deps: DecisionDeps, current: AgentSnapshot, decision: ApprovalDecision, nowMs: number): AgentChange {
  const pending = decidedGrants(deps.userCodes, current, decision, nowMs);
  const chosen = new Set(decision.capabilities ?? pending.map((g) => g.capability));
  // An operator may have been removed (or its schema tightened) since the grant was requested.
  validateConstraints(pending.filter((g) => chosen.has(g.capability)).map((g) => ({ capability: g.capability, constraints: g.constraints })), deps.operators, deps.catalog.declaredArguments);
  const decided = pending.map((g): GrantRecord =>
    chosen.has(g.capability) ? { ...g, status: 'active', grantedBy: decision.userId, updatedAtMs: nowMs } : denied(g, decision.userId, nowMs),
  );
  const { agent } = current;
  if (agent.status === 'active') return { upsertGrants: decided, set: { approval: null, updatedAtMs: nowMs } };
  const clocks = activationClocks(nowMs, lifetimeSettings(deps.config));
  return {
    upsertGrants: decided,
    set: {
      status: 'active',
      approval: null,
      activatedAtMs: clocks.activatedAtMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      ...(agent.mode === 'delegated' ? { userId: decision.userId } : {}),
      updatedAtMs: nowMs,
    },
    sessionExpiresAtMs: clocks.sessionExpiresAtMs,
  };
}

/** Denial: the approval's grants become denied, and a pending agent rejected (final). */
function denialChange(userCodes: UserCodes, current: AgentSnapshot, decision: ApprovalDecision, nowMs: number): AgentChange {
  const decided = decidedGrants(userCodes, current, decision, nowMs).map((g) => denied(g, decision.userId, nowMs));
  if (current.agent.status === 'active') return { upsertGrants: decided, set: { approval: null, updatedAtMs: nowMs } };
  return { upsertGrants: decided, set: { status: 'rejected', approval: null, updatedAtMs: nowMs } };
}

