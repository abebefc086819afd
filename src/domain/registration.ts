// Registration rules of protocol §4.3 and §7 that are not per-capability policy decisions.
import type { GrantRecord, HostRecord, Mode } from './types.ts';

/**
 * A registration waits for a person when the host is not yet trusted (pending), when a delegated
 * agent's host has no user to act for (unlinked), or when any requested grant needs approval.
 */
export function registrationNeedsApproval(host: Pick<HostRecord, 'status' | 'userId'>, mode: Mode, grants: GrantRecord[]): boolean {
  if (host.status === 'pending') return true;
  if (mode === 'delegated' && host.userId === undefined) return true;
  return grants.some((g) => g.status === 'pending');
}

/** The status a host created by dynamic registration starts in (protocol §4.3, §7.4). */
export function dynamicHostStatus(mode: Mode): HostRecord['status'] {
  // An autonomous agent has no user to approve its host, so its host starts active; whatever it
  // may do is still decided per capability by the policy. A delegated agent's host waits for a user.
  return mode === 'autonomous' ? 'active' : 'pending';
}
