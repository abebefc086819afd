// What an agent's grant records say about the past (SECURITY.md). A person's denial or a
// revocation must not be undone without a new approval, so the policy is told the last *decision*
// about a capability: a pending request is no decision, and it must never hide the denial before it.
// The history kept per capability is bounded: its live grants plus the one newest decided record.
import type { GrantRecord, GrantStatus } from './types.ts';

type Decided = Exclude<GrantStatus, 'pending'>;

const isLive = (g: GrantRecord) => g.status === 'active' || g.status === 'pending';

/** On the same millisecond, a refusal outranks a grant: when unsure, ask a person again. */
const RANK: Record<Decided, number> = { active: 0, revoked: 1, denied: 2 };

/** Whether `a` is a later decision than `b`. */
function laterDecision(a: GrantRecord & { status: Decided }, b: GrantRecord & { status: Decided }): boolean {
  if (a.updatedAtMs !== b.updatedAtMs) return a.updatedAtMs > b.updatedAtMs;
  return RANK[a.status] > RANK[b.status];
}

/** The newest decided grant (active, denied or revoked) of a capability, ignoring pending ones. */
function lastDecided(grants: readonly GrantRecord[], capability: string): (GrantRecord & { status: Decided }) | undefined {
  let latest: (GrantRecord & { status: Decided }) | undefined;
  for (const g of grants) {
    if (g.capability !== capability || g.status === 'pending') continue;
    const decided = g as GrantRecord & { status: Decided };
    if (!latest || laterDecision(decided, latest)) latest = decided;
  }
  return latest;
}

/** The status the policy sees as `previous_status`: the last decision, or null when none was made. */
export function previousStatus(grants: readonly GrantRecord[], capability: string): Decided | null {
  return lastDecided(grants, capability)?.status ?? null;
}

/**
 * Drops records nobody needs any more: of each capability's denied and revoked records only the
 * newest survives (it is what previousStatus reads, and what execute reports as grant_revoked).
 * Live grants are kept. Storage per agent is then bounded by the live-grant caps plus one record
 * per capability, however often an agent asks and is refused.
 */
export function pruneHistory(grants: readonly GrantRecord[]): GrantRecord[] {
  const newestRefusal = new Map<string, GrantRecord & { status: Decided }>();
  for (const g of grants) {
    if (isLive(g)) continue;
    const decided = g as GrantRecord & { status: Decided };
    const kept = newestRefusal.get(g.capability);
    if (!kept || laterDecision(decided, kept)) newestRefusal.set(g.capability, decided);
  }
  return grants.filter((g) => isLive(g) || newestRefusal.get(g.capability) === g);
}

/**
 * The history reactivation keeps (protocol §4.6): every earlier grant ends, and the policy decides
 * the host's defaults afresh. Per capability, the last decision survives as a record, an active
 * grant turning into a revoked one (it was withdrawn by the reactivation) while a denial stays a
 * denial; pending requests end without a record (nobody decided them). When the fresh grant of a
 * capability is active, that grant is the newest decision and nothing older is kept.
 */
export function historyAfterReactivation(previous: readonly GrantRecord[], fresh: readonly GrantRecord[], nowMs: number): GrantRecord[] {
  const activeAgain = new Set(fresh.filter((g) => g.status === 'active').map((g) => g.capability));
  const kept: GrantRecord[] = [];
  for (const capability of new Set(previous.map((g) => g.capability))) {
    if (activeAgain.has(capability)) continue;
    const last = lastDecided(previous, capability);
    if (!last) continue;
    kept.push(last.status === 'active' ? { ...last, status: 'revoked', updatedAtMs: nowMs } : last);
  }
  return kept;
}
