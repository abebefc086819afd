// Host- and agent-authenticated operations on one agent: status (§4.5), reactivate (§4.6),
// revoke (§4.7), rotate-key (§4.8), request-capability (§4.4) and revoke-capability (Docs).
import { identifyCaller } from '../auth/caller.ts';
import { parsePublicJwk, jwkThumbprint } from '../auth/keys.ts';
import type { VerifiedAgent } from '../auth/agent-auth.ts';
import type { VerifiedHost } from '../auth/host-auth.ts';
import { grantCovers } from '../domain/constraints.ts';
import { historyAfterReactivation, pruneHistory } from '../domain/grant-history.ts';
import { activationClocks, agentRefusal, effectiveStatus, lifetimeSettings, statusRefusal } from '../domain/lifecycle.ts';
import { checkLiveGrantLimits } from '../domain/limits.ts';
import type { AgentSnapshot, ApprovalRecord, GrantRecord, HostRecord } from '../domain/types.ts';
import { ApiError, isApiError } from '../errors.ts';
import type { ApprovalHints } from '../domain/approval-method.ts';
import { approvalRouteFor, type ApprovalRoute } from './approvals/ciba.ts';
import { indexOpenApproval, newApproval, withoutGrants } from './approvals/open.ts';
import type { ServiceDepsOver } from './deps.ts';
import { forgetCachedKeyEverywhere } from './key-invalidation.ts';
import { decideNewGrants, dedupeRequests, validateRequests, type RequestedCapability } from './grant-decisions.ts';
import { confirmWithdrawal } from './durability.ts';
import { transitionAgent } from './transitions.ts';
import type { AgentRecords, HostRecords, PendingIndex, PersonRecords, ReplayRecords, StoreBackend } from '../store/store.ts';

/** What operations on one agent may touch of the store: the roles below, no others. */
/** What ending an agent (and freeing its host's pending slot) touches; every door's revocation shares it. */
type WithdrawalDeps = ServiceDepsOver<AgentRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;
type AgentDeps = ServiceDepsOver<AgentRecords & HostRecords & ReplayRecords & PendingIndex & Pick<PersonRecords, 'findPersonByHint' | 'addToInbox' | 'getPersonEmail'> & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/** The agent named by a host request, which must belong to that host (403 unauthorized). */
async function ownedAgent(deps: AgentDeps, verified: VerifiedHost, agentId: string): Promise<AgentSnapshot> {
  const snapshot = await deps.store.getAgent(agentId);
  if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
  if (snapshot.agent.hostId !== verified.host?.id) throw new ApiError('unauthorized', 'the agent does not belong to this host');
  return snapshot;
}

function assertOwner(verified: VerifiedHost, snapshot: AgentSnapshot): void {
  if (snapshot.agent.hostId !== verified.host?.id) throw new ApiError('unauthorized', 'the agent does not belong to this host');
}

// Protocol §4.5: GET /agent/status. Pending hosts may poll (docs/stances.md).
export async function agentStatus(deps: AgentDeps, token: string | null, agentId: string): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: true, limit: 'status' });
  const snapshot = await ownedAgent(deps, verified, agentId);
  await refuseFastPolling(deps, snapshot);
  return snapshot;
}

/**
 * RFC 8628 §3.5 slow_down: a client polling an agent that waits for approval much faster than the
 * approval's interval is told to wait. "Much faster" is within half the interval of the last poll
 * that was answered, so a client polling at the interval (as the official SDK does), with network
 * jitter, never sees it.
 */
async function refuseFastPolling(deps: AgentDeps, snapshot: AgentSnapshot): Promise<void> {
  const approval = snapshot.agent.approval;
  const waiting = approval !== undefined && approval.expiresAtMs > deps.clock.nowMs()
    && (snapshot.agent.status === 'pending' || snapshot.grants.some((g) => g.status === 'pending'));
  if (!waiting) return;
  const intervalSeconds = approval.intervalSeconds;
  if (await deps.store.recordStatusPoll(snapshot.agent.id, (intervalSeconds * 1000) / 2)) return;
  throw new ApiError('slow_down', `poll at most every ${intervalSeconds} s (the approval's interval)`, undefined, { 'Retry-After': String(intervalSeconds) });
}

