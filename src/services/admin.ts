// The administrator's operations (DESIGN §8) and the approval core every door shares (the page, the
// people's API and the admin API decide through approveAgent and denyAgent): pre-register, link and
// unlink hosts, approve, deny or revoke agents, list what waits for a person, say which operators
// are loaded, and the test hooks that move an agent's clocks.
import { basename } from 'node:path';
import { jwkThumbprint, parsePublicJwk } from '../auth/keys.ts';
import type { AuditBy } from '../domain/audit.ts';
import { validateConstraints } from '../domain/constraints.ts';
import { activationClocks, lifetimeSettings, statusRefusal } from '../domain/lifecycle.ts';
import type { AgentSnapshot, GrantRecord, HostRecord } from '../domain/types.ts';
import { byRegistrationTime, whatAgentWaitsFor, type WaitingAgent } from '../domain/waiting.ts';
import { ApiError } from '../errors.ts';
import type { AgentChange } from '../store/store.ts';
import { releasePendingSlot, revokeAgentById } from './agents.ts';
import type { ServiceDeps } from './deps.ts';
import { activateHost, linkHost, withdrawHostTrust } from './hosts.ts';
import { newHostId } from './ids.ts';
import { confirmWithdrawal } from './durability.ts';
import { transitionAgent } from './transitions.ts';
import type { UserCodes } from './user-codes.ts';

export interface PreRegisterHost {
  publicKey: unknown;
  name?: string | undefined;
  defaultCapabilities: string[];
  userId: string;
}

export async function preRegisterHost(deps: ServiceDeps, request: PreRegisterHost): Promise<HostRecord> {
  const { jwk } = parsePublicJwk(request.publicKey, deps.config.ALGORITHMS, 'public_key');
  const unknown = request.defaultCapabilities.filter((name) => !deps.catalog.has(name));
  if (unknown.length > 0) {
    throw new ApiError('invalid_capabilities', `unknown default capabilities: ${unknown.join(', ')}`, { invalid_capabilities: unknown });
  }
  // DESIGN §8: a capability that needs presence is never pre-approved, so it cannot be a default.
  const presence = request.defaultCapabilities.filter((name) => deps.catalog.get(name)?.approval_strength === 'presence');
  if (presence.length > 0) {
    throw new ApiError('invalid_capabilities', `${presence.join(', ')} need${presence.length === 1 ? 's' : ''} a person with their passkey for every approval, so cannot be default capabilities`, { invalid_capabilities: presence });
  }
  const nowMs = deps.clock.nowMs();
  const { host, created } = await deps.store.createHost({
    id: newHostId(),
    thumbprint: jwkThumbprint(jwk),
    publicJwk: jwk,
    ...(request.name ? { name: request.name } : {}),
    status: 'active',
    defaultCapabilities: request.defaultCapabilities,
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    activatedAtMs: nowMs,
  });
  const byAdmin = { actor: 'admin', via: 'admin_api' } as const;
  if (created) deps.audit.record({ type: 'host.registered', ...byAdmin, host_id: host.id, person_id: request.userId, outcome: host.status, default_capabilities: request.defaultCapabilities });
  if (host.status === 'revoked' || host.status === 'rejected') throw new ApiError('host_revoked', 'this host key belongs to a revoked host');
  // Linked to someone else: that person's trust is withdrawn first (their agents revoked), so no
  // agent keeps acting for a person who no longer answers for the host.
  const current = created || host.userId === undefined || host.userId === request.userId ? host : (await withdrawHostTrust(deps, host, byAdmin)).host;
  // Only a live host takes new defaults; a revoked one is refused by linkHost just below.
  if (!created) await deps.store.updateHost(host.id, { defaultCapabilities: request.defaultCapabilities, updatedAtMs: nowMs }, ['pending', 'active']);
  return linkHost(deps, { ...current, defaultCapabilities: request.defaultCapabilities }, request.userId, byAdmin);
}

