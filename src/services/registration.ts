// POST /agent/register (protocol §4.3): dynamic host registration, idempotent pending retries,
// (host, agent key) uniqueness, policy-decided grants, approval when consent is needed.
import { parseJwksUrl, parseKid, sameJwksUrl } from '../auth/jwks-keys.ts';
import { parsePublicJwk, jwkThumbprint } from '../auth/keys.ts';
import { activationClocks, hostRefusal, lifetimeSettings } from '../domain/lifecycle.ts';
import { checkLiveGrantLimits } from '../domain/limits.ts';
import { dynamicHostStatus, registrationNeedsApproval } from '../domain/registration.ts';
import type { AgentSnapshot, HostRecord, Mode, PublicJwk } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { ApprovalHints } from '../domain/approval-method.ts';
import { approvalRouteFor, type ApprovalRoute } from './approvals/ciba.ts';
import { indexOpenApproval, newApproval, routeOf } from './approvals/open.ts';
import type { ServiceDepsOver } from './deps.ts';
import { decideNewGrants, dedupeRequests, validateRequests, type RequestedCapability } from './grant-decisions.ts';
import { newAgentId, newHostId } from './ids.ts';
import { transitionAgent } from './transitions.ts';
import type { AgentRecords, HostRecords, PersonRecords, PendingIndex, StoreBackend } from '../store/store.ts';

/** What registration may touch of the store: the roles below, no others. */
type RegistrationDeps = ServiceDepsOver<AgentRecords & HostRecords & PendingIndex & PersonRecords & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

interface RegisterRequest {
  name: string;
  hostName?: string | undefined;
  mode: string;
  capabilities: RequestedCapability[];
  reason?: string | undefined;
  /** preferred_method, login_hint and binding_message: how the caller would have its person asked. */
  hints?: ApprovalHints | undefined;
  /** The caller's address: registrations from unknown hosts have a strict per-address budget. */
  clientIp: string;
}

/** How often registration re-reads a host that changed (approved, rotated) while it decided. */
const HOST_CHANGE_ATTEMPTS = 3;

