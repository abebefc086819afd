// Turning requested capabilities into grants: validate constraints against the operator registry,
// ask the policy (`agentgate/grants`) per capability, refuse denials, and narrow constraints by
// what the server imposes. Shared by register, request-capability and reactivate.
import { narrowConstraints, validateConstraints } from '../domain/constraints.ts';
import { previousStatus } from '../domain/grant-history.ts';
import type { AgentRecord, Constraints, GrantRecord, GrantStatus, HostRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { decideOrRefuse } from '../policy/fail-closed.ts';
import type { GrantsInput, GrantsOutput } from '../policy/types.ts';
import type { ServiceDeps } from './deps.ts';
import { newGrantId } from './ids.ts';

export interface RequestedCapability {
  name: string;
  constraints?: Constraints | undefined;
}

/** One request per capability name: a repeated name keeps its first occurrence. */
export function dedupeRequests(requests: RequestedCapability[]): RequestedCapability[] {
  const seen = new Set<string>();
  return requests.filter((r) => (seen.has(r.name) ? false : (seen.add(r.name), true)));
}

/** Operator, size and schema checks of every proposal (400s), before anything is decided. */
export function validateRequests(deps: Pick<ServiceDeps, 'catalog' | 'logger' | 'operators' | 'policy'>, requests: readonly RequestedCapability[]): void {
  validateConstraints(requests.map((r) => ({ capability: r.name, constraints: r.constraints })), deps.operators, deps.catalog.declaredArguments);
}

interface GrantDecisionArgs {
  action: GrantsInput['action'];
  host: HostRecord;
  agent: Pick<AgentRecord, 'mode'> & { id: string | null };
  requests: RequestedCapability[];
  /** The agent's existing grants: the last decision per capability feeds the policy. */
  existing: GrantRecord[];
  agentId: string;
  nowMs: number;
  reason?: string | undefined;
}

/** New grant records (active or pending) for `requests`; throws on invalid or blocked ones. */
export function decideNewGrants(deps: Pick<ServiceDeps, 'catalog' | 'logger' | 'operators' | 'policy'>, args: GrantDecisionArgs): GrantRecord[] {
  validateRequests(deps, args.requests);
  if (args.requests.length === 0) return [];
  const input: GrantsInput = {
    now_ms: args.nowMs,
    action: args.action,
    host: {
      id: args.host.id,
      status: args.host.status,
      linked: args.host.userId !== undefined,
      default_capabilities: args.host.defaultCapabilities,
    },
    agent: { id: args.agent.id, mode: args.agent.mode },
    requests: args.requests.map((r) => ({
      capability: r.name,
      exists: deps.catalog.has(r.name),
      constraints: r.constraints ?? null,
      previous_status: previousStatus(args.existing, r.name),
    })),
  };
  const output: GrantsOutput = decideOrRefuse(deps.logger, 'agentgate/grants', () => deps.policy.decideGrants(input));
  const byName = new Map(output.decisions.map((d) => [d.capability, d]));
  const refused = args.requests.filter((r) => (byName.get(r.name)?.decision ?? 'deny') === 'deny');
  if (refused.length > 0) {
    // The policy's own reasons travel with the refusal: "blocked by policy" tells a client more
    // than a generic sentence would.
    const reasons = refused.map((r) => `${r.name} (${byName.get(r.name)?.reason ?? 'refused by policy'})`);
    throw new ApiError('invalid_capabilities', `capabilities that do not exist or may not be requested: ${reasons.join(', ')}`, {
      invalid_capabilities: refused.map((r) => r.name),
    });
  }
  return args.requests.map((r) => {
    const decision = byName.get(r.name)!;
    const presence = deps.catalog.get(r.name)?.approval_strength === 'presence';
    // DESIGN §8's consent invariant, kept here rather than trusted to the security team's Rego: a
    // capability that needs presence becomes active only through a person's passkey on the page or
    // an administrator's recorded decision, never pre-approved (host defaults, autonomous lists,
    // a policy rule), whatever the policy answers.
    const status: GrantStatus = decision.decision === 'grant' && !presence ? 'active' : 'pending';
    const constraints = narrowConstraints(r.constraints, decision.constraints);
    return {
      id: newGrantId(),
      agentId: args.agentId,
      capability: r.name,
      status,
      ...(constraints && Object.keys(constraints).length > 0 ? { constraints } : {}),
      ...(status === 'active' ? { grantedBy: 'policy' } : {}),
      ...reasonOf(args.reason, decision.reason ?? (status === 'pending' && presence ? 'needs a person with their passkey' : undefined)),
      createdAtMs: args.nowMs,
      updatedAtMs: args.nowMs,
    };
  });
}

/** The requester's reason when it gave one, else the policy's, each saying whose it is (the page shows only the requester's as a claim). */
function reasonOf(requester: string | undefined, policy: string | undefined): Pick<GrantRecord, 'reason' | 'reasonBy'> {
  if (requester) return { reason: requester, reasonBy: 'requester' };
  return policy ? { reason: policy, reasonBy: 'policy' } : {};
}
