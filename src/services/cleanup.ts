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
import type { AuditEventInput } from '../audit/events.ts';
import type { AgentSnapshot } from '../domain/types.ts';
import type { Logger } from '../logger.ts';
import type { AgentRecords, HostRecords, PendingIndex } from '../store/store.ts';
import type { DepsWith } from './deps.ts';

/**
 * The clean-up reads and removes what waits (the pending index) and reads the records it names;
 * removals are recorded in the audit trail (actor `system`).
 */
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
  const { store } = deps;
  const agentsRemoved = await removeStale(deps, createdBeforeMs, {
    kind: 'agent',
    remove: (agentId) => store.removeStalePendingAgent(agentId, createdBeforeMs),
    stillPending: async (agentId) => (await store.getAgent(agentId))?.agent.status === 'pending',
    removed: (agentId) => ({ type: 'agent.removed', actor: 'system', agent_id: agentId, reason: 'pending_too_long' }),
  });
  const hostsRemoved = await removeStale(deps, createdBeforeMs, {
    kind: 'host',
    remove: (hostId) => store.removeStalePendingHost(hostId, createdBeforeMs),
    stillPending: async (hostId) => (await store.getHost(hostId))?.status === 'pending',
    removed: (hostId) => ({ type: 'host.removed', actor: 'system', host_id: hostId, reason: 'pending_too_long' }),
  });
  return { agentsRemoved, hostsRemoved, approvalsRemoved: await removeLapsedApprovals(deps) };
}

/** How the clean-up removes one kind of record that waited too long. */
interface StaleKind {
  kind: 'agent' | 'host';
  /** The store's guarded removal: false when the record is no longer pending or no longer that old. */
  remove(id: string): Promise<boolean>;
  stillPending(id: string): Promise<boolean>;
  removed(id: string): AuditEventInput;
}

async function removeStale(deps: CleanupDeps, createdBeforeMs: number, stale: StaleKind): Promise<number> {
  let removed = 0;
  for (const id of await deps.store.listStalePending(stale.kind, createdBeforeMs, BATCH)) {
    if (await stale.remove(id)) {
      removed++;
      deps.audit.record(stale.removed(id));
      continue;
    }
    // Not removed: decided meanwhile (its index entry is stale), or another instance won.
    if (!(await stale.stillPending(id))) await deps.store.untrackPending(stale.kind, id);
  }
  return removed;
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