export async function registerAgent(deps: RegistrationDeps, token: string | null, request: RegisterRequest): Promise<AgentSnapshot> {
  const { config, clock, store } = deps;
  if (!config.MODES.includes(request.mode as Mode)) {
    throw new ApiError('unsupported_mode', `mode ${JSON.stringify(request.mode)} is not supported; supported: ${config.MODES.join(', ')}`);
  }
  const mode = request.mode as Mode;
  // Every registration can create stored state, so one address has an hourly budget of them
  // (SECURITY.md), checked before any signature is verified.
  await deps.limits.consume('registration', request.clientIp);
  const verified = await deps.hostAuth.verify(token, { allowUnknown: true, allowPending: true, clientIp: request.clientIp });
  if (!verified.host) {
    if (!config.DYNAMIC_HOST_REGISTRATION) {
      throw new ApiError('dynamic_host_registration_disabled', 'unknown hosts may not register agents here; ask an administrator to pre-register the host');
    }
    await deps.limits.consume('unknownHostRegistration', request.clientIp);
  }
  const hostJwksUrl = verified.host?.jwksUrl ?? verified.presentedJwksUrl;
  // A fetch for a host not yet stored spends its address's budget, as its own key's fetch did (auth/host-auth.ts).
  const { agentKey, agentJwksUrl } = await agentKeyFrom(deps, verified.claims, { hostJwksUrl, callerKey: verified.host?.id ?? `address:${request.clientIp}` });
  const keyThumbprint = jwkThumbprint(agentKey);
  const requests = dedupeRequests(request.capabilities);
  validateRequests(deps, requests);
  checkLiveGrantLimits([], requests.map((r) => ({ capability: r.name })));
  // How a new agent's approval would ask its person, decided once, when it is known that this call
  // creates an agent: a retry of a pending registration asks nobody again, so it spends no CIBA
  // budget, and a host new to the server is counted before it is stored.
  let route: ApprovalRoute | undefined;
  const routeFor = async (h: { thumbprint: string; userId?: string | undefined }) => (route ??= await approvalRouteFor(deps, h, mode, request.hints ?? {}));
  if (!verified.host) await routeFor({ thumbprint: verified.thumbprint });
  let host = verified.host ?? (await createDynamicHost(deps, { thumbprint: verified.thumbprint, publicJwk: verified.presentedJwk!, jwksUrl: verified.presentedJwksUrl }, mode, request.hostName, clock.nowMs()));
  for (let attempt = 1; ; attempt++) {
    const refusal = hostRefusal(host.status, true);
    if (refusal) throw refusal;
    if (mode === 'autonomous' && host.userId !== undefined) {
      throw new ApiError('unsupported_mode', 'autonomous agents cannot be registered under a host linked to a user');
    }
    const existingId = await store.findAgentIdByKey(host.id, keyThumbprint);
    if (existingId) return retryExisting(deps, existingId, host, clock.nowMs());
    const chosen = await routeFor(host);
    const nowMs = clock.nowMs();
    const snapshot = newAgentSnapshot(deps, { host, mode, agentKey, agentJwksUrl, keyThumbprint, requests, request, nowMs, route: chosen });
    // A host nobody vouched for (anyone can make one) gets a small quota until a person links it.
    const maxAgents = host.userId === undefined ? config.AGENTS_PER_UNLINKED_HOST_MAX : config.AGENTS_PER_HOST_MAX;
    const created = await store.createAgent(snapshot, {
      hostUserId: host.userId,
      maxAgents,
      maxPendingAgents: config.PENDING_AGENTS_PER_HOST_MAX,
      ...(snapshot.agent.approval ? { pendingUntilMs: snapshot.agent.approval.expiresAtMs } : {}),
      nowMs,
    });
    if (created.created) {
      deps.logger.info('agent registered', { agentId: snapshot.agent.id, hostId: host.id, mode, status: snapshot.agent.status });
      const { agent, grants } = created.snapshot;
      deps.audit.record({
        type: 'agent.registered', actor: 'host', agent_id: agent.id, host_id: host.id, person_id: agent.userId, mode, outcome: agent.status,
        granted: grants.filter((g) => g.status === 'active').map((g) => g.capability),
        pending: grants.filter((g) => g.status === 'pending').map((g) => g.capability),
      });
      await indexOpenApproval(deps, created.snapshot, host, true);
      if (created.snapshot.agent.status === 'pending') await store.trackPending('agent', snapshot.agent.id, nowMs);
      return created.snapshot;
    }
    if (created.reason === 'exists') return retryExisting(deps, created.existingAgentId, host, nowMs);
    if (created.reason === 'too_many_agents') {
      throw new ApiError('limit_exceeded', `this host holds the most agents it may (${maxAgents}${host.userId === undefined ? ' until a person links it' : ''})`);
    }
    if (created.reason === 'too_many_pending') {
      throw new ApiError('limit_exceeded', `this host has ${config.PENDING_AGENTS_PER_HOST_MAX} agents waiting for approval already`);
    }
    // The host was revoked, approved or rotated between our read and the write: decide again on
    // what it is now (a revoked host is refused at the top of the loop).
    if (attempt >= HOST_CHANGE_ATTEMPTS) throw new ApiError('conflict', 'the host is being changed concurrently; retry');
    const current = await store.getHost(host.id);
    if (!current) throw new ApiError('host_not_found', 'the host does not exist');
    host = current;
  }
}

interface NewAgent {
  host: HostRecord;
  mode: Mode;
  agentKey: PublicJwk;
  agentJwksUrl: string | undefined;
  keyThumbprint: string;
  requests: RequestedCapability[];
  request: RegisterRequest;
  nowMs: number;
  route: ApprovalRoute;
}

/** The new agent and its policy-decided grants, as they will be stored. */
function newAgentSnapshot(deps: RegistrationDeps, a: NewAgent): AgentSnapshot {
  const { config } = deps;
  const agentId = newAgentId();
  const grants = decideNewGrants(deps, {
    action: 'register', host: a.host, agent: { id: null, mode: a.mode }, requests: a.requests, existing: [], agentId, nowMs: a.nowMs, reason: a.request.reason,
  });
  const pending = registrationNeedsApproval(a.host, a.mode, grants);
  const lifetimes = lifetimeSettings(config);
  const clocks = activationClocks(a.nowMs, lifetimes);
  return {
    agent: {
      id: agentId,
      hostId: a.host.id,
      name: a.request.name,
      mode: a.mode,
      status: pending ? 'pending' : 'active',
      publicJwk: a.agentKey,
      ...(a.agentJwksUrl !== undefined ? { jwksUrl: a.agentJwksUrl } : {}),
      keyThumbprint: a.keyThumbprint,
      keyVersion: 1,
      version: 1,
      hostStatus: a.host.status,
      hostThumbprint: a.host.thumbprint,
      ...(a.mode === 'delegated' && a.host.userId ? { userId: a.host.userId } : {}),
      ...(a.request.reason ? { reason: a.request.reason } : {}),
      createdAtMs: a.nowMs,
      updatedAtMs: a.nowMs,
      ...(pending ? {} : { activatedAtMs: clocks.activatedAtMs }),
      absoluteExpiresAtMs: a.nowMs + lifetimes.absoluteLifetimeMs,
      maxLifetimeExpiresAtMs: clocks.maxLifetimeExpiresAtMs,
      ...(pending ? { approval: newApproval(grants.filter((g) => g.status === 'pending').map((g) => g.id), a.nowMs, config, a.route) } : {}),
    },
    grants,
    sessionExpiresAtMs: pending ? null : clocks.sessionExpiresAtMs,
  };
}

