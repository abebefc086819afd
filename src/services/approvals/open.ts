// Approval objects (protocol §10), created when consent is needed: RFC 8628 device authorization,
// or CIBA (approvals/ciba.ts says when).
// An approval decides exactly the grant ids it was created for (DESIGN §8): a new request never
// joins an open approval, it gets a new one with a new code, so a person can only ever approve what
// the code showed them (SECURITY.md).
import type { Config } from '../../config.ts';
import type { AgentSnapshot, ApprovalRecord, HostRecord } from '../../domain/types.ts';
import type { PendingIndex, PersonRecords } from '../../store/store.ts';
import type { DepsWith } from '../deps.ts';
import { newApprovalId } from '../ids.ts';
import { announceApproval, DEVICE_AUTHORIZATION, type ApprovalRoute } from './ciba.ts';

/** A new approval of these grants, asking its person the way `route` says (services/approvals/ciba.ts). */
export function newApproval(grantIds: string[], nowMs: number, config: Config, route: ApprovalRoute = DEVICE_AUTHORIZATION): ApprovalRecord {
  return {
    id: newApprovalId(),
    grantIds,
    createdAtMs: nowMs,
    expiresAtMs: nowMs + config.APPROVAL_EXPIRES_IN_SECONDS * 1000,
    intervalSeconds: config.APPROVAL_INTERVAL_SECONDS,
    ...route,
  };
}

/** How an approval asked its person, for the approval that replaces it when it lapsed. */
export function routeOf(approval: ApprovalRecord | undefined): ApprovalRoute {
  if (approval?.method !== 'ciba') return DEVICE_AUTHORIZATION;
  return {
    method: 'ciba',
    ...(approval.personId === undefined ? {} : { personId: approval.personId }),
    ...(approval.bindingMessage === undefined ? {} : { bindingMessage: approval.bindingMessage }),
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
 * the clean-up job find it once it lapsed; a CIBA approval also goes into its person's inbox and,
 * when `opened` (this call created it), the person is told (approvals/ciba.ts). Run after every
 * change that opens an approval; an approval decided or replaced later is no longer found through
 * its old code, since the lookup checks the agent's current approval id.
 */
export async function indexOpenApproval(
  deps: DepsWith<'userCodes' | 'clock' | 'config' | 'logger' | 'notifier', PendingIndex & Pick<PersonRecords, 'addToInbox' | 'getPersonEmail'>>,
  snapshot: AgentSnapshot,
  host: Pick<HostRecord, 'id' | 'name'>,
  opened: boolean,
): Promise<void> {
  const approval = snapshot.agent.approval;
  if (!approval || approval.expiresAtMs <= deps.clock.nowMs()) return;
  const lookupKey = deps.userCodes.lookupKey(deps.userCodes.codeFor(approval.id))!;
  await deps.store.indexUserCode(lookupKey, snapshot.agent.id, approval.expiresAtMs);
  await deps.store.trackPending('approval', snapshot.agent.id, approval.expiresAtMs);
  announceApproval(deps, snapshot, host, opened);
}
