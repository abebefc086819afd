// Host- and agent-authenticated operations on one agent: status (§4.5), reactivate (§4.6),
// revoke (§4.7), rotate-key (§4.8), request-capability (§4.4) and revoke-capability (Docs).
import { parsePublicJwk, jwkThumbprint } from '../auth/keys.ts';
import type { VerifiedHost } from '../auth/host-auth.ts';
import { grantCovers, validateConstraints } from '../domain/constraints.ts';
import { activationClocks, agentRefusal, effectiveStatus, lifetimeSettings, statusRefusal } from '../domain/lifecycle.ts';
import type { AgentSnapshot, GrantRecord, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { extendApproval, newApproval } from './approvals.ts';
import type { ServiceDeps } from './deps.ts';
import { decideNewGrants, dedupeRequests, type RequestedCapability } from './grant-decisions.ts';
import { transitionAgent } from './transitions.ts';

/** The agent named by a host request, which must belong to that host (403 unauthorized). */
async function ownedAgent(deps: ServiceDeps, verified: VerifiedHost, agentId: string): Promise<AgentSnapshot> {
  const snapshot = await deps.store.getAgent(agentId);
  if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
  if (snapshot.agent.hostId !== verified.host?.id) throw new ApiError('unauthorized', 'the agent does not belong to this host');
  return snapshot;
}

function assertOwner(verified: VerifiedHost, snapshot: AgentSnapshot): void {
  if (snapshot.agent.hostId !== verified.host?.id) throw new ApiError('unauthorized', 'the agent does not belong to this host');
}

// Protocol §4.5: GET /agent/status. Pending hosts may poll (stance S2).
export async function agentStatus(deps: ServiceDeps, token: string | null, agentId: string): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: true, limit: 'status' });
  return ownedAgent(deps, verified, agentId);
}

// Protocol §4.6: only an expired agent is reactivated; an active one is returned unchanged; an
// elapsed absolute lifetime revokes; grants are reset to the host's current defaults.
export async function reactivateAgent(deps: ServiceDeps, token: string | null, agentId: string): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  await ownedAgent(deps, verified, agentId);
  const host = verified.host!;
  let absoluteElapsed = false;
  const result = await transitionAgent(deps.store, agentId, (snapshot) => {
    assertOwner(verified, snapshot);
    const nowMs = deps.clock.nowMs();
    const effective = effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, nowMs);
    if (effective.status === 'active') return null;
    if (effective.because === 'absolute_lifetime') {
      absoluteElapsed = true;
      return snapshot.agent.status === 'revoked' ? null : revokeChange(snapshot, nowMs);
    }
    if (effective.status !== 'expired') throw statusRefusal(effective)!;
    return reactivationChange(deps, host, snapshot, nowMs);
  });
  if (absoluteElapsed) {
    await invalidate(deps, agentId);
    throw statusRefusal({ status: 'revoked', because: 'absolute_lifetime' })!;
  }
  return result;
}

function reactivationChange(deps: ServiceDeps, host: HostRecord, snapshot: AgentSnapshot, nowMs: number) {
  const { agent, grants } = snapshot;
  const defaults = host.defaultCapabilities.filter((name) => deps.catalog.has(name)).map((name) => ({ name }));
  const fresh = decideNewGrants(deps, {
    action: 'reactivate', host, agent, requests: defaults, existing: grants, agentId: agent.id, nowMs,
  });
  const regranted = new Set(fresh.map((g) => g.capability));
  // Earlier grants are revoked (escalations must be re-requested) and kept once per capability,
  // so a later execute of a withdrawn capability answers grant_revoked.
  const history = new Map<string, GrantRecord>();
  for (const g of grants) {
    if (!regranted.has(g.capability)) history.set(g.capability, { ...g, status: 'revoked', updatedAtMs: nowMs });
  }
  const pendingIds = fresh.filter((g) => g.status === 'pending').map((g) => g.id);
  const clocks = activationClocks(nowMs, lifetimeSettings(deps.config));
  const needsApproval = pendingIds.length > 0;
  return {
    set: {
      status: needsApproval ? ('pending' as const) : ('active' as const),
      activatedAtMs: clocks.activatedAtMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      updatedAtMs: nowMs,
      approval: needsApproval ? newApproval(pendingIds, nowMs, deps.config) : null,
    },
    replaceGrants: [...fresh, ...history.values()],
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

async function invalidate(deps: ServiceDeps, agentId: string): Promise<void> {
  deps.keys.invalidate(agentId);
  await deps.store.publishAgentInvalidation(agentId);
}

// Protocol §4.7: permanent; idempotent for an agent that is already revoked.
export async function revokeAgent(deps: ServiceDeps, token: string | null, agentId: string): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  await ownedAgent(deps, verified, agentId);
  const result = await transitionAgent(deps.store, agentId, (snapshot) => {
    assertOwner(verified, snapshot);
    return snapshot.agent.status === 'revoked' ? null : revokeChange(snapshot, deps.clock.nowMs());
  });
  await invalidate(deps, agentId);
  deps.logger.info('agent revoked', { agentId, hostId: verified.host?.id });
  return result;
}

// Protocol §4.8: host-authenticated, so it works when the agent key is compromised; the old key
// stops working at once (key version bump + cache invalidation on every instance).
export async function rotateAgentKey(deps: ServiceDeps, token: string | null, agentId: string, publicKey: unknown): Promise<AgentSnapshot> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  const { jwk } = parsePublicJwk(publicKey, deps.config.ALGORITHMS, 'public_key');
  const before = await ownedAgent(deps, verified, agentId);
  const thumbprint = jwkThumbprint(jwk);
  const holder = await deps.store.findAgentIdByKey(before.agent.hostId, thumbprint);
  if (holder && holder !== agentId) throw new ApiError('agent_exists', 'another agent of this host already uses this key');
  const result = await transitionAgent(deps.store, agentId, (snapshot) => {
    assertOwner(verified, snapshot);
    const effective = effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, deps.clock.nowMs());
    if (effective.status !== 'active' && effective.status !== 'expired') throw statusRefusal(effective)!;
    if (snapshot.agent.keyThumbprint === thumbprint) return null;
    return {
      set: { publicJwk: jwk, keyThumbprint: thumbprint, keyVersion: snapshot.agent.keyVersion + 1, updatedAtMs: deps.clock.nowMs() },
    };
  });
  if (before.agent.keyThumbprint !== thumbprint) {
    await deps.store.reindexAgentKey(before.agent.hostId, agentId, before.agent.keyThumbprint, thumbprint);
  }
  await invalidate(deps, agentId);
  return result;
}

