// Host operations (protocol §4.9, §4.10) and the cascades that copy a host's state into each of
// its agents' records, so the execute hot path never reads another hash slot (DESIGN §2, §3).
import { jwkThumbprint, parsePublicJwk } from '../auth/keys.ts';
import type { AuditBy } from '../audit/events.ts';
import type { AgentSnapshot, HostRecord, HostStatus, PublicJwk } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { AgentChange, AgentRecords, HostRecords, PendingIndex, PersonRecords, StoreBackend } from '../store/store.ts';
import { releasePendingSlot, revokeChange } from './agents.ts';
import type { ServiceDeps, ServiceDepsOver } from './deps.ts';
import { forgetCachedKeyEverywhere } from './key-invalidation.ts';
import { confirmWithdrawal } from './durability.ts';
import { transitionAgent } from './transitions.ts';

/** What host operations and their cascades may touch of the store: the roles below, no others. */
type HostDeps = ServiceDepsOver<HostRecords & AgentRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/**
 * Applies `decide` to every agent of a host, one atomic transition each; returns how many changed
 * and every agent it visited (a withdrawal confirms all of them: a repeat of one that was not yet
 * durable changes nothing, yet must still confirm what the first attempt wrote).
 */
async function cascadeToAgents(
  deps: HostDeps, hostId: string, decide: (snapshot: AgentSnapshot) => AgentChange | null,
): Promise<{ changed: number; agentIds: string[] }> {
  let changed = 0;
  const agentIds = await deps.store.listHostAgentIds(hostId);
  for (const agentId of agentIds) {
    let touched = false;
    try {
      await transitionAgent(deps.store, agentId, (snapshot) => {
        const change = decide(snapshot);
        touched = change !== null;
        return change;
      });
    } catch (err) {
      // An agent deleted meanwhile has nothing left to cascade into.
      if (err instanceof ApiError && err.code === 'agent_not_found') continue;
      throw err;
    }
    if (touched) {
      changed++;
      await forgetCachedKeyEverywhere(deps, agentId);
    }
  }
  return { changed, agentIds };
}

/** Revoked and rejected hosts stay so: no write, and no cascade, brings one back. */
const LIVE_HOST_STATUSES = ['pending', 'active'] as const;
const isTerminalHost = (status: HostStatus) => status === 'revoked' || status === 'rejected';

/**
 * A host write that may only happen while the host is live (SECURITY.md): checked in the
 * store's atomic step, so an approval that read the host before a revocation cannot undo it.
 */
async function updateLiveHost(deps: HostDeps, hostId: string, patch: Parameters<ServiceDeps['store']['updateHost']>[1]): Promise<HostRecord> {
  const result = await deps.store.updateHost(hostId, patch, LIVE_HOST_STATUSES);
  if (!result) throw new ApiError('host_not_found', 'the host does not exist');
  if (!result.updated) {
    throw result.host.status === 'rejected'
      ? new ApiError('host_rejected', 'the host was rejected')
      : new ApiError('host_revoked', 'the host has been revoked');
  }
  return result.host;
}

// Protocol §4.10: the host revokes itself; every agent is revoked with it. Registrations racing the
// revocation are refused by the store's admission check (it reads the host's status in the step
// that links the agent), so the cascade below sees every agent that got in.
export async function revokeHost(deps: HostDeps, host: HostRecord, by: AuditBy): Promise<{ host: HostRecord; agentsRevoked: number }> {
  const nowMs = deps.clock.nowMs();
  const result = await deps.store.updateHost(host.id, { status: 'revoked', updatedAtMs: nowMs });
  if (!result) throw new ApiError('host_not_found', 'the host does not exist');
  const updated = result.host;
  const { changed: agentsRevoked, agentIds } = await cascadeToAgents(deps, host.id, (snapshot) => {
    const alreadyRevoked = snapshot.agent.status === 'revoked' && snapshot.agent.hostStatus === 'revoked';
    if (alreadyRevoked) return null;
    const change = revokeChange(snapshot, nowMs);
    return { ...change, set: { ...change.set, hostStatus: 'revoked' } };
  });
  await deps.store.untrackPending('host', host.id);
  deps.logger.info('host revoked', { hostId: host.id, agentsRevoked });
  deps.audit.record({ type: 'host.revoked', ...by, host_id: host.id, agents_revoked: agentsRevoked });
  await confirmWithdrawal(deps, { hostIds: [host.id], agentIds }, 'the revocation');
  return { host: updated, agentsRevoked };
}

export async function revokeHostByToken(deps: HostDeps, token: string | null) {
  // DESIGN §9: a pending host may register and poll status, nothing else (revoking itself included).
  // A revoked one may repeat its revocation, to confirm one answered "not yet durable".
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false, allowRevoked: true });
  return revokeHost(deps, verified.host!, { actor: 'host' });
}