/** What `POST /agent/device/code` answers: a fresh RFC 8628 code for an agent waiting for approval. */
export interface DeviceCode {
  snapshot: AgentSnapshot;
  approval: ApprovalRecord;
}

// Ref extension POST /agent/device/code (docs/protocol.md §3.2): a host asks for a fresh code for its
// agent that waits for approval (the old code lapsed, or was lost). The new approval decides the
// same pending grants (and registration); the old code stops working. A pending host may ask too:
// its agents are the ones waiting (docs/stances.md). A denied agent's answer is final.
export async function newDeviceCode(deps: AgentDeps, token: string | null, agentId: string): Promise<DeviceCode> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: true, limit: 'status' });
  await ownedAgent(deps, verified, agentId);
  const snapshot = await transitionAgent(deps.store, agentId, (current) => {
    assertOwner(verified, current);
    const { agent, grants } = current;
    if (agent.status === 'rejected') throw new ApiError('access_denied', 'the registration was denied; the decision is final');
    const pendingIds = grants.filter((g) => g.status === 'pending').map((g) => g.id);
    const waiting = agent.status === 'pending' || (agent.status === 'active' && pendingIds.length > 0);
    if (!waiting) {
      const refusal = agentRefusal(agent, current.sessionExpiresAtMs, deps.clock.nowMs());
      throw refusal ?? new ApiError('invalid_request', 'nothing of this agent awaits approval');
    }
    const nowMs = deps.clock.nowMs();
    return { set: { approval: newApproval(pendingIds, nowMs, deps.config), updatedAtMs: nowMs } };
  });
  // A code was asked for: the new approval is a device authorization, whatever the last one was.
  await indexOpenApproval(deps, snapshot, verified.host ?? { id: snapshot.agent.hostId }, true);
  deps.audit.record({ type: 'approval.renewed', actor: 'host', agent_id: agentId, host_id: snapshot.agent.hostId, approval_id: snapshot.agent.approval!.id });
  return { snapshot, approval: snapshot.agent.approval! };
}

// Protocol §4.6: only an expired agent is reactivated; an active one is returned unchanged; an
// elapsed absolute lifetime revokes; grants are reset to the host's current defaults.
export async function reactivateAgent(deps: AgentDeps, token: string | null, agentId: string, hints: ApprovalHints = {}): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  const owned = await ownedAgent(deps, verified, agentId);
  const host = verified.host!;
  const route = await approvalRouteFor(deps, host, owned.agent.mode, hints);
  let absoluteElapsed = false;
  let change: ReturnType<typeof reactivationChange> | ReturnType<typeof revokeChange> | null = null;
  const result = await transitionAgent(deps.store, agentId, (snapshot) => {
    assertOwner(verified, snapshot);
    const nowMs = deps.clock.nowMs();
    const effective = effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, nowMs);
    change = null;
    if (effective.status === 'active') return null;
    if (effective.because === 'absolute_lifetime') {
      absoluteElapsed = true;
      change = snapshot.agent.status === 'revoked' ? null : revokeChange(snapshot, nowMs);
      return change;
    }
    if (effective.status !== 'expired') throw statusRefusal(effective)!;
    change = reactivationChange(deps, host, snapshot, nowMs, route);
    return change;
  });
  const made = change as ReturnType<typeof reactivationChange> | ReturnType<typeof revokeChange> | null;
  if (absoluteElapsed) {
    if (made) deps.audit.record({ type: 'agent.revoked', actor: 'system', agent_id: agentId, host_id: host.id, reason: 'absolute_lifetime' });
    await forgetCachedKeyEverywhere(deps, agentId);
    throw statusRefusal({ status: 'revoked', because: 'absolute_lifetime' })!;
  }
  if (made && 'replaceGrants' in made) {
    deps.audit.record({
      type: 'agent.reactivated', actor: 'host', agent_id: agentId, host_id: host.id, person_id: result.agent.userId, outcome: result.agent.status,
      granted: made.replaceGrants.filter((g) => g.status === 'active').map((g) => g.capability),
      pending: made.replaceGrants.filter((g) => g.status === 'pending').map((g) => g.capability),
    });
  }
  await indexOpenApproval(deps, result, host, made !== null && 'replaceGrants' in made);
  return result;
}

