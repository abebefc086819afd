// POST /capability/execute, the hot path (DESIGN §2; protocol §9). Every step can only refuse.
// Cost on a warm key cache: one signature verification, one Redis round trip, one policy decision.
import { assertIssuer } from '../auth/agent-auth.ts';
import type { CachedAgentKey } from '../auth/key-cache.ts';
import { jsonText } from '../domain/consent-text.ts';
import { unknownOperators, unknownOperatorsError, usesUnknownOperator } from '../domain/constraints.ts';
import { agentRefusal, effectiveStatus } from '../domain/lifecycle.ts';
import type { AgentRecord, GrantRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { Capability } from '../catalog/catalog.ts';
import { CapabilityBackendError } from '../execution/handlers.ts';
import { answersFor, pluginCalls, type PluginCall } from '../operators/plugin-calls.ts';
import { SandboxUnavailableError } from '../operators/sandbox.ts';
import type { OperatorEvaluator } from '../policy/engine.ts';
import { decideOrRefuse } from '../policy/fail-closed.ts';
import type { Violation } from '../policy/types.ts';
import type { AuditHandover } from '../audit/log.ts';
import type { DecisionHandover } from './decision-log.ts';
import type { AgentRecords, CounterCount, ExecuteRoundTrip, ExecuteRoundTripResult, StoreBackend } from '../store/store.ts';
import { revokeChange } from './agents.ts';
import type { ServiceDepsOver } from './deps.ts';
import { recordCallAllowed, recordCallRefused, recordRefusedWhole, type AuditedCaller, type CallContext } from './execute-audit.ts';
import { forgetCachedKeyEverywhere } from './key-invalidation.ts';

/** What execute may touch of the store: the roles below, no others. */
type ExecuteDeps = ServiceDepsOver<AgentRecords & Pick<StoreBackend, 'publishAgentInvalidation'>>;

interface ExecuteRequest {
  capability: string;
  arguments: Record<string, unknown>;
}

/** What steps 2–6 established for one agent JWT and the calls it carries. */
export interface AuthenticatedCalls {
  agent: AgentRecord;
  /** Every grant of the agent for any capability the calls name, any status. */
  grants: GrantRecord[];
  /** The moment every call is judged at: lifecycle, grant expiry, the policy's now_ms. */
  nowMs: number;
  /** The JWT's `capabilities` claim; null when the token is not restricted. */
  capabilityClaim: string[] | null;
  /**
   * Per call, in order: its point of its capability's own budget, settling as that budget decides
   * (429 or 503 when it refuses), or null when nothing was spent (no budget, or the claim leaves
   * the capability out).
   */
  capabilityPoints: Array<Promise<void> | null>;
}

/**
 * POST /capability/execute: authentication for its one capability, then the call. Its capability
 * budget's verdict was read with the agent's and host's (step 6), so the call has none left to read.
 */
export async function executeCapability(deps: ExecuteDeps, token: string | null, request: ExecuteRequest, requestId?: string): Promise<unknown> {
  const names = [request.capability];
  const caller: AuditedCaller = {};
  let authenticated: AuthenticatedCalls;
  try {
    authenticated = await authenticateCalls(deps, token, names, names, 'execute', caller);
  } catch (err) {
    recordRefusedWhole(deps, caller, err, { capability: request.capability, request_id: requestId });
    throw err;
  }
  return auditedCall(deps, authenticated, request, null, { request_id: requestId });
}

/**
 * Steps 2–6 once for all the calls one agent JWT carries: `callCapabilities` names each call's
 * capability in order (each call spends one point of the agent's and the host's budgets, and one
 * of its capability's own); `capabilities` are the distinct names among them, whose grants the
 * round trip returns. Refuses the whole request for identity, replay, lifecycle and the agent's or
 * host's budget; in a batch, never for what concerns one call alone. `caller` learns the agent
 * and host once the signature verified, so a refusal after that point is recorded as theirs.
 */
export async function authenticateCalls(
  deps: ExecuteDeps, token: string | null, capabilities: readonly string[], callCapabilities: readonly string[], endpoint: 'execute' | 'batch',
  caller: AuditedCaller = {},
): Promise<AuthenticatedCalls> {
  const { config, clock, store } = deps;
  // Step 2: typ, claims and time rules need no key and no I/O.
  const unverified = deps.agentAuth.precheck(token, [config.executeUrl, config.issuer]);
  const { agentId } = unverified;
  // Step 3: verify with the cached key (a cold cache costs one read), before anything is written.
  // A cached key that verifies answers at once (not a promise): only a load is awaited, so the
  // common case does not suspend here (agent-auth.ts says why).
  const verified = deps.agentAuth.verifyWithCachedKey(agentId, unverified.decoded);
  let key = verified instanceof Promise ? await verified : verified;
  caller.agentId = agentId;
  caller.hostId = key.hostId;
  // Step 4: one command confirms the key version, records the jti, extends the session, spends
  // the agent's and host's budgets (one point of each per call; on Redis they are counters in the
  // same command, in process they are spent beside it) and appends the audit events waiting in
  // this instance's queue (audit/log.ts), and the recorded policy decisions waiting in theirs
  // (decision-log.ts): no command of their own.
  const jtiTtlMs = deps.agentAuth.jtiTtlMs();
  const calls = callCapabilities.length;
  const budgets = deps.limits.callerSpend(agentId, key.hostId, calls);
  const roundTrip = (k: CachedAgentKey, audit: AuditHandover | null, decisions: DecisionHandover | null) => {
    const request: ExecuteRoundTrip = {
      agentId, keyVersion: k.keyVersion, jti: unverified.jti, jtiTtlMs,
      capabilities, nowMs: clock.nowMs(), sessionTtlMs: config.AGENT_SESSION_TTL_SECONDS * 1000,
      counters: budgets.counters,
    };
    if (audit) request.audit = { records: audit.records, maxEvents: audit.maxEvents };
    if (decisions) request.decisions = { records: decisions.records, maxRecords: decisions.maxRecords };
    const sent = store.executeRoundTrip(request);
    audit?.settle(sent.then((result) => result.auditWritten));
    decisions?.settle(sent.then((result) => result.decisionsWritten));
    return sent;
  };
  // Step 6's capability budgets are spent in the same tick, so auto-pipelining sends them with the
  // round trip (a capability with a budget of its own, named in the body, costs one command more);
  // their verdict is read later, in DESIGN's order. A call spends one point of its capability's
  // budget unless the token may not call that capability at all.
  const claim = unverified.capabilityClaim;
  const capabilityPoints = callCapabilities.map((name) => (claim === null || claim.includes(name) ? spendCapabilityPoint(deps, name, agentId) : null));
  // Execute's one call is the request: its capability's budget refuses it as the agent's or host's
  // do, and the capability's answers first, as execute always has. In a batch that budget's
  // verdict belongs to its call alone (auditedCall reads it).
  const onlyPoint = endpoint === 'execute' ? capabilityPoints[0] : null;
  let agent: AgentRecord;
  let grants: GrantRecord[];
  let nowMs: number;
  let counts: readonly CounterCount[];
  try {
    let result: ExecuteRoundTripResult = await roundTrip(key, deps.audit.handOver(), deps.decisions.handOver());
    if (result.kind === 'stale_key') {
      // Another instance rotated the key before our cache heard of it: reload once and retry.
      deps.agentAuth.forgetKey(agentId);
      key = await deps.agentAuth.verifyWithCachedKey(agentId, unverified.decoded);
      result = await roundTrip(key, null, null);
    }
    if (result.kind === 'not_found') throw new ApiError('invalid_jwt', 'agent JWT names an unknown agent');
    if (result.kind === 'stale_key') throw new ApiError('invalid_jwt', 'the agent key was rotated');
    if (result.kind === 'replay') throw new ApiError('invalid_jwt', 'JWT jti has already been used (replay)');
    ({ agent, grants, counts } = result);
    assertIssuer(unverified.decoded.claims, agent.hostThumbprint);
    // Step 5: lifecycle.
    nowMs = clock.nowMs();
    const refusal = agentRefusal(agent, result.sessionExpiresAtMs, nowMs);
    if (refusal) {
      if (refusal.code === 'absolute_lifetime_exceeded') persistAbsoluteRevocation(deps, agent);
      throw refusal;
    }
  } catch (err) {
    // Refused before any call could reach its capability (a replay, say): their own budgets, often
    // small and long, get the points back, so a captured token cannot drain them. The agent's and
    // host's per-minute budgets keep theirs, as for any other refused request.
    await giveBackCapabilityPoints(deps, callCapabilities, capabilityPoints, agentId);
    throw err;
  }
  // Step 6: the agent's and host's budgets cover every call, or the whole request is refused.
  if (onlyPoint) await onlyPoint;
  await budgets.verdict(counts);
  return { agent, grants, nowMs, capabilityClaim: claim, capabilityPoints };
}

/**
 * Steps 6 (the capability's own budget) to 9 for one call of an authenticated request, recorded in
 * the audit trail: its own grants, arguments and constraints decide (decideCall), and its refusal
 * concerns it alone (`execute.refused` with its code); an allowed call runs (runDecidedCall) and is
 * recorded as `execute.allowed` with the outcome (completed, or failed and its code).
 */
export async function auditedCall(
  deps: ExecuteDeps, authenticated: AuthenticatedCalls, request: ExecuteRequest, capabilityPoint: Promise<void> | null, context: CallContext,
): Promise<unknown> {
  let allowed: AllowedCall;
  try {
    allowed = await decideCall(deps, authenticated, request, capabilityPoint);
  } catch (err) {
    recordCallRefused(deps, authenticated.agent, request.capability, err, context);
    throw err;
  }
  try {
    const data = await runDecidedCall(deps, authenticated, allowed);
    recordCallAllowed(deps, authenticated.agent, allowed.grantId, request.capability, null, context);
    return data;
  } catch (err) {
    recordCallAllowed(deps, authenticated.agent, allowed.grantId, request.capability, err, context);
    throw err;
  }
}

/** What steps 6–8 allowed: the call may run. */
interface AllowedCall {
  capability: Capability;
  arguments: Record<string, unknown>;
  /** The grant the policy named (else the first active one). */
  grantId: string;
}

/** Steps 6–8 for one call: a refusal throws; an allowed call is returned to run. */
async function decideCall(
  deps: ExecuteDeps, authenticated: AuthenticatedCalls, request: ExecuteRequest, capabilityPoint: Promise<void> | null,
): Promise<AllowedCall> {
  const { agent, grants, nowMs, capabilityClaim } = authenticated;
  if (capabilityPoint) await capabilityPoint;
  // Step 7: the JWT's capabilities claim, the catalog, then the grant.
  if (capabilityClaim !== null && !capabilityClaim.includes(request.capability)) {
    throw new ApiError('capability_not_granted', 'the JWT capabilities claim does not include this capability');
  }
  const capability = deps.catalog.get(request.capability);
  if (!capability) {
    // Named (escaped, so a look-alike shows as one) as registration names the capabilities it refuses.
    throw new ApiError('capability_not_found', `no capability is named ${jsonText(request.capability)} on this server; GET /capability/list names those there are`);
  }
  const active = activeGrants(grants, request.capability, nowMs);
  const args = validatedArguments(capability, request.arguments);
  if (active.some((g) => usesUnknownOperator(g.constraints, deps.operators))) {
    const unknown = [...new Set(active.flatMap((g) => unknownOperators(g.constraints, deps.operators)))];
    throw unknownOperatorsError(`the grant uses constraint operator(s) this server no longer knows: ${unknown.join(', ')}`, unknown, deps.operators);
  }
  // Step 8: the policy decides on the constraints; plugin operators were answered in the sandbox.
  const calls = pluginCalls(active, args, (name) => deps.operators.isPlugin(name));
  // Most grants use no plugin operator: then nothing is awaited.
  const operator = calls.length === 0 ? NO_PLUGIN_CALLS : await pluginAnswers(deps, calls, active);
  const decision = decideOrRefuse(deps.logger, 'agentgate/execute', () => deps.policy.decideExecute({
    now_ms: nowMs,
    agent: { id: agent.id, mode: agent.mode, host_id: agent.hostId },
    capability: capability.name,
    arguments: args,
    grants: active.map((g) => ({ id: g.id, constraints: g.constraints ?? null })),
  }, operator));
  if (!decision.allow) {
    if (decision.violations.length > 0) {
      throw new ApiError('constraint_violated', 'the arguments break the constraints of the grant', { violations: withMissingHints(decision.violations, args) });
    }
    throw new ApiError('capability_not_granted', decision.reason ?? 'the policy refused this call');
  }
  return { capability, arguments: args, grantId: decision.grant_id ?? active[0]!.id };
}

/** Step 9: run the handler of an allowed call. */
async function runDecidedCall(deps: ExecuteDeps, authenticated: AuthenticatedCalls, call: AllowedCall): Promise<unknown> {
  const { agent } = authenticated;
  const { capability } = call;
  try {
    return await deps.runCapability(capability, {
      agentId: agent.id, hostId: agent.hostId, userId: agent.userId, grantId: call.grantId, arguments: call.arguments,
    });
  } catch (err) {
    if (err instanceof CapabilityBackendError) {
      deps.logger.error('capability backend failed', { capability: capability.name, agentId: agent.id, err });
      throw new ApiError('internal_error', 'the capability backend failed');
    }
    throw err;
  }
}

/** One point of the capability's own budget, if it has one; its refusal is read by its call alone. */
function spendCapabilityPoint(deps: ExecuteDeps, capability: string, agentId: string): Promise<void> | null {
  const spent = deps.limits.consumeCapability(capability, agentId);
  spent?.catch(() => {});
  return spent;
}

/**
 * Gives back every point the calls took from their capabilities' own budgets (a refused spend gave
 * its own back already), so a request refused whole leaves those budgets as it found them, however
 * many of its calls share one.
 */
async function giveBackCapabilityPoints(
  deps: ExecuteDeps, callCapabilities: readonly string[], points: ReadonlyArray<Promise<void> | null>, agentId: string,
): Promise<void> {
  await Promise.all(callCapabilities.map(async (capability, i) => {
    const point = points[i];
    if (!point) return;
    // A refused spend gave its count back itself (RateLimits.consumeCapability).
    const spent = await point.then(() => true, () => false);
    if (spent) await deps.limits.refundCapability(capability, agentId);
  }));
}

const NO_PLUGIN_CALLS: OperatorEvaluator = () => false;

/**
 * A violation of an argument the call did not supply says so (`missing: true`) instead of only
 * lacking `actual`: "amount is missing" and "amount is wrong" need different fixes. The protocol
 * allows extra members; clients that read only field, constraint and actual see no change.
 */
function withMissingHints(violations: Violation[], args: Record<string, unknown>): Violation[] {
  return violations.map((v) => (Object.hasOwn(args, v.field) ? v : { ...v, missing: true }));
}

/**
 * The answers to every plugin operator call the policy will make, worked out in the plugin sandbox
 * within its time budget (a call past it is a violation). Only executes whose grants use a plugin
 * operator pay the worker round trip; a sandbox that cannot take the calls is a 503, never an allow.
 * The grants are the calling agent's own (one agent's snapshot), so the first names the agent the
 * sandbox is fair between, and each call names its grants, which an overrun trips.
 */
async function pluginAnswers(deps: ExecuteDeps, calls: PluginCall[], grants: GrantRecord[]): Promise<OperatorEvaluator> {
  try {
    const outcomes = await deps.pluginSandbox.evaluate(calls, grants[0]!.agentId);
    return answersFor(calls, outcomes.map((o) => o.kind === 'allowed'));
  } catch (err) {
    if (err instanceof SandboxUnavailableError) {
      deps.logger.error('plugin operators unavailable; refusing', { err });
      throw new ApiError('service_unavailable', 'constraint operators are unavailable; retry later');
    }
    throw err;
  }
}

/** The active grants for this capability, else the refusal that explains why there is none. */
function activeGrants(grants: GrantRecord[], capability: string, nowMs: number): GrantRecord[] {
  const active = grants.filter((g) => g.capability === capability && g.status === 'active' && (g.expiresAtMs === undefined || g.expiresAtMs > nowMs));
  if (active.length > 0) return active;
  if (grants.some((g) => g.capability === capability && g.status === 'revoked')) throw new ApiError('grant_revoked', 'the grant for this capability was revoked');
  throw new ApiError('capability_not_granted', 'the agent holds no active grant for this capability');
}

const NUMERIC_STRING = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/;

/**
 * Coerces numeric strings only where the input schema says number (DESIGN §6), then validates
 * against the schema: 400 invalid_request before the policy runs.
 */
export function validatedArguments(capability: Capability, given: Record<string, unknown>): Record<string, unknown> {
  if (capability.closed) {
    // Named before the schema runs, so the refusal says which argument (the body bounds the loop).
    for (const name of Object.keys(given)) {
      if (!capability.declaredArguments.has(name)) {
        throw new ApiError('invalid_request', `argument ${jsonText(name.slice(0, 64))} is not declared by ${capability.name}; it takes ${[...capability.declaredArguments].sort().join(', ')}`);
      }
    }
  }
  let args = given;
  for (const field of capability.numericFields) {
    const value = args[field];
    if (typeof value === 'string' && NUMERIC_STRING.test(value.trim()) && Number.isFinite(Number(value))) {
      if (args === given) args = { ...given };
      args[field] = Number(value);
    }
  }
  const validate = capability.validateInput;
  if (validate && !validate(args)) {
    const first = validate.errors?.[0];
    throw new ApiError('invalid_request', `arguments do not match the input schema of ${capability.name}: ${first ? `${first.instancePath || '(root)'} ${first.message}` : 'invalid'}`);
  }
  return args;
}

/** Absolute lifetime revokes for good; persisted off the request path (the refusal stands anyway). */
function persistAbsoluteRevocation(deps: ExecuteDeps, agent: AgentRecord): void {
  void (async () => {
    const snapshot = await deps.store.getAgent(agent.id);
    if (!snapshot || snapshot.agent.status === 'revoked') return;
    if (effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, deps.clock.nowMs()).because !== 'absolute_lifetime') return;
    const result = await deps.store.casAgent(agent.id, snapshot.agent.version, revokeChange(snapshot, deps.clock.nowMs()));
    if (result.ok) deps.audit.record({ type: 'agent.revoked', actor: 'system', agent_id: agent.id, host_id: agent.hostId, reason: 'absolute_lifetime' });
    await forgetCachedKeyEverywhere(deps, agent.id);
  })().catch((err: unknown) => deps.logger.warn('could not persist absolute-lifetime revocation', { agentId: agent.id, err }));
}