// Protocol §4.9: signed with the current key; agents, grants and the user link stay with the host.
export async function rotateHostKey(deps: HostDeps, token: string | null, publicKey: unknown): Promise<HostRecord> {
  const verified = await deps.hostAuth.verify(token, { allowUnknown: false, allowPending: false });
  const host = verified.host!;
  // Protocol §5.1: the delivery mode is fixed at registration, and a JWKS host rotates by publishing.
  if (host.jwksUrl !== undefined) {
    throw new ApiError('invalid_request', 'this host delivers its keys by a JWKS URL: it rotates by publishing a new key there and signing with it');
  }
  const { jwk } = parsePublicJwk(publicKey, deps.config.ALGORITHMS, 'public_key');
  const thumbprint = jwkThumbprint(jwk);
  if (thumbprint === host.thumbprint) {
    // A repeat of a rotation that was not yet durable (the host signs with its new key now).
    await confirmWithdrawal(deps, { hostIds: [host.id] }, 'the key rotation');
    return host;
  }
  return moveHostKey(deps, host, { thumbprint, publicJwk: jwk }, 'rotate_key');
}

/**
 * A JWKS host signed with a newly published key while its stored one is no longer published
 * (auth/host-auth.ts decides that): the stored key moves to the new one, as a rotation would. A
 * concurrent request that moved it to the same key already is not an error.
 */
export async function moveJwksHostKey(deps: HostDeps, host: HostRecord, next: { thumbprint: string; publicJwk: PublicJwk }): Promise<HostRecord> {
  // Another host holds that thumbprint (it rotated onto the key while the key was public and
  // unused): the stored key stays, and the URL goes on naming this host, which is how it was found.
  const holder = await deps.store.findHostByThumbprint(next.thumbprint);
  if (holder && holder.id !== host.id) {
    deps.logger.warn('a JWKS host signs with a key another host holds; its stored key stays', { hostId: host.id, holderHostId: holder.id });
    return host;
  }
  try {
    return await moveHostKey(deps, host, next, 'jwks');
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== 'conflict') throw err;
    const current = await deps.store.getHost(host.id);
    if (current?.thumbprint === next.thumbprint) return current;
    throw err;
  }
}

/** The one way a host's stored key changes: the record and its index, then its agents' copies. */
async function moveHostKey(deps: HostDeps, host: HostRecord, next: { thumbprint: string; publicJwk: PublicJwk }, via: 'rotate_key' | 'jwks'): Promise<HostRecord> {
  const { thumbprint } = next;
  const outcome = await deps.store.rotateHostKey(host.id, host.thumbprint, { ...next, updatedAtMs: deps.clock.nowMs() });
  if (outcome === 'not_found') throw new ApiError('host_not_found', 'the host does not exist');
  if (outcome === 'taken') throw new ApiError('invalid_request', 'another host already uses this key');
  if (outcome === 'conflict') throw new ApiError('conflict', 'the host key changed concurrently; retry');
  const { agentIds } = await cascadeToAgents(deps, host.id, (s) => (s.agent.hostThumbprint === thumbprint ? null : { set: { hostThumbprint: thumbprint } }));
  deps.audit.record({ type: 'host.key_rotated', actor: 'host', host_id: host.id, via });
  await confirmWithdrawal(deps, { hostIds: [host.id], agentIds }, 'the key rotation');
  const rotated = await deps.store.getHost(host.id);
  if (!rotated) throw new ApiError('host_not_found', 'the host does not exist');
  return rotated;
}

/**
 * Links a host to a user (protocol §7.4, §7.5): the host becomes active, its agents learn the new
 * host status, and its live autonomous agents (active, expired, or still waiting for an
 * administrator) are claimed (terminal, grants revoked): an autonomous agent never runs on a host a
 * person answers for, so one that waited must not become active there by a later approval.
 */
export async function linkHost(deps: HostDeps, host: HostRecord, userId: string, by: AuditBy): Promise<HostRecord> {
  const nowMs = deps.clock.nowMs();
  const waited: AgentSnapshot[] = [];
  // The person's own API lists their hosts through this link (kept after the host is revoked:
  // people still see what was theirs). Written first: a link the host write then misses shows
  // nothing (the list shows only hosts that name the person), while the reverse order could leave a
  // linked host its person cannot see.
  await deps.store.addPersonHost(userId, host.id);
  const updated = await updateLiveHost(deps, host.id, {
    userId, status: 'active', updatedAtMs: nowMs, ...(host.activatedAtMs === undefined ? { activatedAtMs: nowMs } : {}),
  });
  const { changed: claimed, agentIds } = await cascadeToAgents(deps, host.id, (snapshot) => {
    const { agent } = snapshot;
    // A revocation that landed after our write has cascaded (or will): never undo its copy.
    if (isTerminalHost(agent.hostStatus)) return null;
    const claim = agent.mode === 'autonomous' && (agent.status === 'active' || agent.status === 'pending' || agent.status === 'expired');
    if (!claim && agent.hostStatus === 'active') return null;
    if (claim && agent.status === 'pending') waited.push(snapshot);
    return {
      set: {
        hostStatus: 'active',
        ...(claim ? { status: 'claimed' as const, userId, approval: null, updatedAtMs: nowMs } : {}),
      },
      ...(claim ? { upsertGrants: revokeChange(snapshot, nowMs).upsertGrants } : {}),
    };
  });
  for (const snapshot of waited) await releasePendingSlot(deps, { ...snapshot, agent: { ...snapshot.agent, status: 'claimed' } });
  await deps.store.untrackPending('host', host.id);
  deps.logger.info('host linked to a user', { hostId: host.id, userId, agentsTouched: claimed });
  deps.audit.record({ type: 'host.linked', ...by, host_id: host.id, person_id: userId, agents_changed: claimed });
  // Claiming withdraws the host's autonomous agents' authority; a link that claimed none waits for nothing.
  if (claimed > 0) await confirmWithdrawal(deps, { hostIds: [host.id], agentIds }, 'the link (it ended the host\'s autonomous agents)', "check shortly that the host's autonomous agents show as claimed");
  return updated;
}

