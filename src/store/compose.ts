// Assembles one Store from its role objects (store.ts declares the roles). Both stores build one
// object per role over what those objects share (the memory store's state, the Redis store's
// connection) and hand them to composeStore, which puts each role's members on the store the rest
// of the code sees, bound to the object that implements them. So neither store writes a one-line
// delegating method per member of Store, and the two share this list of members instead of keeping
// one each.
import type { AgentRecords, AuditRecords, DecisionRecords, HostEnrollments, HostRecords, PendingIndex, PersonRecords, ReplayRecords, Store, StoreBackend } from './store.ts';

/** The objects one store is made of: one per role of store.ts. */
interface StoreRoles {
  hosts: HostRecords;
  agents: AgentRecords;
  replay: ReplayRecords;
  pending: PendingIndex;
  people: PersonRecords;
  enrollments: HostEnrollments;
  audit: AuditRecords;
  decisions: DecisionRecords;
  backend: StoreBackend;
}

/**
 * The members of a role, each named once. A mapped type over the role's keys: leaving a member out,
 * or naming one the role does not have, is a type error, so the lists below cannot drift from the
 * interfaces (a role object's other public members, such as the Redis backend's durability
 * description, are not the role's and are not copied).
 */
type MemberList<Role> = { readonly [Member in keyof Role]-?: true };

const ROLE_MEMBERS: { readonly [Role in keyof StoreRoles]: MemberList<StoreRoles[Role]> } = {
  hosts: { getHost: true, findHostByThumbprint: true, findHostByJwksUrl: true, createHost: true, updateHost: true, rotateHostKey: true, listHostAgentIds: true },
  agents: {
    getAgent: true,
    findAgentIdByKey: true,
    createAgent: true,
    forgetPendingAgent: true,
    casAgent: true,
    claimAgentKey: true,
    releaseAgentKey: true,
    executeRoundTrip: true,
  },
  replay: { recordAgentJti: true, recordHostJti: true, recordStatusPoll: true, useChallenge: true },
  pending: {
    trackPending: true,
    untrackPending: true,
    listStalePending: true,
    removeStalePendingAgent: true,
    removeStalePendingHost: true,
    indexUserCode: true,
    findAgentIdByUserCode: true,
  },
  people: {
    addPersonHost: true,
    removePersonHost: true,
    listPersonHostIds: true,
    listPasskeys: true,
    addPasskey: true,
    updatePasskey: true,
    removePasskey: true,
    savePersonContact: true,
    findPersonByHint: true,
    getPersonEmail: true,
    addToInbox: true,
    listInbox: true,
    saveSession: true,
    loadSession: true,
    deleteSession: true,
  },
  enrollments: { createEnrollment: true, findEnrollment: true, completeEnrollment: true },
  audit: {
    appendAuditEvents: true,
    readAuditEvents: true,
    claimAuditEvents: true,
    acknowledgeAuditEvents: true,
    renewAuditClaims: true,
    releaseAuditClaims: true,
    forgetIdleAuditConsumers: true,
  },
  decisions: { appendDecisionRecords: true, readDecisionRecords: true, decisionStreamAddress: true },
  backend: {
    kind: true,
    sharedSecret: true,
    publishAgentInvalidation: true,
    onAgentInvalidation: true,
    confirmDurable: true,
    isUnavailable: true,
    ping: true,
    close: true,
  },
};

/** Members of Store that no role of StoreRoles has; composeStore would leave them out, so it refuses to compile while there are any. */
type Unassigned = Exclude<keyof Store, { [Role in keyof StoreRoles]: keyof StoreRoles[Role] }[keyof StoreRoles]>;
type EveryMemberAssigned = [Unassigned] extends [never] ? unknown : { storeMembersInNoRole: Unassigned };

/**
 * Puts every member of every role on `target`: a method bound to its role object (called in the
 * caller's tick, so a command a method issues before its first await still joins the caller's
 * auto-pipeline, as executeRoundTrip, appendAuditEvents and appendDecisionRecords rely on), a value
 * (the backend's kind) copied. A method is writable, configurable and not enumerable, as a class
 * method is, so a Proxy (src/store/guard.ts, tests) may answer another function in its place; the
 * kind is enumerable, as a class field is. A member two roles both claim is a bug, and throws.
 *
 * The class that calls this declares, by an interface of the same name extending Store, that its
 * instances have every member; ROLE_MEMBERS' type and EveryMemberAssigned make that true.
 */
export function composeStore(target: object, roles: StoreRoles & EveryMemberAssigned): void {
  for (const role of Object.keys(ROLE_MEMBERS) as (keyof StoreRoles)[]) {
    const implementation: object = roles[role];
    for (const member of Object.keys(ROLE_MEMBERS[role])) {
      if (Object.hasOwn(target, member)) throw new Error(`store member ${member} is claimed by two roles`);
      const value: unknown = Reflect.get(implementation, member);
      if (typeof value === 'function') {
        Object.defineProperty(target, member, { value: value.bind(implementation), writable: true, configurable: true, enumerable: false });
      } else {
        Object.defineProperty(target, member, { value, writable: true, configurable: true, enumerable: true });
      }
    }
  }
}
