// RFC 8628 device-authorization approval objects (protocol §10), created when consent is needed.
// An approval decides exactly the grant ids it was created for (DESIGN §8): a new request never
// joins an open approval, it gets a new one with a new code, so a person can only ever approve what
// the code showed them (SECURITY.md).
import type { Config } from '../../config.ts';
import type { AgentSnapshot, ApprovalRecord } from '../../domain/types.ts';
import type { PendingIndex } from '../../store/store.ts';
import type { DepsWith } from '../deps.ts';
import { newApprovalId } from '../ids.ts';

export function newApproval(grantIds: string[], nowMs: number, config: Config): ApprovalRecord {
  return {
    id: newApprovalId(),
    grantIds,
    createdAtMs: nowMs,
    expiresAtMs: nowMs + config.APPROVAL_EXPIRES_IN_SECONDS * 1000,
    intervalSeconds: config.APPROVAL_INTERVAL_SECONDS,
  };
}

/**
 * The approval after some of its grants were withdrawn (revoked by the agent or its host): it keeps
 * its code and decides only what is left, which is less than the person was shown. With nothing
 * left, and no registration waiting on it, there is nothing to approve: null.
 */
export function withoutGrants(approval: ApprovalRecord, withdrawnIds: ReadonlySet<string>, registrationWaits: boolean): ApprovalRecord | null {
  const grantIds = approval.grantIds.filter((id) => !withdrawnIds.has(id));
  if (grantIds.length === 0 && !registrationWaits) return null;
  return { ...approval, grantIds };
}

/**
 * Lets the approval page find the agent's open approval by its user code (until it expires), and
 * the clean-up job find it once it lapsed. Run after every change that opens an approval; an
 * approval decided or replaced later is no longer found through its old code, since the lookup
 * checks the agent's current approval id.
 */
export async function indexOpenApproval(deps: DepsWith<'userCodes' | 'clock', PendingIndex>, snapshot: AgentSnapshot): Promise<void> {
  const approval = snapshot.agent.approval;
  if (!approval || approval.expiresAtMs <= deps.clock.nowMs()) return;
  const lookupKey = deps.userCodes.lookupKey(deps.userCodes.codeFor(approval.id))!;
  await deps.store.indexUserCode(lookupKey, snapshot.agent.id, approval.expiresAtMs);
  await deps.store.trackPending('approval', snapshot.agent.id, approval.expiresAtMs);
}
