// What an agent waits on a person for, decided from its stored snapshot alone: the admin's list of
// open approvals (GET /admin/approvals) is built from it. Pure, so the rule is tested without a store.
import type { AgentSnapshot, ApprovalRecord, GrantRecord } from './types.ts';

export interface WaitingAgent {
  snapshot: AgentSnapshot;
  /** The approval a person can still decide, or null when it lapsed (or never existed). */
  openApproval: ApprovalRecord | null;
  /** The approval on record, open or lapsed: its expiry is what the admin is shown. */
  approval: ApprovalRecord | null;
  /** True when the registration itself waits (the agent is pending), not only some grants. */
  registration: boolean;
  /** The pending grants a decision would settle, by capability name. */
  requested: GrantRecord[];
}

/**
 * A pending agent always waits (its registration does, even after its approval lapsed, until the
 * clean-up job removes it). An active agent waits only while an open approval still has pending
 * grants to decide: a lapsed one decides nothing, and the clean-up job deletes its grants.
 * Every other status (revoked, rejected, claimed, expired) waits on nobody.
 */
export function whatAgentWaitsFor(snapshot: AgentSnapshot, nowMs: number): WaitingAgent | null {
  const { agent, grants } = snapshot;
  if (agent.status !== 'pending' && agent.status !== 'active') return null;
  const approval = agent.approval ?? null;
  const openApproval = approval !== null && approval.expiresAtMs > nowMs ? approval : null;
  const decides = approval ? new Set(approval.grantIds) : null;
  // By name: a store keeps grants in no particular order, and a list should read the same every time.
  const requested = grants
    .filter((g) => g.status === 'pending' && (decides === null || decides.has(g.id)))
    .sort((a, b) => a.capability.localeCompare(b.capability) || a.id.localeCompare(b.id));
  if (agent.status === 'active' && (openApproval === null || requested.length === 0)) return null;
  return { snapshot, openApproval, approval, registration: agent.status === 'pending', requested };
}

/** Oldest registration first, then by id, so the list reads the same on every call. */
export function byRegistrationTime(a: WaitingAgent, b: WaitingAgent): number {
  const byTime = a.snapshot.agent.createdAtMs - b.snapshot.agent.createdAtMs;
  return byTime !== 0 ? byTime : a.snapshot.agent.id.localeCompare(b.snapshot.agent.id);
}