function reactivationChange(deps: AgentDeps, host: HostRecord, snapshot: AgentSnapshot, nowMs: number, route: ApprovalRoute) {
  const { agent, grants } = snapshot;
  const defaults = host.defaultCapabilities.filter((name) => deps.catalog.has(name)).map((name) => ({ name }));
  const fresh = decideNewGrants(deps, {
    action: 'reactivate', host, agent, requests: defaults, existing: grants, agentId: agent.id, nowMs,
  });
  // Earlier grants end (escalations must be re-requested); the last decision per capability stays
  // on record, so a later request of a denied or revoked capability asks a person again and a later
  // execute of a withdrawn one answers grant_revoked.
  const history = historyAfterReactivation(grants, fresh, nowMs);
  const pendingIds = fresh.filter((g) => g.status === 'pending').map((g) => g.id);
  const clocks = activationClocks(nowMs, lifetimeSettings(deps.config));
  const needsApproval = pendingIds.length > 0;
  return {
    set: {
      status: needsApproval ? ('pending' as const) : ('active' as const),
      activatedAtMs: clocks.activatedAtMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      updatedAtMs: nowMs,
      approval: needsApproval ? newApproval(pendingIds, nowMs, deps.config, route) : null,
    },
    replaceGrants: [...fresh, ...history],
    sessionExpiresAtMs: clocks.sessionExpiresAtMs,
  };
}

/** Revokes the agent and every grant it holds. */
export function revokeChange(snapshot: AgentSnapshot, nowMs: number) {
  return {
    set: { status: 'revoked' as const, updatedAtMs: nowMs, approval: null },
    upsertGrants: snapshot.grants.filter((g) => g.status !== 'revoked' && g.status !== 'denied').map((g) => ({ ...g, status: 'revoked' as const, updatedAtMs: nowMs })),
  };
}

/**
 * Once an agent no longer waits for approval, its host's pending slot is freed. Best effort: a slot
 * left behind only frees itself when the approval would have lapsed, which errs towards refusing.
 */
export async function releasePendingSlot(deps: WithdrawalDeps, snapshot: AgentSnapshot): Promise<void> {
  if (snapshot.agent.status === 'pending') return;
  try {
    await deps.store.forgetPendingAgent(snapshot.agent.hostId, snapshot.agent.id);
    await deps.store.untrackPending('agent', snapshot.agent.id);
  } catch (err) {
    deps.logger.warn('could not free a pending-agent slot; it frees itself when the approval lapses', { agentId: snapshot.agent.id, err });
  }
}

// Protocol §4.7: permanent; idempotent for an agent that is already revoked.
export async function revokeAgent(deps: AgentDeps, token: string | null, agentId: string): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  await ownedAgent(deps, verified, agentId);
  return revokeAgentById(deps, agentId, (snapshot) => assertOwner(verified, snapshot), (result) => {
    deps.logger.info('agent revoked', { agentId, hostId: verified.host?.id });
    deps.audit.record({ type: 'agent.revoked', actor: 'host', agent_id: agentId, host_id: result.agent.hostId });
  });
}

/**
 * Revokes the agent and every grant it holds, idempotently, then makes every instance forget its key
 * and frees its host's pending slot. The host's revoke, the admin's and the person's share it, so
 * all end an agent the same way. Whoever asks was authenticated by the caller; `assertAllowed` runs
 * again on the state the change is written over, so an ownership check cannot be raced.
 * `announce` logs and records the revocation once it is in force, before the wait for a replica,
 * so a revocation answered "not yet durable" is in the audit trail too.
 */
