// CIBA approvals (protocol §10, and §11.5 on CIBA's rate limits and enumeration): the server tells a person it knows that an agent
// asks for them, and the person decides in their inbox (the page /inbox, or GET
// /people/me/inbox). Which method a call gets is domain/approval-method.ts's rule; here it meets
// the store (who a login_hint names), the budgets, the inbox and the notifier.
//
// No enumeration: a login_hint that names nobody is answered exactly like one that names someone.
// Both cost one lookup and the same budgets on the request path, both answer a CIBA approval
// object, and what differs (putting the item in an inbox, sending the notice) happens after the
// answer, off the request path. For an unknown hint nothing is sent to anyone; the approval lapses
// unless an administrator decides it.
import { createHash } from 'node:crypto';
import { cibaAddressee, type ApprovalHints } from '../../domain/approval-method.ts';
import type { AgentSnapshot, ApprovalRecord, HostRecord, Mode } from '../../domain/types.ts';
import type { ApprovalNotifier } from '../../notify/approval-notifier.ts';
import type { PersonRecords } from '../../store/store.ts';
import type { DepsWith } from '../deps.ts';

/** How an approval about to be opened asks its person: what newApproval adds to the record. */
export type ApprovalRoute = Pick<ApprovalRecord, 'method' | 'personId' | 'bindingMessage'>;

export const DEVICE_AUTHORIZATION: ApprovalRoute = {};

/** Items a person's inbox keeps; the ones nearest to lapsing go first. */
export const INBOX_MAX_ITEMS = 200;

type RouteDeps = DepsWith<'limits' | 'notifier', Pick<PersonRecords, 'findPersonByHint'>>;

/**
 * How the approval this call may open asks its person: CIBA (to whom, with which binding message),
 * or device authorization. A CIBA call spends a point of the host's and the person's hourly budgets
 * first (protocol §11.5: no notification fatigue): 429 with Retry-After beyond either. Registration
 * asks only once it knows it creates an agent (a retry asks nobody again); request-capability and
 * reactivation ask before they know whether an approval opens, and spend either way. The host's budget is counted by its key's thumbprint, so a host
 * registering itself with this call is counted before it is stored. The person's budget is counted
 * by the login_hint as given (after trimming and, for an address, lower-casing), never by whom it
 * names, so a refusal cannot tell a known person from an unknown one.
 */
export async function approvalRouteFor(
  deps: RouteDeps, host: { thumbprint: string; userId?: string | undefined }, mode: Mode, hints: ApprovalHints,
): Promise<ApprovalRoute> {
  const addressee = cibaAddressee({ cibaOffered: deps.notifier !== undefined, mode, hostPersonId: host.userId, hints });
  if (addressee === null) return DEVICE_AUTHORIZATION;
  await deps.limits.consume('cibaHost', budgetKeyOf(`host:${host.thumbprint}`));
  await deps.limits.consume('cibaPerson', budgetKeyOf(addressee.kind === 'host' ? `person:${addressee.personId}` : `hint:${addressee.hintKey}`));
  const personId = addressee.kind === 'host' ? addressee.personId : await deps.store.findPersonByHint(addressee.hintKey);
  return {
    method: 'ciba',
    ...(personId === null ? {} : { personId }),
    ...(hints.bindingMessage === undefined ? {} : { bindingMessage: hints.bindingMessage }),
  };
}

/** A budget key: hashed, since a login hint may hold any character and a key is a Redis hash tag. */
const budgetKeyOf = (value: string) => createHash('sha256').update(value).digest('base64url');

type AnnounceDeps = DepsWith<'config' | 'clock' | 'logger' | 'notifier', Pick<PersonRecords, 'addToInbox' | 'getPersonEmail'>>;

/**
 * After a CIBA approval was written: the item goes into its person's inbox, and, when `opened` (this
 * call created the approval, rather than finding it open), the person is told. Runs off the request
 * path (the caller does not wait), so the answer takes as long whether or not the hint named
 * someone; a failure is logged, and the approval stays decidable by its link and by an administrator.
 */
export function announceApproval(deps: AnnounceDeps, snapshot: AgentSnapshot, host: Pick<HostRecord, 'id' | 'name'>, opened: boolean): void {
  const approval = snapshot.agent.approval;
  if (!approval || approval.method !== 'ciba' || approval.personId === undefined) return;
  if (approval.expiresAtMs <= deps.clock.nowMs()) return;
  const personId = approval.personId;
  const work = async () => {
    await deps.store.addToInbox(personId, snapshot.agent.id, approval.expiresAtMs, INBOX_MAX_ITEMS);
    if (!opened || !deps.notifier) return;
    const pending = new Set(approval.grantIds);
    deps.notifier.notify({
      approvalId: approval.id,
      agentId: snapshot.agent.id,
      hostId: host.id,
      personId,
      personEmail: await deps.store.getPersonEmail(personId),
      agentName: snapshot.agent.name,
      hostName: host.name,
      capabilities: snapshot.grants.filter((g) => pending.has(g.id)).map((g) => g.capability).sort(),
      bindingMessage: approval.bindingMessage,
      expiresAtMs: approval.expiresAtMs,
      link: inboxLink(deps.config.issuer, approval.id),
    });
  };
  setImmediate(() => {
    work().catch((err: unknown) => deps.logger.warn('a CIBA approval could not be put in its inbox or announced; it stays decidable by its link', { agentId: snapshot.agent.id, approvalId: approval.id, err }));
  });
}

/** The inbox item of an approval: its id is all the link holds (no code, no token). */
export function inboxLink(issuer: string, approvalId: string): string {
  return `${issuer}/inbox/${encodeURIComponent(approvalId)}`;
}

/** The methods discovery lists: CIBA only where a person can be told. */
export function approvalMethods(notifier: ApprovalNotifier | undefined): string[] {
  return notifier ? ['device_authorization', 'ciba'] : ['device_authorization'];
}
