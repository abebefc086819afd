// The administrator's own operations (DESIGN §8): pre-register and link hosts, unlink them, revoke
// or expire agents, say which operators are loaded, and the test hook that moves an agent's clocks.
// The admin API approves and denies through the one approval core (services/approvals/decide.ts)
// and lists what waits through services/approvals/waiting.ts, as every other door does.
import { basename } from 'node:path';
import { jwkThumbprint, parsePublicJwk } from '../auth/keys.ts';
import type { AuditBy } from '../audit/events.ts';
import type { AgentSnapshot, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { revokeAgentById } from './agents.ts';
import type { DepsWith, ServiceDepsOver } from './deps.ts';
import type { AgentRecords, HostRecords, PendingIndex, PersonRecords, StoreBackend } from '../store/store.ts';
import { checkDefaultCapabilities } from './host-setup.ts';
import { linkHost, revokeHost, withdrawHostTrust } from './hosts.ts';
import { transitionAgent } from './transitions.ts';
import { newHostId } from './ids.ts';

/** What the administrator's operations may touch of the store: the roles below, no others. */
type AdminDeps = ServiceDepsOver<AgentRecords & HostRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/** The audit trail's words for an administrator acting through the admin API. */
const ADMIN_API: AuditBy = { actor: 'admin', via: 'admin_api' };

interface PreRegisterHost {
  publicKey: unknown;
  name?: string | undefined;
  defaultCapabilities: string[];
  userId: string;
}

export async function preRegisterHost(deps: AdminDeps, request: PreRegisterHost): Promise<HostRecord> {
  const { jwk } = parsePublicJwk(request.publicKey, deps.config.ALGORITHMS, 'public_key');
  checkDefaultCapabilities(deps.catalog, request.defaultCapabilities);
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
  if (created) deps.audit.record({ type: 'host.registered', ...ADMIN_API, host_id: host.id, person_id: request.userId, outcome: host.status, default_capabilities: request.defaultCapabilities });
  if (host.status === 'revoked' || host.status === 'rejected') throw new ApiError('host_revoked', 'this host key belongs to a revoked host');
  // Linked to someone else: that person's trust is withdrawn first (their agents revoked), so no
  // agent keeps acting for a person who no longer answers for the host.
  const current = created || host.userId === undefined || host.userId === request.userId ? host : (await withdrawHostTrust(deps, host, ADMIN_API)).host;
  // Only a live host takes new defaults; a revoked one is refused by linkHost just below.
  if (!created) await deps.store.updateHost(host.id, { defaultCapabilities: request.defaultCapabilities, updatedAtMs: nowMs }, ['pending', 'active']);
  return linkHost(deps, { ...current, defaultCapabilities: request.defaultCapabilities }, request.userId, ADMIN_API);
}

/** A host, as the admin API shows it; 404 host_not_found when no host has this id. */
export async function hostForAdmin(deps: DepsWith<never, Pick<HostRecords, 'getHost'>>, hostId: string): Promise<HostRecord> {
  const host = await deps.store.getHost(hostId);
  if (!host) throw new ApiError('host_not_found', 'no host has this id');
  return host;
}

/** An agent, as the admin API shows it; 404 agent_not_found when no agent has this id. */
export async function agentForAdmin(deps: DepsWith<never, Pick<AgentRecords, 'getAgent'>>, agentId: string): Promise<AgentSnapshot> {
  const snapshot = await deps.store.getAgent(agentId);
  if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
  return snapshot;
}

/** Revokes a host and every agent under it (services/hosts.ts revokeHost), as an administrator. */
export async function revokeHostAsAdmin(deps: AdminDeps, hostId: string) {
  return revokeHost(deps, await hostForAdmin(deps, hostId), ADMIN_API);
}

/** An administrator withdraws a person's link (or any trust) from a host: services/hosts.ts withdrawHostTrust. */
export async function unlinkHostAsAdmin(deps: AdminDeps, hostId: string) {
  return withdrawHostTrust(deps, await hostForAdmin(deps, hostId), ADMIN_API);
}

/** Ends the agent's session now, as if its session TTL had elapsed. */
export async function expireAgent(deps: AdminDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  const snapshot = await transitionAgent(deps.store, agentId, () => ({ sessionExpiresAtMs: nowMs - 1, set: { updatedAtMs: nowMs } }));
  deps.keys.invalidate(agentId);
  deps.audit.record({ type: 'agent.expired', ...ADMIN_API, agent_id: agentId, host_id: snapshot.agent.hostId });
  return snapshot;
}

/** Test hook (INSECURE_TEST_HOOKS): makes the absolute lifetime elapse now. */
export async function exceedAbsoluteLifetime(deps: AdminDeps, agentId: string) {
  const nowMs = deps.clock.nowMs();
  return transitionAgent(deps.store, agentId, () => ({ set: { absoluteExpiresAtMs: nowMs - 1, updatedAtMs: nowMs } }));
}

/** Revokes the agent and every grant it holds, as its host's revoke does; idempotent. */
export async function revokeAgentAsAdmin(deps: AdminDeps, agentId: string): Promise<AgentSnapshot> {
  return revokeAgentById(deps, agentId, undefined, (snapshot) => {
    deps.logger.info('agent revoked by the admin', { agentId, hostId: snapshot.agent.hostId });
    deps.audit.record({ type: 'agent.revoked', ...ADMIN_API, agent_id: agentId, host_id: snapshot.agent.hostId });
  });
}

export interface LoadedOperator {
  name: string;
  kind: 'built-in' | 'plugin';
  description: string;
  /** The plugin's file name, without its directory ('built-in' for the others). */
  source: string;
}

/** Every operator the registry knows now (after the latest reload), built-ins first. */
export function listOperators(deps: AdminDeps): LoadedOperator[] {
  return deps.operators.names().map((name) => {
    const definition = deps.operators.get(name)!;
    const plugin = deps.operators.isPlugin(name);
    // The file name says which plugin it is; the server's directory layout is nobody's business.
    return { name, kind: plugin ? 'plugin' : 'built-in', description: definition.description, source: plugin ? basename(definition.source) : 'built-in' };
  });
}