export async function revokeAgentById(
  deps: WithdrawalDeps, agentId: string, assertAllowed: (snapshot: AgentSnapshot) => void = () => {}, announce: (result: AgentSnapshot) => void = () => {},
): Promise<AgentSnapshot> {
  const result = await transitionAgent(deps.store, agentId, (snapshot) => {
    assertAllowed(snapshot);
    return snapshot.agent.status === 'revoked' ? null : revokeChange(snapshot, deps.clock.nowMs());
  });
  await forgetCachedKeyEverywhere(deps, agentId);
  await releasePendingSlot(deps, result);
  announce(result);
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the revocation');
  return result;
}

// Protocol §4.8: host-authenticated, so it works when the agent key is compromised; the old key
// stops working at once (key version bump + cache invalidation on every instance). The new key's
// registration index is claimed before anything else is written, as host rotation does: a lost
// race is 409 agent_exists and changes nothing (docs/stances.md).
export async function rotateAgentKey(deps: AgentDeps, token: string | null, agentId: string, publicKey: unknown): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  const { jwk } = parsePublicJwk(publicKey, deps.config.ALGORITHMS, 'public_key');
  const before = await ownedAgent(deps, verified, agentId);
  // Protocol §5.1: the delivery mode is fixed at registration; a JWKS agent's key is whatever its
  // URL publishes under its kid, so an inline key cannot replace it.
  if (before.agent.jwksUrl !== undefined) {
    throw new ApiError('invalid_request', "this agent's key is delivered by a JWKS URL, fixed at registration: register a new agent for another key");
  }
  const hostId = before.agent.hostId;
  const thumbprint = jwkThumbprint(jwk);
  const claim = await deps.store.claimAgentKey(hostId, agentId, thumbprint);
  if (claim === 'taken') throw new ApiError('agent_exists', 'another agent of this host already uses this key');
  let replaced: string | null = null;
  let result: AgentSnapshot;
  try {
    result = await transitionAgent(deps.store, agentId, (snapshot) => {
      assertOwner(verified, snapshot);
      const effective = effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, deps.clock.nowMs());
      if (effective.status !== 'active' && effective.status !== 'expired') throw statusRefusal(effective)!;
      replaced = null;
      if (snapshot.agent.keyThumbprint === thumbprint) return null;
      // The key this change replaces (a concurrent rotation may have changed it since `before`).
      replaced = snapshot.agent.keyThumbprint;
      return {
        set: { publicJwk: jwk, keyThumbprint: thumbprint, keyVersion: snapshot.agent.keyVersion + 1, updatedAtMs: deps.clock.nowMs() },
      };
    });
  } catch (err) {
    // Nothing was rotated: give back an index this call took, and leave everything else as it was.
    if (claim === 'claimed') await deps.store.releaseAgentKey(hostId, agentId, thumbprint);
    throw err;
  }
  // The replaced key is free for a new registration again. A crash before this line leaves its
  // index naming this agent, which only makes that key answer agent_exists: safe.
  if (replaced !== null) await deps.store.releaseAgentKey(hostId, agentId, replaced);
  await forgetCachedKeyEverywhere(deps, agentId);
  if (replaced !== null) deps.audit.record({ type: 'agent.key_rotated', actor: 'host', agent_id: agentId, host_id: hostId, key_version: result.agent.keyVersion });
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the key rotation');
  return result;
}

interface CapabilityRequestResult {
  snapshot: AgentSnapshot;
  /** The grants answering this request, one per requested capability. */
  grants: GrantRecord[];
}

/** A JWT `capabilities` claim restricts the token to those names wherever the agent names any. */
function assertClaimAllows(claim: readonly string[] | null, names: readonly string[]): void {
  if (claim === null) return;
  const outside = names.filter((n) => !claim.includes(n));
  if (outside.length > 0) {
    throw new ApiError('unauthorized', `the JWT capabilities claim does not include: ${outside.join(', ')}`);
  }
}

