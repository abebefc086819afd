// POST /agent/register (protocol §4.3): dynamic host registration, idempotent pending retries,
// (host, agent key) uniqueness, policy-decided grants, approval when consent is needed.
import { parsePublicJwk, jwkThumbprint } from '../auth/keys.ts';
import { activationClocks, lifetimeSettings } from '../domain/lifecycle.ts';
import { dynamicHostStatus, registrationNeedsApproval } from '../domain/registration.ts';
import type { AgentSnapshot, HostRecord, Mode } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { newApproval } from './approvals.ts';
import type { ServiceDeps } from './deps.ts';
import { decideNewGrants, dedupeRequests, type RequestedCapability } from './grant-decisions.ts';
import { newAgentId, newHostId } from './ids.ts';
import { transitionAgent } from './transitions.ts';

export interface RegisterRequest {
  name: string;
  hostName?: string | undefined;
  mode: string;
  capabilities: RequestedCapability[];
  reason?: string | undefined;
  /** The caller's address: registrations from unknown hosts have a strict per-address budget. */
  clientIp: string;
}

export async function registerAgent(deps: ServiceDeps, token: string | null, request: RegisterRequest): Promise<AgentSnapshot> {
  const { config, clock, store } = deps;
  if (!config.MODES.includes(request.mode as Mode)) {
    throw new ApiError('unsupported_mode', `mode ${JSON.stringify(request.mode)} is not supported; supported: ${config.MODES.join(', ')}`);
  }
  const mode = request.mode as Mode;
  const verified = await deps.hostAuth.verify(token, { allowUnknown: true, allowPending: true });
  if (!verified.host) {
    if (!config.DYNAMIC_HOST_REGISTRATION) {
      throw new ApiError('dynamic_host_registration_disabled', 'unknown hosts may not register agents here; ask an administrator to pre-register the host');
    }
    await deps.limits.consume('unknownHostRegistration', request.clientIp);
  }
  const agentKey = agentKeyFrom(verified.claims, config.ALGORITHMS);
  const nowMs = clock.nowMs();
  const host = verified.host ?? (await createDynamicHost(deps, verified.thumbprint, verified.presentedJwk!, mode, request.hostName, nowMs));
  if (mode === 'autonomous' && host.userId !== undefined) {
    throw new ApiError('unsupported_mode', 'autonomous agents cannot be registered under a host linked to a user');
  }

  const keyThumbprint = jwkThumbprint(agentKey);
  const existingId = await store.findAgentIdByKey(host.id, keyThumbprint);
  if (existingId) return retryExisting(deps, existingId, nowMs);

  const requests = dedupeRequests(request.capabilities);
  const agentId = newAgentId();
  const grants = decideNewGrants(deps, {
    action: 'register', host, agent: { id: null, mode }, requests, existing: [], agentId, nowMs, reason: request.reason,
  });
  const pending = registrationNeedsApproval(host, mode, grants);
  const lifetimes = lifetimeSettings(config);
  const clocks = activationClocks(nowMs, lifetimes);
  const snapshot: AgentSnapshot = {
    agent: {
      id: agentId,
      hostId: host.id,
      name: request.name,
      mode,
      status: pending ? 'pending' : 'active',
      publicJwk: agentKey,
      keyThumbprint,
      keyVersion: 1,
      version: 1,
      hostStatus: host.status,
      hostThumbprint: host.thumbprint,
      ...(mode === 'delegated' && host.userId ? { userId: host.userId } : {}),
      ...(request.reason ? { reason: request.reason } : {}),
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      ...(pending ? {} : { activatedAtMs: clocks.activatedAtMs }),
      absoluteExpiresAtMs: nowMs + lifetimes.absoluteLifetimeMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      ...(pending ? { approval: newApproval(grants.filter((g) => g.status === 'pending').map((g) => g.id), nowMs, config) } : {}),
    },
    grants,
    sessionExpiresAtMs: pending ? null : clocks.sessionExpiresAtMs,
  };
  const created = await store.createAgent(snapshot);
  if (!created.created) return retryExisting(deps, created.existingAgentId, nowMs);
  deps.logger.info('agent registered', { agentId, hostId: host.id, mode, status: snapshot.agent.status });
  return created.snapshot;
}

/** The agent key from the host JWT's registration claims (protocol §5.2). */
function agentKeyFrom(claims: Record<string, unknown>, algorithms: readonly string[]) {
  if (claims.agent_public_key === undefined) {
    if (claims.agent_jwks_url !== undefined) throw new ApiError('invalid_request', 'agent_jwks_url is not supported; send agent_public_key');
    throw new ApiError('invalid_request', 'the host JWT must carry agent_public_key');
  }
  return parsePublicJwk(claims.agent_public_key, algorithms, 'agent_public_key').jwk;
}

async function createDynamicHost(
  deps: ServiceDeps, thumbprint: string, publicJwk: HostRecord['publicJwk'], mode: Mode, name: string | undefined, nowMs: number,
): Promise<HostRecord> {
  const status = dynamicHostStatus(mode);
  const { host, created } = await deps.store.createHost({
    id: newHostId(),
    thumbprint,
    publicJwk,
    ...(name ? { name } : {}),
    status,
    defaultCapabilities: [],
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    ...(status === 'active' ? { activatedAtMs: nowMs } : {}),
  });
  if (created) deps.logger.info('host registered dynamically', { hostId: host.id, status });
  return host;
}

/**
 * A second registration of the same (host, key): a pending one is returned again with a fresh
 * approval if the old one lapsed (idempotent retry); any other state is 409 agent_exists, including
 * expired (stance S13: the client should reactivate).
 */
async function retryExisting(deps: ServiceDeps, agentId: string, nowMs: number): Promise<AgentSnapshot> {
  return transitionAgent(deps.store, agentId, ({ agent }) => {
    if (agent.status !== 'pending') {
      throw new ApiError('agent_exists', 'an agent with this public key is already registered under this host; generate a new key or reactivate');
    }
    if (agent.approval && agent.approval.expiresAtMs > nowMs) return null;
    return { set: { approval: newApproval(agent.approval?.grantIds ?? [], nowMs, deps.config), updatedAtMs: nowMs } };
  });
}
