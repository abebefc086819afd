// POST /capability/execute, the hot path (DESIGN §2; protocol §9). Every step can only refuse.
// Cost on a warm key cache: one signature verification, one Redis round trip, one policy decision.
import { assertIssuer } from '../auth/agent-auth.ts';
import type { CachedAgentKey } from '../auth/key-cache.ts';
import { unknownOperators } from '../domain/constraints.ts';
import { agentRefusal, effectiveStatus } from '../domain/lifecycle.ts';
import type { AgentRecord, GrantRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { Capability } from '../catalog/catalog.ts';
import { CapabilityBackendError } from '../execution/handlers.ts';
import { answersFor, pluginCalls } from '../operators/plugin-calls.ts';
import { SandboxUnavailableError } from '../operators/sandbox.ts';
import type { OperatorEvaluator } from '../policy/engine.ts';
import { decideOrRefuse } from '../policy/fail-closed.ts';
import type { Violation } from '../policy/types.ts';
import type { ExecuteRoundTripResult } from '../store/store.ts';
import { revokeChange } from './agents.ts';
import type { ServiceDeps } from './deps.ts';
import { forgetCachedKeyEverywhere } from './key-invalidation.ts';

export interface ExecuteRequest {
  capability: string;
  arguments: Record<string, unknown>;
}

export async function executeCapability(deps: ServiceDeps, token: string | null, request: ExecuteRequest): Promise<unknown> {
  const { config, clock, store } = deps;
  // Step 2: typ, claims and time rules need no key and no I/O.
  const unverified = deps.agentAuth.precheck(token, [config.executeUrl, config.issuer]);
  // Step 3: verify with the cached key (a cold cache costs one read), before anything is written.
  let key = await deps.agentAuth.verifyWithCachedKey(unverified.agentId, unverified.decoded);
  // Step 4: one round trip confirms the key version, records the jti, extends the session.
  const jtiTtlMs = deps.agentAuth.jtiTtlMs();
  const roundTrip = (k: CachedAgentKey) => store.executeRoundTrip({
    agentId: unverified.agentId, keyVersion: k.keyVersion, jti: unverified.jti, jtiTtlMs,
    capability: request.capability, nowMs: clock.nowMs(), sessionTtlMs: config.AGENT_SESSION_TTL_SECONDS * 1000,
  });
  // Step 6's commands are issued in the same tick, so auto-pipelining sends them with the round
  // trip's script (DESIGN §2 step 6); their verdict is read after the lifecycle checks, in
  // DESIGN's order. A capability with a budget of its own spends it in the same pipeline (its name
  // is in the body), unless the token may not call it at all.
  const claimAllows = unverified.capabilityClaim === null || unverified.capabilityClaim.includes(request.capability);
  const capabilityPointSpent = claimAllows ? deps.limits.consumeCapability(request.capability, unverified.agentId) : Promise.resolve(false);
  const budgetsVerdict = Promise.all([deps.limits.consume('agent', unverified.agentId), deps.limits.consume('host', key.hostId), capabilityPointSpent]);
  budgetsVerdict.catch(() => {});
  let agent: AgentRecord;
  let grants: GrantRecord[];
  let nowMs: number;
  try {
    let result: ExecuteRoundTripResult = await roundTrip(key);
    if (result.kind === 'stale_key') {
      // Another instance rotated the key before our cache heard of it: reload once and retry.
      deps.agentAuth.forgetKey(unverified.agentId);
      key = await deps.agentAuth.verifyWithCachedKey(unverified.agentId, unverified.decoded);
      result = await roundTrip(key);
    }
    if (result.kind === 'not_found') throw new ApiError('invalid_jwt', 'agent JWT names an unknown agent');
    if (result.kind === 'stale_key') throw new ApiError('invalid_jwt', 'the agent key was rotated');
    if (result.kind === 'replay') throw new ApiError('invalid_jwt', 'JWT jti has already been used (replay)');
    ({ agent, grants } = result);
    assertIssuer(unverified.decoded.claims, agent.hostThumbprint);
    // Step 5: lifecycle.
    nowMs = clock.nowMs();
    const refusal = agentRefusal(agent, result.sessionExpiresAtMs, nowMs);
    if (refusal) {
      if (refusal.code === 'absolute_lifetime_exceeded') persistAbsoluteRevocation(deps, agent);
      throw refusal;
    }
  } catch (err) {
    // Refused before the call could reach the capability (a replay, say): its own budget, often
    // small and long, gets the point back, so a captured token cannot drain it. The agent's and
    // host's per-minute budgets keep theirs, as for any other refused request.
    if (await capabilityPointSpent.catch(() => false)) await deps.limits.refundCapability(request.capability, unverified.agentId);
    throw err;
  }
  // Step 6: the budgets' verdict.
  await budgetsVerdict;

  // Step 7: the JWT's capabilities claim, the catalog, then the grant.
  if (!claimAllows) {
    throw new ApiError('capability_not_granted', 'the JWT capabilities claim does not include this capability');
  }
  const capability = deps.catalog.get(request.capability);
  if (!capability) throw new ApiError('capability_not_found', 'no capability has this name');
  const active = activeGrants(grants, nowMs);
  const args = validatedArguments(capability, request.arguments);
  const unknown = [...new Set(active.flatMap((g) => unknownOperators(g.constraints, deps.operators)))];
  if (unknown.length > 0) {
    throw new ApiError('unknown_constraint_operator', `the grant uses constraint operator(s) this server no longer knows: ${unknown.join(', ')}`, { unknown_operators: unknown });
  }
  // Step 8: the policy decides on the constraints; plugin operators were answered in the sandbox.
  const operator = await pluginAnswers(deps, active, args);
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
  // Step 9: run the handler.
  try {
    return await deps.runCapability(capability, {
      agentId: agent.id, hostId: agent.hostId, userId: agent.userId, grantId: decision.grant_id ?? active[0]!.id, arguments: args,
    });
  } catch (err) {
    if (err instanceof CapabilityBackendError) {
      deps.logger.error('capability backend failed', { capability: capability.name, agentId: agent.id, err });
      throw new ApiError('internal_error', 'the capability backend failed');
    }
    throw err;
  }
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
 */
async function pluginAnswers(deps: ServiceDeps, grants: GrantRecord[], args: Record<string, unknown>): Promise<OperatorEvaluator> {
  const calls = pluginCalls(grants, args, (name) => deps.operators.isPlugin(name));
  if (calls.length === 0) return NO_PLUGIN_CALLS;
  try {
    const outcomes = await deps.pluginSandbox.evaluate(calls);
    return answersFor(calls, outcomes.map((o) => o.kind === 'allowed'));
  } catch (err) {
    if (err instanceof SandboxUnavailableError) {
      deps.logger.error('plugin operators unavailable; refusing', { err });
      throw new ApiError('service_unavailable', 'constraint operators are unavailable; retry later');
    }
    throw err;
  }
}

/** Active grants, else the refusal that explains why there is none. */
function activeGrants(grants: GrantRecord[], nowMs: number): GrantRecord[] {
  const active = grants.filter((g) => g.status === 'active' && (g.expiresAtMs === undefined || g.expiresAtMs > nowMs));
  if (active.length > 0) return active;
  if (grants.some((g) => g.status === 'revoked')) throw new ApiError('grant_revoked', 'the grant for this capability was revoked');
  throw new ApiError('capability_not_granted', 'the agent holds no active grant for this capability');
}

const NUMERIC_STRING = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/;

/**
 * Coerces numeric strings only where the input schema says number (DESIGN §6), then validates
 * against the schema: 400 invalid_request before the policy runs.
 */
export function validatedArguments(capability: Capability, given: Record<string, unknown>): Record<string, unknown> {
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
function persistAbsoluteRevocation(deps: ServiceDeps, agent: AgentRecord): void {
  void (async () => {
    const snapshot = await deps.store.getAgent(agent.id);
    if (!snapshot || snapshot.agent.status === 'revoked') return;
    if (effectiveStatus(snapshot.agent, snapshot.sessionExpiresAtMs, deps.clock.nowMs()).because !== 'absolute_lifetime') return;
    await deps.store.casAgent(agent.id, snapshot.agent.version, revokeChange(snapshot, deps.clock.nowMs()));
    await forgetCachedKeyEverywhere(deps, agent.id);
  })().catch((err: unknown) => deps.logger.warn('could not persist absolute-lifetime revocation', { agentId: agent.id, err }));
}