/** An approval is still open when it has not expired. */
const isOpen = (approval: ApprovalRecord | undefined, nowMs: number): approval is ApprovalRecord =>
  approval !== undefined && approval.expiresAtMs > nowMs;

// Protocol §4.4: new grants (active or pending + approval); 409 when all are already granted.
export async function requestCapabilities(
  deps: AgentDeps, token: string | null, requested: RequestedCapability[], reason: string | undefined, hints: ApprovalHints = {},
): Promise<CapabilityRequestResult> {
  const verified = await deps.agentAuth.verify(token, { audiences: [deps.config.issuer], consumeJti: true });
  // Recorded once the agent is known, whatever the answer: the request is an attempt to gain authority.
  const { agent } = verified.snapshot;
  const event = {
    type: 'capability.requested', actor: 'agent', agent_id: agent.id, host_id: agent.hostId, person_id: agent.userId,
    capabilities: dedupeRequests(requested).map((r) => r.name),
  } as const;
  try {
    const result = await decideCapabilityRequest(deps, verified, requested, reason, hints);
    const granted = result.grants.filter((g) => g.status === 'active').map((g) => g.capability);
    const pending = result.grants.filter((g) => g.status === 'pending').map((g) => g.capability);
    deps.audit.record({ ...event, outcome: pending.length > 0 ? 'pending' : 'granted', granted, pending });
    return result;
  } catch (err) {
    deps.audit.record({ ...event, outcome: 'refused', code: isApiError(err) ? err.code : 'internal_error' });
    throw err;
  }
}

async function decideCapabilityRequest(
  deps: AgentDeps, verified: VerifiedAgent, requested: RequestedCapability[], reason: string | undefined, hints: ApprovalHints,
): Promise<CapabilityRequestResult> {
  const { config, clock, store } = deps;
  const refusal = agentRefusal(verified.snapshot.agent, verified.snapshot.sessionExpiresAtMs, clock.nowMs());
  if (refusal) throw refusal;
  const requests = dedupeRequests(requested);
  assertClaimAllows(verified.capabilityClaim, requests.map((r) => r.name));
  const host = await store.getHost(verified.snapshot.agent.hostId);
  if (!host) throw new ApiError('host_not_found', "the agent's host no longer exists");
  // Every proposal is checked, including ones an existing grant already covers: an unknown
  // operator is an error even when the answer would otherwise be already_granted.
  validateRequests(deps, requests);
  const route = await approvalRouteFor(deps, host, verified.snapshot.agent.mode, hints);
  let answer: GrantRecord[] = [];
  let opened = false;
  const snapshot = await transitionAgent(store, verified.snapshot.agent.id, (current) => {
    const nowMs = clock.nowMs();
    // The agent may have been revoked (or expired) since it authenticated: decided again on the
    // state this change will be written over, so a racing revoke cannot be followed by a new grant.
    const stillUsable = agentRefusal(current.agent, current.sessionExpiresAtMs, nowMs);
    if (stillUsable) throw stillUsable;
    const covering = (r: RequestedCapability) =>
      current.grants.find((g) => g.capability === r.name && g.status === 'active' && grantCovers(g.constraints, r.constraints));
    const waiting = (r: RequestedCapability) => current.grants.find((g) => g.capability === r.name && g.status === 'pending');
    const open = requests.filter((r) => !covering(r) && !waiting(r));
    if (open.length === 0 && requests.every((r) => covering(r))) {
      throw new ApiError('already_granted', 'every requested capability is already granted');
    }
    checkLiveGrantLimits(current.grants, open.map((r) => ({ capability: r.name })));
    const fresh = decideNewGrants(deps, {
      action: 'request_capability', host, agent: current.agent, requests: open, existing: current.grants, agentId: current.agent.id, nowMs, reason,
    });
    answer = requests.map((r) => covering(r) ?? waiting(r) ?? fresh.find((g) => g.capability === r.name)!);
    const answerPending = answer.filter((g) => g.status === 'pending').map((g) => g.id);
    const approval = current.agent.approval;
    const covered = isOpen(approval, nowMs) && answerPending.every((id) => approval.grantIds.includes(id));
    // A request that adds pending grants, or waits on grants whose approval lapsed, gets a new
    // approval with a new code for every pending grant; an open approval is never extended.
    const renew = fresh.some((g) => g.status === 'pending') || (answerPending.length > 0 && !covered);
    opened = renew;
    if (fresh.length === 0 && !renew) return null;
    const allPending = [...current.grants, ...fresh].filter((g) => g.status === 'pending').map((g) => g.id);
    return {
      replaceGrants: pruneHistory([...current.grants, ...fresh]),
      set: { updatedAtMs: nowMs, ...(renew ? { approval: newApproval(allPending, nowMs, config, route) } : {}) },
    };
  });
  await indexOpenApproval(deps, snapshot, host, opened);
  return { snapshot, grants: answer };
}

