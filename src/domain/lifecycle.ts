// The agent and host lifecycle rules of protocol §7, as pure functions of records and a time.
import { ApiError } from '../errors.ts';
import type { AgentRecord, AgentStatus, HostStatus } from './types.ts';

interface EffectiveStatus {
  status: AgentStatus;
  /** Why a stored status was overridden by the clock. */
  because?: 'absolute_lifetime' | 'session_ttl' | 'max_lifetime';
}

/**
 * The status an agent has at `nowMs` (protocol §7.3): an elapsed absolute lifetime revokes any
 * non-terminal agent; an elapsed session or max lifetime expires an active one. Evaluated lazily on
 * every use, so no background sweeper is needed.
 */
export function effectiveStatus(agent: AgentRecord, sessionExpiresAtMs: number | null, nowMs: number): EffectiveStatus {
  const stored = agent.status;
  // Revoked agents keep reporting the elapsed absolute lifetime, so the answer does not depend on
  // whether the revocation it causes has been written yet.
  const lifetimeApplies = stored === 'active' || stored === 'expired' || stored === 'revoked';
  if (lifetimeApplies && agent.absoluteExpiresAtMs <= nowMs) {
    return { status: 'revoked', because: 'absolute_lifetime' };
  }
  if (stored !== 'active') return { status: stored };
  if (agent.maxLifetimeExpiresAtMs <= nowMs) return { status: 'expired', because: 'max_lifetime' };
  if (sessionExpiresAtMs === null || sessionExpiresAtMs <= nowMs) return { status: 'expired', because: 'session_ttl' };
  return { status: 'active' };
}

const HOST_REFUSALS: Record<Exclude<HostStatus, 'active'>, () => ApiError> = {
  revoked: () => new ApiError('host_revoked', 'the host has been revoked'),
  rejected: () => new ApiError('host_rejected', 'the host was rejected'),
  pending: () => new ApiError('host_pending', 'the host awaits approval'),
};

/** Refusal for a host that may not act (pending hosts only where `allowPending`). */
export function hostRefusal(status: HostStatus, allowPending: boolean): ApiError | null {
  if (status === 'active' || (status === 'pending' && allowPending)) return null;
  return HOST_REFUSALS[status]();
}

/** Refusal for an agent that may not authenticate (protocol §5.3 step 6); null when usable. */
export function agentRefusal(agent: AgentRecord, sessionExpiresAtMs: number | null, nowMs: number): ApiError | null {
  const host = hostRefusal(agent.hostStatus, false);
  if (host) return host;
  const effective = effectiveStatus(agent, sessionExpiresAtMs, nowMs);
  return statusRefusal(effective, agent.id);
}

/**
 * The error for an agent status other than active (also used by reactivation). `agentId`, when
 * known, is named in the message where the caller has something to do with it.
 */
export function statusRefusal(effective: EffectiveStatus, agentId?: string): ApiError | null {
  switch (effective.status) {
    case 'active':
      return null;
    case 'revoked':
      return effective.because === 'absolute_lifetime'
        ? new ApiError('absolute_lifetime_exceeded', "the agent's absolute lifetime has elapsed; register a new agent")
        : new ApiError('agent_revoked', 'the agent has been revoked');
    case 'expired':
      return new ApiError('agent_expired', 'the agent session has expired; reactivate it with POST /agent/reactivate');
    case 'pending':
      return new ApiError('agent_pending', pendingMessage(agentId));
    case 'rejected':
      return new ApiError('agent_rejected', 'the agent registration was denied');
    case 'claimed':
      return new ApiError('agent_claimed', 'the agent was claimed by a user; register a new agent');
  }
}

/**
 * What a pending agent's caller should do: nothing but wait for the person, polling the status
 * endpoint (protocol §4.5) at the approval's interval; the person decides at the link (or with the
 * code) registration answered.
 */
function pendingMessage(agentId: string | undefined): string {
  const status = agentId === undefined ? 'GET /agent/status?agent_id=…' : `GET /agent/status?agent_id=${encodeURIComponent(agentId)}`;
  return `${agentId === undefined ? 'the agent' : `agent ${agentId}`} is waiting for a person's approval: `
    + `they approve it at the verification_uri_complete (or with the user_code) its registration answered; `
    + `the host polls ${status} until it is active, then calls again`;
}

interface LifetimeSettings {
  sessionTtlMs: number;
  maxLifetimeMs: number;
  absoluteLifetimeMs: number;
}

/** The lifetime clocks from their configured durations in seconds. */
export function lifetimeSettings(seconds: { AGENT_SESSION_TTL_SECONDS: number; AGENT_MAX_LIFETIME_SECONDS: number; AGENT_ABSOLUTE_LIFETIME_SECONDS: number }): LifetimeSettings {
  return {
    sessionTtlMs: seconds.AGENT_SESSION_TTL_SECONDS * 1000,
    maxLifetimeMs: seconds.AGENT_MAX_LIFETIME_SECONDS * 1000,
    absoluteLifetimeMs: seconds.AGENT_ABSOLUTE_LIFETIME_SECONDS * 1000,
  };
}

/** Clock fields of an agent activated at `nowMs` (registration approval or reactivation). */
export function activationClocks(nowMs: number, settings: LifetimeSettings) {
  return {
    activatedAtMs: nowMs,
    maxLifetimeExpiresAtMs: nowMs + settings.maxLifetimeMs,
    sessionExpiresAtMs: nowMs + settings.sessionTtlMs,
  };
}

/** The session expiry shown to clients: the earliest of the three deadlines. */
export function visibleExpiresAtMs(agent: AgentRecord, sessionExpiresAtMs: number | null): number | null {
  if (sessionExpiresAtMs === null) return null;
  return Math.min(sessionExpiresAtMs, agent.maxLifetimeExpiresAtMs, agent.absoluteExpiresAtMs);
}
