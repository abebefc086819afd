// A withdrawal of authority is acknowledged only once it would survive a failover (DESIGN §10):
// revocations of agents, hosts and grants, key rotations, denials and unlinks call this after their
// writes. When no replica confirms in time, the change is written and in force on the master, but
// the answer must not say it is done: 503 service_unavailable says it is not yet durable, and the
// same request, repeated, confirms it (every withdrawal is idempotent). docs/stances.md explains
// the choice of status.
import type { DurabilityAnchors, StoreBackend } from '../store/store.ts';
import { ApiError } from '../errors.ts';
import type { DepsWith } from './deps.ts';

/** Seconds a client waits before repeating a withdrawal that was not yet durable. */
const RETRY_AFTER_SECONDS = 1;

/**
 * Waits until the withdrawal's writes (to these agents and hosts) are on a replica; throws 503
 * when they are not confirmed in time. `what` names the change for the message ("the revocation");
 * `then` says how the caller confirms it (a denial cannot be repeated: the agent is decided).
 */
export async function confirmWithdrawal(
  deps: DepsWith<'logger' | 'config', Pick<StoreBackend, 'confirmDurable'>>, anchors: DurabilityAnchors, what: string, then = 'repeat the request to confirm it',
): Promise<void> {
  if ((await deps.store.confirmDurable(anchors)) === 'durable') return;
  deps.logger.warn('a withdrawal is in force but no Redis replica confirmed it in time; answered 503 so the caller repeats it', {
    what, agentIds: anchors.agentIds?.slice(0, 20), hostIds: anchors.hostIds,
  });
  throw new ApiError(
    'service_unavailable',
    `${what} is in force, but no Redis replica confirmed it within ${deps.config.REDIS_WAIT_TIMEOUT_MS} ms, so a failover could still undo it; ${then}`,
    undefined,
    { 'Retry-After': String(RETRY_AFTER_SECONDS) },
  );
}
