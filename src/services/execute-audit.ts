// What execute and batch execute record in the audit trail: one event per call,
// `execute.allowed` (the policy allowed it; `outcome` says whether its handler completed) or
// `execute.refused` with the error code, plus one `execute.refused` for a request refused whole.
// Never the arguments or the token. Recording only queues (audit/log.ts), and a refusal an
// agent repeats (say, a revoked agent calling on) is recorded once per window, its repeats counted
// into one summary, keyed by agent and code, never by the capability it names (audit/events.ts
// refusalKey).
import type { AuditEventInput } from '../audit/events.ts';
import type { AgentRecord } from '../domain/types.ts';
import { isApiError } from '../errors.ts';
import type { ServiceDeps } from './deps.ts';

/** Who called, as far as authentication got: set once the agent JWT's signature verified. */
export interface AuditedCaller {
  agentId?: string;
  hostId?: string;
}

/** What ties a call's event to its request: the request id, and for a batch item its id. */
export interface CallContext {
  request_id?: string | undefined;
  batch?: boolean;
  call_id?: string;
}

const codeOf = (err: unknown): string => (isApiError(err) ? err.code : 'internal_error');

/** Whole-request refusals a caller can repeat without a fresh signature: replays, and budgets spent. */
const VOLUME_CODES: ReadonlySet<string> = new Set(['invalid_jwt', 'rate_limited']);

/**
 * A request refused before any call was judged (identity, replay, lifecycle, budgets). Before the
 * signature verified nobody is known, so the event names no agent. Refusals anyone can repeat at
 * volume are capped (audit/log.ts): a bad token needs no key, a captured token can be
 * replayed until it expires, and rate-limit refusals come in volume by definition. Once the agent
 * is known, its repeats (a lifecycle refusal on every call, a replay) are aggregated as well.
 */
export function recordRefusedWhole(
  deps: Pick<ServiceDeps, 'audit'>, caller: AuditedCaller, err: unknown,
  detail: { capability?: string; request_id?: string | undefined; batch?: boolean; calls?: number },
): void {
  deps.audit.record(
    { type: 'execute.refused', actor: 'agent', agent_id: caller.agentId, host_id: caller.hostId, outcome: 'refused', code: codeOf(err), ...detail },
    { capped: caller.agentId === undefined || VOLUME_CODES.has(codeOf(err)) },
  );
}

/** One call refused in steps 6–8 (claim, catalog, grant, arguments, constraints, policy). */
export function recordCallRefused(deps: Pick<ServiceDeps, 'audit'>, agent: AgentRecord, capability: string, err: unknown, context: CallContext): void {
  deps.audit.record({
    type: 'execute.refused', actor: 'agent', agent_id: agent.id, host_id: agent.hostId, person_id: agent.userId, capability,
    outcome: 'refused', code: codeOf(err), ...context,
  });
}

/** One call the policy allowed: it used the grant; `err` is its handler's failure, or null. */
export function recordCallAllowed(
  deps: Pick<ServiceDeps, 'audit'>, agent: AgentRecord, grantId: string, capability: string, err: unknown, context: CallContext,
): void {
  // Built member by member rather than with spreads (one event per execute): the same members in
  // the same order, `code` only when the handler failed, then the context's.
  const event: AuditEventInput = {
    type: 'execute.allowed', actor: 'agent', agent_id: agent.id, host_id: agent.hostId, person_id: agent.userId, capability, grant_id: grantId,
    outcome: err === null ? 'completed' : 'failed',
  };
  if (err !== null) event.code = codeOf(err);
  deps.audit.record(Object.assign(event, context));
}