/** Bounds the grants one agent accumulates (each execute reads one capability's grants in Lua). */
export const MAX_GRANTS_PER_AGENT = 256;

export interface CapabilityRequestResult {
  snapshot: AgentSnapshot;
  /** The grants answering this request, one per requested capability. */
  grants: GrantRecord[];
}

// Protocol §4.4: new grants (active or pending + approval); 409 when all are already granted.
export async function requestCapabilities(
  deps: ServiceDeps, token: string | null, requested: RequestedCapability[], reason: string | undefined,
): Promise<CapabilityRequestResult> {
  const { config, clock, store } = deps;
  const verified = await deps.agentAuth.verify(token, { audiences: [config.issuer], consumeJti: true });
  const refusal = agentRefusal(verified.snapshot.agent, verified.snapshot.sessionExpiresAtMs, clock.nowMs());
  if (refusal) throw refusal;
  const host = await store.getHost(verified.snapshot.agent.hostId);
  if (!host) throw new ApiError('host_not_found', "the agent's host no longer exists");
  const requests = dedupeRequests(requested);
  // Every proposal is checked, including ones an existing grant already covers: an unknown
  // operator is an error even when the answer would otherwise be already_granted.
  validateConstraints(requests.map((r) => r.constraints), deps.operators);
  let answer: GrantRecord[] = [];
  const snapshot = await transitionAgent(store, verified.snapshot.agent.id, (current) => {
    const nowMs = clock.nowMs();
    const covering = (r: RequestedCapability) =>
      current.grants.find((g) => g.capability === r.name && g.status === 'active' && grantCovers(g.constraints, r.constraints));
    const waiting = (r: RequestedCapability) => current.grants.find((g) => g.capability === r.name && g.status === 'pending');
    const open = requests.filter((r) => !covering(r) && !waiting(r));
    if (open.length === 0 && requests.every((r) => covering(r))) {
      throw new ApiError('already_granted', 'every requested capability is already granted');
    }
    if (current.grants.length + open.length > MAX_GRANTS_PER_AGENT) {
      throw new ApiError('limit_exceeded', `an agent holds at most ${MAX_GRANTS_PER_AGENT} grants`);
    }
    const fresh = decideNewGrants(deps, {
      action: 'request_capability', host, agent: current.agent, requests: open, existing: current.grants, agentId: current.agent.id, nowMs, reason,
    });
    answer = requests.map((r) => covering(r) ?? waiting(r) ?? fresh.find((g) => g.capability === r.name)!);
    const pendingIds = answer.filter((g) => g.status === 'pending').map((g) => g.id);
    if (fresh.length === 0 && pendingIds.every((id) => current.agent.approval?.grantIds.includes(id))) return null;
    return {
      upsertGrants: fresh,
      set: {
        updatedAtMs: nowMs,
        ...(pendingIds.length > 0 ? { approval: extendApproval(current.agent.approval, pendingIds, nowMs, config) } : {}),
      },
    };
  });
  return { snapshot, grants: answer };
}

// Docs/Ref extension POST /agent/revoke-capability: every non-revoked grant for each named
// capability becomes revoked; idempotent. Callable by the agent itself or by its host.
export async function revokeCapabilities(
  deps: ServiceDeps, actor: { kind: 'agent'; agentId: string } | { kind: 'host'; verified: VerifiedHost; agentId: string }, names: string[],
): Promise<{ snapshot: AgentSnapshot; revoked: GrantRecord[] }> {
  if (actor.kind === 'host') await ownedAgent(deps, actor.verified, actor.agentId);
  let revoked: GrantRecord[] = [];
  const wanted = new Set(names);
  const snapshot = await transitionAgent(deps.store, actor.agentId, (current) => {
    const nowMs = deps.clock.nowMs();
    revoked = current.grants
      .filter((g) => wanted.has(g.capability) && g.status !== 'revoked')
      .map((g) => ({ ...g, status: 'revoked' as const, updatedAtMs: nowMs }));
    return revoked.length === 0 ? null : { upsertGrants: revoked, set: { updatedAtMs: nowMs } };
  });
  return { snapshot, revoked };
}
