// The administrator's operations (DESIGN §8), until people approve through the device flow:
// pre-register and link hosts, approve or deny pending agents and grants, and the test hooks
// that move an agent's clocks.
import { jwkThumbprint, parsePublicJwk } from '../auth/keys.ts';
import { validateConstraints } from '../domain/constraints.ts';
import { activationClocks, lifetimeSettings, statusRefusal } from '../domain/lifecycle.ts';
import type { AgentSnapshot, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { ServiceDeps } from './deps.ts';
import { activateHost, linkHost } from './hosts.ts';
import { newHostId } from './ids.ts';
import { transitionAgent } from './transitions.ts';

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
  if (host.status === 'revoked' || host.status === 'rejected') throw new ApiError('host_revoked', 'this host key belongs to a revoked host');
  if (!created) await deps.store.updateHost(host.id, { defaultCapabilities: request.defaultCapabilities, updatedAtMs: nowMs });
  return linkHost(deps, { ...host, defaultCapabilities: request.defaultCapabilities }, request.userId);
}

/**
 * Approves the agent's pending registration and/or pending grants: the named capabilities (all
 * when none are named) become active, the other pending ones denied. Approving a delegated
 * agent of an unlinked host links the host to the approving user.
 */
export async function approveAgent(deps: ServiceDeps, agentId: string, approval: { capabilities?: string[] | undefined; userId: string }) {
  const before = await deps.store.getAgent(agentId);
  if (!before) throw new ApiError('agent_not_found', 'no agent has this id');
  const host = await deps.store.getHost(before.agent.hostId);
  if (!host) throw new ApiError('host_not_found', "the agent's host does not exist");
  if (host.status === 'revoked' || host.status === 'rejected') throw new ApiError('host_revoked', "the agent's host can no longer be approved");
  const nowMs = deps.clock.nowMs();
  const snapshot = await transitionAgent(deps.store, agentId, (current) => decideApproval(deps, current, approval, nowMs, true));
  if (host.status === 'pending' || (snapshot.agent.mode === 'delegated' && host.userId === undefined)) {
    if (snapshot.agent.mode === 'delegated') await linkHost(deps, host, approval.userId);
    else await activateHost(deps, host);
  }
  return (await deps.store.getAgent(agentId)) ?? snapshot;
}

export async function denyAgent(deps: ServiceDeps, agentId: string, userId: string) {
  const nowMs = deps.clock.nowMs();
  return transitionAgent(deps.store, agentId, (current) => decideApproval(deps, current, { capabilities: [], userId }, nowMs, false));
}

function decideApproval(
  deps: ServiceDeps, current: AgentSnapshot, approval: { capabilities?: string[] | undefined; userId: string }, nowMs: number, approve: boolean,
) {
  const { agent, grants } = current;
  if (agent.status !== 'pending' && agent.status !== 'active') throw statusRefusal({ status: agent.status })!;
  const pending = grants.filter((g) => g.status === 'pending');
  if (agent.status === 'active' && pending.length === 0) throw new ApiError('invalid_request', 'the agent has nothing awaiting approval');
  const chosen = new Set(approval.capabilities ?? pending.map((g) => g.capability));
  // An operator may have been removed (or its schema tightened) since the grant was requested.
  if (approve) validateConstraints(pending.filter((g) => chosen.has(g.capability)).map((g) => g.constraints), deps.operators);
  const decided = pending.map((g) =>
    approve && chosen.has(g.capability)
      ? { ...g, status: 'active' as const, grantedBy: approval.userId, updatedAtMs: nowMs }
      : { ...g, status: 'denied' as const, deniedBy: approval.userId, updatedAtMs: nowMs },
  );
  if (agent.status === 'active') return { upsertGrants: decided, set: { approval: null, updatedAtMs: nowMs } };
  if (!approve) return { upsertGrants: decided, set: { status: 'rejected' as const, approval: null, updatedAtMs: nowMs } };
  const clocks = activationClocks(nowMs, lifetimeSettings(deps.config));
  return {
    upsertGrants: decided,
    set: {
      status: 'active' as const,
      approval: null,
      activatedAtMs: clocks.activatedAtMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      ...(agent.mode === 'delegated' ? { userId: approval.userId } : {}),
      updatedAtMs: nowMs,
    },
    sessionExpiresAtMs: clocks.sessionExpiresAtMs,
  };
}

/** Ends the agent's session now, as if its session TTL had elapsed. */
export async function expireAgent(deps: ServiceDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  const snapshot = await transitionAgent(deps.store, agentId, () => ({ sessionExpiresAtMs: nowMs - 1, set: { updatedAtMs: nowMs } }));
  deps.keys.invalidate(agentId);
  return snapshot;
}

/** Test hook (INSECURE_TEST_HOOKS): makes the absolute lifetime elapse now. */
export async function exceedAbsoluteLifetime(deps: ServiceDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  return transitionAgent(deps.store, agentId, () => ({ set: { absoluteExpiresAtMs: nowMs - 1, updatedAtMs: nowMs } }));
}
