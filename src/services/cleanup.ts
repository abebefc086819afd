// Removes what waited for approval too long (issue 15 point 7): agents still pending
// PENDING_MAX_AGE_SECONDS after they registered, and pending hosts of that age with no agents left.
// Every instance runs the job; each removal is one atomic step in the store that only one instance
// can win, so running it on several instances at once removes each item exactly once. An approval
// that expired leaves nothing to clean: its code index expires with it, and its agent goes here.
import type { Logger } from '../logger.ts';
import type { ServiceDeps } from './deps.ts';

/** Items looked at per kind and run: a long backlog is worked off over several runs, bounded each time. */
const BATCH = 200;

export interface CleanupResult {
  agentsRemoved: number;
  hostsRemoved: number;
}

export async function removeStalePending(deps: Pick<ServiceDeps, 'store' | 'clock'>, maxAgeMs: number): Promise<CleanupResult> {
  const createdBeforeMs = deps.clock.nowMs() - maxAgeMs;
  let agentsRemoved = 0;
  for (const agentId of await deps.store.listStalePending('agent', createdBeforeMs, BATCH)) {
    if (await deps.store.removeStalePendingAgent(agentId, createdBeforeMs)) {
      agentsRemoved++;
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
      continue;
    }
    const host = await deps.store.getHost(hostId);
    if (!host || host.status !== 'pending') await deps.store.untrackPending('host', hostId);
  }
  return { agentsRemoved, hostsRemoved };
}

/** Runs the clean-up every `intervalMs` (never overlapping itself); answers a function that stops it. */
export function scheduleCleanup(deps: Pick<ServiceDeps, 'store' | 'clock'>, intervalMs: number, maxAgeMs: number, logger: Logger): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    removeStalePending(deps, maxAgeMs)
      .then((result) => {
        if (result.agentsRemoved + result.hostsRemoved > 0) logger.info('removed agents and hosts that waited too long for approval', { ...result });
      })
      .catch((err: unknown) => logger.warn('clean-up of pending agents failed; it runs again later', { err }))
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