/**
 * The agent key from the host JWT's registration claims (protocol §5.2): inline (`agent_public_key`),
 * or the key its JWKS URL publishes under `agent_kid` (`agent_jwks_url`), read now and kept with its
 * kid; the URL is fixed with the agent. The host's and the agent's URLs must differ (protocol §5.1):
 * a host's JWKS says which keys speak for the host, and an agent key there could sign as the host.
 */
async function agentKeyFrom(
  deps: RegistrationDeps, claims: Record<string, unknown>, host: { hostJwksUrl: string | undefined; callerKey: string },
): Promise<{ agentKey: PublicJwk; agentJwksUrl: string | undefined }> {
  const inline = claims.agent_public_key !== undefined;
  if (inline && (claims.agent_jwks_url !== undefined || claims.agent_kid !== undefined)) {
    throw new ApiError('invalid_request', 'the host JWT carries agent_public_key or agent_jwks_url (with agent_kid), not both');
  }
  if (inline) return { agentKey: parsePublicJwk(claims.agent_public_key, deps.config.ALGORITHMS, 'agent_public_key').jwk, agentJwksUrl: undefined };
  if (claims.agent_jwks_url === undefined) throw new ApiError('invalid_request', 'the host JWT must carry agent_public_key, or agent_jwks_url with agent_kid');
  const url = parseJwksUrl(claims.agent_jwks_url, 'agent_jwks_url');
  const kid = parseKid(claims.agent_kid, 'agent_kid (required with agent_jwks_url)', 'invalid_request');
  if (host.hostJwksUrl !== undefined && sameJwksUrl(url, host.hostJwksUrl)) throw new ApiError('invalid_request', "agent_jwks_url must differ from the host's JWKS URL");
  const agentKey = await deps.jwks.resolve(url, kid, { callerKey: host.callerKey, label: 'agent_jwks_url', code: 'invalid_request' });
  return { agentKey, agentJwksUrl: url };
}

async function createDynamicHost(
  deps: RegistrationDeps, key: Pick<HostRecord, 'thumbprint' | 'publicJwk'> & { jwksUrl: string | undefined }, mode: Mode, name: string | undefined, nowMs: number,
): Promise<HostRecord> {
  const status = dynamicHostStatus(mode);
  const { host, created } = await deps.store.createHost({
    id: newHostId(),
    thumbprint: key.thumbprint,
    publicJwk: key.publicJwk,
    ...(key.jwksUrl !== undefined ? { jwksUrl: key.jwksUrl } : {}),
    ...(name ? { name } : {}),
    status,
    defaultCapabilities: [],
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    ...(status === 'active' ? { activatedAtMs: nowMs } : {}),
  });
  if (created) {
    deps.logger.info('host registered dynamically', { hostId: host.id, status });
    deps.audit.record({ type: 'host.registered', actor: 'host', host_id: host.id, outcome: status, dynamic: true });
  }
  if (created && status === 'pending') await deps.store.trackPending('host', host.id, nowMs);
  return host;
}

/**
 * A second registration of the same (host, key): a pending one is returned again with a fresh
 * approval if the old one lapsed (idempotent retry); any other state is 409 agent_exists, including
 * expired (docs/stances.md: the client should reactivate).
 */
async function retryExisting(deps: RegistrationDeps, agentId: string, host: HostRecord, nowMs: number): Promise<AgentSnapshot> {
  let renewed = false;
  const snapshot = await transitionAgent(deps.store, agentId, ({ agent }) => {
    if (agent.status !== 'pending') {
      throw new ApiError('agent_exists', 'an agent with this public key is already registered under this host; generate a new key or reactivate');
    }
    renewed = false;
    if (agent.approval && agent.approval.expiresAtMs > nowMs) return null;
    renewed = true;
    // The renewed approval asks the way the lapsed one did; a CIBA one is back in its person's
    // inbox, without a second notice (docs/stances.md).
    return { set: { approval: newApproval(agent.approval?.grantIds ?? [], nowMs, deps.config, routeOf(agent.approval)), updatedAtMs: nowMs } };
  });
  if (renewed) await indexOpenApproval(deps, snapshot, host, false);
  return snapshot;
}