// Docs/Ref extension POST /agent/revoke-capability: every non-revoked grant for each named
// capability becomes revoked; idempotent. Callable by the agent itself (agent JWT) or by its host
// (host JWT naming agent_id), for a usable agent only (an expired agent's grants are reset by
// reactivation; a revoked one has none left).
export async function revokeCapabilities(
  deps: AgentDeps, token: string | null, agentIdInBody: string | undefined, names: string[],
): Promise<{ snapshot: AgentSnapshot; revoked: GrantRecord[] }> {
  if (!token) throw new ApiError('invalid_jwt', 'an agent or host JWT is required (Authorization: Bearer)');
  const caller = await identifyCaller(deps, token, {
    host: { allowUnknown: false, allowPending: false },
    agent: { audiences: [deps.config.issuer], consumeJti: true },
  });
  let agentId: string;
  if (caller.kind === 'host') {
    if (!agentIdInBody) throw new ApiError('invalid_request', 'agent_id is required when a host revokes a capability');
    agentId = (await ownedAgent(deps, caller.host, agentIdInBody)).agent.id;
  } else {
    agentId = caller.agent.snapshot.agent.id;
    if (agentIdInBody && agentIdInBody !== agentId) throw new ApiError('unauthorized', 'an agent may only revoke its own capabilities');
    assertClaimAllows(caller.agent.capabilityClaim, names);
  }
  let revoked: GrantRecord[] = [];
  const wanted = new Set(names);
  const snapshot = await transitionAgent(deps.store, agentId, (current) => {
    const nowMs = deps.clock.nowMs();
    const refusal = agentRefusal(current.agent, current.sessionExpiresAtMs, nowMs);
    if (refusal) throw refusal;
    revoked = current.grants
      .filter((g) => wanted.has(g.capability) && g.status !== 'revoked')
      .map((g) => ({ ...g, status: 'revoked' as const, updatedAtMs: nowMs }));
    if (revoked.length === 0) return null;
    // A withdrawn pending grant leaves the approval that was to decide it.
    const withdrawn = new Set(revoked.filter((g) => current.grants.find((c) => c.id === g.id)?.status === 'pending').map((g) => g.id));
    const approval = current.agent.approval;
    const approvalChange = approval && withdrawn.size > 0 ? { approval: withoutGrants(approval, withdrawn, current.agent.status === 'pending') } : {};
    return { upsertGrants: revoked, set: { updatedAtMs: nowMs, ...approvalChange } };
  });
  if (revoked.length > 0) {
    deps.audit.record({
      type: 'grant.revoked', actor: caller.kind, agent_id: agentId, host_id: snapshot.agent.hostId,
      capabilities: [...new Set(revoked.map((g) => g.capability))], grant_ids: revoked.map((g) => g.id),
    });
  }
  await confirmWithdrawal(deps, { agentIds: [agentId] }, 'the revocation');
  return { snapshot, revoked };
}
