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
  host: Pick<HostRecord, 'id' | 'name'> & {
    /** False when no person vouches for the host yet: approving links it to the approver. */
    linked: boolean;
  };
  approvalId: string;
  /** How the person was asked: by a code they typed, or told (CIBA) and deciding in their inbox. */
  method: 'device_authorization' | 'ciba';
  /** CIBA: what the agent says it shows, for the person to compare (the agent's words, shown as text). */
  bindingMessage: string | undefined;
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
    host: { id: host.id, name: host.name, linked: host.userId !== undefined },
    approvalId: approval.id,
    method: approval.method ?? 'device_authorization',
    bindingMessage: approval.bindingMessage,
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
 * the host to someone else since has not handed that person the agents decided before). A CIBA
 * approval was sent to one person, and only that person decides it: nobody else was told, and one
 * sent to nobody (its login_hint named no one) is an administrator's to decide.
 */
export function decidesFor(personId: string, host: Pick<HostRecord, 'userId'>, agent: Pick<AgentRecord, 'userId' | 'mode' | 'approval'>): boolean {
  if (agent.approval?.method === 'ciba' && agent.approval.personId !== personId) return false;
  return agent.mode === 'delegated' && (host.userId === undefined || host.userId === personId) && (agent.userId === undefined || agent.userId === personId);
}

/** Whether the agent's approval is a CIBA one sent to this person (it is then in their inbox). */
export function sentTo(personId: string, agent: Pick<AgentRecord, 'approval'>): boolean {
  return agent.approval?.method === 'ciba' && agent.approval.personId === personId;
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

