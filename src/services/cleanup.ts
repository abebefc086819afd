// Removes what waited for approval too long: agents still pending
// PENDING_MAX_AGE_SECONDS after they registered, pending hosts of that age with no agents left, and
// approvals that lapsed on agents that are no longer pending (a request-capability nobody decided).
// Every instance runs the job; each removal is one atomic step in the store that only one instance
// can win (a delete guarded by status and age, or a compare-and-set on the agent's version), so
// running it on several instances at once removes each item exactly once.
//
// A lapsed approval's pending grants are deleted, not denied: nobody decided them, and a denial
// would become the policy's `previous_status` for the next request (docs/stances.md). A client
// waiting on their ids sees them gone and may ask again; the next request gets a new approval.
// A pending agent's lapsed approval stays until the agent itself is removed for its age: the host
// may still ask for a fresh code (POST /agent/device/code).
import type { AgentSnapshot } from '../domain/types.ts';
import type { Logger } from '../logger.ts';
import type { AgentRecords, HostRecords, PendingIndex } from '../store/store.ts';
import type { DepsWith } from './deps.ts';

/** What the clean-up needs; removals are recorded in the audit trail (actor `system`). */
/** The clean-up reads and removes what waits (the pending index) and reads the records it names. */
type CleanupDeps = DepsWith<'clock' | 'audit', PendingIndex & Pick<AgentRecords, 'getAgent' | 'casAgent'> & Pick<HostRecords, 'getHost'>>;

/** Items looked at per kind and run: a long backlog is worked off over several runs, bounded each time. */
const BATCH = 200;

interface CleanupResult {
  agentsRemoved: number;
  hostsRemoved: number;
  approvalsRemoved: number;
}

export async function removeStalePending(deps: CleanupDeps, maxAgeMs: number): Promise<CleanupResult> {
  const createdBeforeMs = deps.clock.nowMs() - maxAgeMs;
  let agentsRemoved = 0;
  for (const agentId of await deps.store.listStalePending('agent', createdBeforeMs, BATCH)) {
    if (await deps.store.removeStalePendingAgent(agentId, createdBeforeMs)) {
      agentsRemoved++;
      deps.audit.record({ type: 'agent.removed', actor: 'system', agent_id: agentId, reason: 'pending_too_long' });
      continue;
    }
    // Not removed: decided meanwhile (its index entry is stale), or another instance won.
    const snapshot = await deps.store.getAgent(agentId);
    if (!snapshot || snapshot.agent.status !== 'pending') await deps.store.untrackPending('agent', agentId);
  }
  let hostsRemoved = 0;
  for (const hostId of await deps.store.listStalePending('host', createdBeforeMs, BATCH)) {
    if (await deps.store.removeStalePendingHost(hostId, createdBeforeMs)) {
      hostsRemoved++;
      deps.audit.record({ type: 'host.removed', actor: 'system', host_id: hostId, reason: 'pending_too_long' });
      continue;
    }
    const host = await deps.store.getHost(hostId);
    if (!host || host.status !== 'pending') await deps.store.untrackPending('host', hostId);
  }
  return { agentsRemoved, hostsRemoved, approvalsRemoved: await removeLapsedApprovals(deps) };
}

async function removeLapsedApprovals(deps: CleanupDeps): Promise<number> {
  const nowMs = deps.clock.nowMs();
  let removed = 0;
  for (const agentId of await deps.store.listStalePending('approval', nowMs, BATCH)) {
    const snapshot = await deps.store.getAgent(agentId);
    const approval = snapshot?.agent.approval;
    // Renewed meanwhile: tracking it again moved its entry to the new deadline.
    if (approval && approval.expiresAtMs > nowMs) continue;
    if (snapshot && approval && snapshot.agent.status !== 'pending') {
      const result = await deps.store.casAgent(agentId, snapshot.agent.version, withoutLapsedApproval(snapshot, nowMs));
      // Lost to another instance or to a concurrent change: the next run looks again.
      if (!result.ok) continue;
      removed++;
      deps.audit.record({ type: 'approval.lapsed', actor: 'system', agent_id: agentId, host_id: snapshot.agent.hostId, approval_id: approval.id });
    }
    await deps.store.untrackPending('approval', agentId);
  }
  return removed;
}

/** The agent without its lapsed approval and the grants that were still waiting on it. */
function withoutLapsedApproval(snapshot: AgentSnapshot, nowMs: number) {
  const waiting = new Set(snapshot.agent.approval?.grantIds ?? []);
  return {
    replaceGrants: snapshot.grants.filter((g) => !(g.status === 'pending' && waiting.has(g.id))),
    set: { approval: null, updatedAtMs: nowMs },
  };
}

/** Runs the clean-up every `intervalMs` (never overlapping itself); answers a function that stops it. */
export function scheduleCleanup(deps: CleanupDeps, intervalMs: number, maxAgeMs: number, logger: Logger): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    removeStalePending(deps, maxAgeMs)
      .then((result) => {
        if (result.agentsRemoved + result.hostsRemoved + result.approvalsRemoved > 0) {
          logger.info('removed agents, hosts and approvals that waited too long for a decision', { ...result });
        }
      })
      .catch((err: unknown) => logger.warn('clean-up of pending agents failed; it runs again later', { err }))
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
