// The decision contract between agentgate and the Rego policy (DESIGN §5). Field names are
// snake_case because they are the policy's input and output documents.
import type { Constraints } from '../domain/types.ts';
import { NamedError } from '../common/thrown.ts';

/** Input of entrypoint `agentgate/grants`. */
export interface GrantsInput {
  /** Epoch milliseconds; wasm has no clock. */
  now_ms: number;
  action: 'register' | 'request_capability' | 'reactivate';
  host: {
    id: string;
    status: 'active' | 'pending' | 'revoked' | 'rejected';
    /** True when the host is linked to a user. */
    linked: boolean;
    default_capabilities: string[];
  };
  agent: { id: string | null; mode: 'delegated' | 'autonomous' };
  requests: Array<{
    capability: string;
    /** False when the catalog has no capability by this name. */
    exists: boolean;
    /** Agent-proposed constraints, if any. */
    constraints: Constraints | null;
    /** Earlier grant status of this capability for this agent (revoked/denied need approval). */
    previous_status: 'active' | 'pending' | 'denied' | 'revoked' | null;
  }>;
}

type GrantVerdict = 'grant' | 'approval' | 'deny';

/** Output of `agentgate/grants`: one decision per request, in any order. */
export interface GrantsOutput {
  decisions: Array<{
    capability: string;
    decision: GrantVerdict;
    reason?: string;
    /** Server-imposed constraints; agentgate intersects them with the proposal (narrow only). */
    constraints?: Constraints;
  }>;
}

/** Input of entrypoint `agentgate/execute`. */
export interface ExecuteInput {
  now_ms: number;
  agent: { id: string; mode: 'delegated' | 'autonomous'; host_id: string };
  capability: string;
  arguments: Record<string, unknown>;
  /** Active grants the agent holds for the capability (at least one). */
  grants: Array<{ id: string; constraints: Constraints | null }>;
}

export interface Violation {
  field: string;
  /** The single failing operator as {op: operand}. */
  constraint: Record<string, unknown>;
  /** The supplied value; absent when the argument was missing. */
  actual?: unknown;
  /** Set by agentgate (not the policy) when the argument was not supplied at all. */
  missing?: true;
}

/** Output of `agentgate/execute`. */
export interface ExecuteOutput {
  allow: boolean;
  /** The grant that allowed the call. */
  grant_id?: string;
  /**
   * When refused: the violations of the first grant, one item per violated field, whose
   * `constraint` holds only that field's failing operators (an exact value reads as {eq: value}).
   */
  violations: Violation[];
  reason?: string;
}

/**
 * Thrown by a PolicyEngine when a decision could not be made (exception inside wasm, undefined
 * result, malformed output, memory limit). Callers refuse the request: fail closed.
 */
export class PolicyError extends NamedError {}

/** The policy engine as services see it. It never answers an allow it did not compute. */
export interface PolicyEngine {
  decideGrants(input: GrantsInput): GrantsOutput;
  /**
   * `operator` answers the policy's `agentgate.operator(name, operand, actual)` for this decision
   * (the plugin sandbox's results); without it the engine's default answers, false when it has none.
   */
  decideExecute(input: ExecuteInput, operator?: (name: string, operand: unknown, actual: unknown) => boolean): ExecuteOutput;
  /**
   * Identity of the active artefact, for health and metrics; `instanceReplacements` counts the wasm
   * instances replaced after an exception (engines that never replace one leave it out).
   */
  info(): { sha256: string; loadedAtMs: number; generation: number; instanceReplacements?: number };
}
