// The one view of an open approval a person is shown, by the approval page and the people's API
// alike, so what a person sees cannot differ by door; and the one rule of who may decide it.
import type { Catalog } from '../../catalog/catalog.ts';
import type { AgentRecord, AgentSnapshot, Constraints, HostRecord } from '../../domain/types.ts';
import type { HostRecords, PersonRecords } from '../../store/store.ts';
import type { DepsWith } from '../deps.ts';

/** One capability an approval decides, as a person sees it, with the id of the grant it decides. */
export interface RequestedGrant {
  grantId: string;
  capability: string;
  description: string;
  constraints: Constraints | undefined;
  /** The reason the agent or host gave for this request (never the policy's): their claim. */
  reason: string | undefined;
  /**
   * Why agentgate's policy asks a person (e.g. "user approval required"), when the requester gave
   * no reason of its own (a grant keeps one reason, and says whose: GrantRecord.reasonBy). Shown
   * as agentgate's words, never as the agent's.
   */
  policyReason: string | undefined;
  /** 'presence': approving it needs a passkey on the approval page, not only a sign-in. */
  approvalStrength: 'sign_in' | 'presence';
}

/** One open approval, as the page and the people's API show it. */
export interface ApprovalForPerson {
  agent: Pick<AgentRecord, 'id' | 'name' | 'mode' | 'reason' | 'status'>;
  host: Pick<HostRecord, 'id' | 'name'>;
  approvalId: string;
  expiresAtMs: number;
  /** True when the agent itself waits (a registration), not only some of its grants. */
  registration: boolean;
  requested: RequestedGrant[];
}

/**
 * What the agent's open approval decides, as a person sees it: the agent, its host, and exactly the
 * pending grants the approval was created for. Null when nothing is open (decided, replaced,
 * expired, or the agent is no longer pending or active). The one view the page and the people's
 * API both show, so what a person sees cannot differ by door.
 */
export function approvalForPerson(catalog: Catalog, host: HostRecord, snapshot: AgentSnapshot, nowMs: number): ApprovalForPerson | null {
  const { agent, grants } = snapshot;
  const approval = agent.approval;
  if (!approval || approval.expiresAtMs <= nowMs || (agent.status !== 'pending' && agent.status !== 'active')) return null;
  const decides = new Set(approval.grantIds);
  return {
    agent: { id: agent.id, name: agent.name, mode: agent.mode, reason: agent.reason, status: agent.status },
    host: { id: host.id, name: host.name },
    approvalId: approval.id,
    expiresAtMs: approval.expiresAtMs,
    registration: agent.status === 'pending',
    requested: grants
      .filter((g) => g.status === 'pending' && decides.has(g.id))
      .map((g) => {
        const capability = catalog.get(g.capability);
        return {
          grantId: g.id,
          capability: g.capability,
          description: capability?.description ?? '(this capability is no longer offered)',
          constraints: g.constraints,
          // What the agent or host wrote is their claim; the policy's reason is agentgate's, kept apart.
          reason: g.reasonBy === 'policy' ? undefined : g.reason,
          policyReason: g.reasonBy === 'policy' ? g.reason : undefined,
          approvalStrength: capability?.approval_strength ?? 'sign_in',
        };
      }),
  };
}

/**
 * Whether a person may decide for this agent: a delegated agent acts for one person, so once its
 * host or the agent itself names a person, only that person decides (an administrator who linked
 * the host to someone else since has not handed that person the agents decided before).
 */
export function decidesFor(personId: string, host: Pick<HostRecord, 'userId'>, agent: Pick<AgentRecord, 'userId' | 'mode'>): boolean {
  return agent.mode === 'delegated' && (host.userId === undefined || host.userId === personId) && (agent.userId === undefined || agent.userId === personId);
}

/**
 * Names an agent or host might imitate on this person's page: the server's own, and the names of
 * the person's other hosts (read from their host links: bounded by what they linked).
 */
export async function namesToTellApart(deps: DepsWith<'config', Pick<HostRecords, 'getHost'> & Pick<PersonRecords, 'listPersonHostIds'>>, personId: string, shownHostId: string): Promise<string[]> {
  const names = [deps.config.PROVIDER_NAME];
  const hostIds = (await deps.store.listPersonHostIds(personId)).filter((id) => id !== shownHostId).slice(0, 50);
  for (const host of await Promise.all(hostIds.map((id) => deps.store.getHost(id)))) {
    if (host?.name && host.userId === personId) names.push(host.name);
  }
  return names;
}