/** Marks a pending host active without linking it, and tells its agents. */
export async function activateHost(deps: HostDeps, host: HostRecord, by: AuditBy): Promise<HostRecord> {
  const nowMs = deps.clock.nowMs();
  const updated = await updateLiveHost(deps, host.id, { status: 'active', updatedAtMs: nowMs, activatedAtMs: nowMs });
  await cascadeToAgents(deps, host.id, (s) => (s.agent.hostStatus !== 'pending' ? null : { set: { hostStatus: 'active' } }));
  await deps.store.untrackPending('host', host.id);
  deps.audit.record({ type: 'host.activated', ...by, host_id: host.id });
  return updated;
}

/** Live agents: what a withdrawal of trust revokes (claimed, rejected and revoked ones are final already). */
const isLiveAgent = (status: AgentSnapshot['agent']['status']) => status === 'active' || status === 'pending' || status === 'expired';

/**
 * Withdraws the trust a person's link gave a host (DESIGN §8: unlinking withdraws; a host without a
 * person gets nothing without a new approval). Used when a person unlinks their host, when an
 * administrator unlinks it, and when an administrator links it to someone else. The host goes back
 * to `pending`, as a host nobody vouched for: it may register agents, each of which waits for a
 * person's (or, autonomous, an administrator's) approval, and whoever approves one of its delegated
 * agents links it again. Its default capabilities were granted because someone vouched for it, so
 * they are cleared. Every live agent is revoked with its grants (docs/stances.md): the agents acted
 * under the trust that is withdrawn, and kept, they would act with no person to answer for them.
 *
 * Order, so that every crash leaves a safe state: the agents are revoked while the host is still
 * linked (a crash here leaves it linked, and the unlink can be repeated); then the host becomes
 * pending and unlinked, which the store's admission step sees (a registration decided on the linked
 * host cannot land after it); then the link to the person goes; then a second sweep revokes the
 * agents admitted while the host was still active. Agents admitted after the host became pending
 * copied that status and wait for approval: they are a new request, not a leftover.
 */
export async function withdrawHostTrust(deps: HostDeps, host: HostRecord, by: AuditBy): Promise<{ host: HostRecord; agentsRevoked: number }> {
  const visited = new Set<string>();
  const revokeLive = (onlyAdmittedWhileTrusted: boolean) => {
    const nowMs = deps.clock.nowMs();
    const freed: AgentSnapshot[] = [];
    return cascadeToAgents(deps, host.id, (snapshot) => {
      const { agent } = snapshot;
      if (!isLiveAgent(agent.status) || (onlyAdmittedWhileTrusted && agent.hostStatus === 'pending')) return null;
      if (agent.status === 'pending') freed.push(snapshot);
      return revokeChange(snapshot, nowMs);
    }).then(async ({ changed, agentIds }) => {
      for (const snapshot of freed) await releasePendingSlot(deps, { ...snapshot, agent: { ...snapshot.agent, status: 'revoked' } });
      for (const id of agentIds) visited.add(id);
      return changed;
    });
  };
  let agentsRevoked = await revokeLive(false);
  const withdrawn = await updateLiveHost(deps, host.id, { status: 'pending', userId: null, defaultCapabilities: [], updatedAtMs: deps.clock.nowMs() });
  if (host.userId !== undefined) await deps.store.removePersonHost(host.userId, host.id);
  agentsRevoked += await revokeLive(true);
  deps.logger.info('host unlinked: trust withdrawn', { hostId: host.id, personId: host.userId, agentsRevoked });
  deps.audit.record({ type: 'host.unlinked', ...by, host_id: host.id, ...(host.userId !== undefined ? { unlinked_person_id: host.userId } : {}), agents_revoked: agentsRevoked });
  await confirmWithdrawal(deps, { hostIds: [host.id], agentIds: [...visited] }, 'the unlink', 'unlink again if the host still shows as linked');
  return { host: withdrawn, agentsRevoked };
}