/** What a person (or the admin acting for one) decided about an agent's open approval. */
export interface ApprovalDecision {
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
export async function approveAgent(deps: ServiceDeps, agentId: string, decision: ApprovalDecision) {
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
export async function awaitsHostLink(deps: Pick<ServiceDeps, 'store'>, snapshot: AgentSnapshot, host: HostRecord, userId: string): Promise<boolean> {
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
async function completeHostLink(deps: ServiceDeps, snapshot: AgentSnapshot, host: HostRecord, userId: string, by: AuditBy) {
  const delegated = snapshot.agent.mode === 'delegated';
  const unfinished = delegated && host.userId === userId && (await awaitsHostLink(deps, snapshot, host, userId));
  if (host.status === 'pending' || (delegated && host.userId === undefined) || unfinished) {
    if (delegated) await linkHost(deps, host, userId, by);
    else await activateHost(deps, host, by);
  }
  return (await deps.store.getAgent(snapshot.agent.id)) ?? snapshot;
}

/** Denies what the agent's open approval waits on: a pending agent becomes rejected, its grants denied. */
export async function denyAgent(deps: ServiceDeps, agentId: string, decision: Omit<ApprovalDecision, 'capabilities'>) {
  const nowMs = deps.clock.nowMs();
  let decided: AgentChange | null = null;
  const snapshot = await transitionAgent(deps.store, agentId, (current) => (decided = denialChange(deps.userCodes, current, decision, nowMs)));
  recordDecision(deps, 'approval.denied', snapshot, decided, { ...(decision.by ?? ADMIN_API), person_id: decision.userId });
  await releasePendingSlot(deps, snapshot);
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the denial', "read the agent's status shortly, and deny again if it waits for approval again");
  return snapshot;
}

/** An approval decided: what became active and what denied, and whether the agent itself waited. */
function recordDecision(deps: ServiceDeps, type: 'approval.approved' | 'approval.denied', after: AgentSnapshot, change: AgentChange | null, by: AuditBy): void {
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
function approvalChange(deps: ServiceDeps, current: AgentSnapshot, decision: ApprovalDecision, nowMs: number): AgentChange {
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

/** An administrator withdraws a person's link (or any trust) from a host: services/hosts.ts withdrawHostTrust. */
export async function unlinkHost(deps: ServiceDeps, hostId: string) {
  const host = await deps.store.getHost(hostId);
  if (!host) throw new ApiError('host_not_found', 'no host has this id');
  return withdrawHostTrust(deps, host, ADMIN_API);
}

/** Ends the agent's session now, as if its session TTL had elapsed. */
export async function expireAgent(deps: ServiceDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  const snapshot = await transitionAgent(deps.store, agentId, () => ({ sessionExpiresAtMs: nowMs - 1, set: { updatedAtMs: nowMs } }));
  deps.keys.invalidate(agentId);
  deps.audit.record({ type: 'agent.expired', ...ADMIN_API, agent_id: agentId, host_id: snapshot.agent.hostId });
  return snapshot;
}

/** Test hook (INSECURE_TEST_HOOKS): makes the absolute lifetime elapse now. */
export async function exceedAbsoluteLifetime(deps: ServiceDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  return transitionAgent(deps.store, agentId, () => ({ set: { absoluteExpiresAtMs: nowMs - 1, updatedAtMs: nowMs } }));
}

/** Revokes the agent and every grant it holds, as its host's revoke does; idempotent. */
export async function revokeAgent(deps: ServiceDeps, agentId: string): Promise<AgentSnapshot> {
  return revokeAgentById(deps, agentId, undefined, (snapshot) => {
    deps.logger.info('agent revoked by the admin', { agentId, hostId: snapshot.agent.hostId });
    deps.audit.record({ type: 'agent.revoked', ...ADMIN_API, agent_id: agentId, host_id: snapshot.agent.hostId });
  });
}

/** The most agents GET /admin/approvals reads and answers in one call. */
export const MAX_LISTED_APPROVALS = 500;
/** Agents read from the store at once while building the list: bounded, so one call cannot flood it. */
const READ_CONCURRENCY = 25;

export interface WaitingList {
  waiting: WaitingAgent[];
  /** True when more agents may wait than were listed (a list came back full). */
  truncated: boolean;
}

/**
 * Agents waiting for a person: pending ones, and active ones whose open approval still has grants
 * to decide. The store already tracks both (for the clean-up job), oldest first; at most `limit`
 * of each kind are read.
 */
export async function listWaitingAgents(deps: ServiceDeps, limit: number): Promise<WaitingList> {
  const bounded = Math.min(Math.max(1, Math.trunc(limit)), MAX_LISTED_APPROVALS);
  const [pendingIds, approvalIds] = await Promise.all([
    deps.store.listStalePending('agent', Number.MAX_SAFE_INTEGER, bounded),
    deps.store.listStalePending('approval', Number.MAX_SAFE_INTEGER, bounded),
  ]);
  const ids = [...new Set([...pendingIds, ...approvalIds])];
  const nowMs = deps.clock.nowMs();
  const waiting: WaitingAgent[] = [];
  for (let start = 0; start < ids.length; start += READ_CONCURRENCY) {
    const snapshots = await Promise.all(ids.slice(start, start + READ_CONCURRENCY).map((id) => deps.store.getAgent(id)));
    for (const snapshot of snapshots) {
      const item = snapshot ? whatAgentWaitsFor(snapshot, nowMs) : null;
      if (item) waiting.push(item);
    }
  }
  waiting.sort(byRegistrationTime);
  const full = pendingIds.length >= bounded || approvalIds.length >= bounded || waiting.length > bounded;
  return { waiting: waiting.slice(0, bounded), truncated: full };
}

export interface LoadedOperator {
  name: string;
  kind: 'built-in' | 'plugin';
  description: string;
  /** The plugin's file name, without its directory ('built-in' for the others). */
  source: string;
}

/** Every operator the registry knows now (after the latest reload), built-ins first. */
export function listOperators(deps: ServiceDeps): LoadedOperator[] {
  return deps.operators.names().map((name) => {
    const definition = deps.operators.get(name)!;
    const plugin = deps.operators.isPlugin(name);
    // The file name says which plugin it is; the server's directory layout is nobody's business.
    return { name, kind: plugin ? 'plugin' : 'built-in', description: definition.description, source: plugin ? basename(definition.source) : 'built-in' };
  });
}
