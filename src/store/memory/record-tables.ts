// The memory store's tables of hosts and agents, with their indexes, shared by three role objects:
// the host records (host-records.ts), the agent records (agent-records.ts) and the pending index
// (pending-index.ts). They share one set of tables rather than each keeping its own, because their
// atomic steps cross from one kind of record to the other: createAgent's admission reads the host
// and its agents in the step that links the agent (AgentAdmission in store.ts), listHostAgentIds
// lists what createAgent linked, and the clean-up removes a pending agent from its host's sets and
// a pending host only while it has no agents. The Redis store's role objects share the key layout
// of one connection instead, and its scripts make the same steps atomic.
import type { AgentRecord, AgentSnapshot, GrantRecord, HostRecord } from '../../domain/types.ts';
import { byId } from '../checks.ts';

export interface StoredAgent {
  agent: AgentRecord;
  /** By grant id, in insertion order (the order Redis's index lists keep). */
  grants: Map<string, GrantRecord>;
  sessionExpiresAtMs: number | null;
}

/** Records are deep-copied on the way in and out, so a caller can never change stored state except through the roles' methods. */
export const copy = <T>(value: T): T => structuredClone(value);

export class RecordTables {
  readonly #now: () => number;
  readonly hosts = new Map<string, HostRecord>();
  readonly hostIdByThumbprint = new Map<string, string>();
  readonly hostIdByJwksUrl = new Map<string, string>();
  readonly hostAgentIds = new Map<string, Set<string>>();
  /** hostId -> (agent id -> approval deadline ms): the pending slots, as the Redis sorted set. */
  readonly hostPending = new Map<string, Map<string, number>>();
  /** [hostId, keyThumbprint] (as JSON) -> agent id: the registration index. */
  readonly agentIdByHostKey = new Map<string, string>();
  readonly agents = new Map<string, StoredAgent>();

  constructor(now: () => number) {
    this.#now = now;
  }

  /** A deadline already past on the wall clock is dropped, as Redis drops an expired key. */
  setSession(stored: StoredAgent, deadlineMs: number | null): void {
    stored.sessionExpiresAtMs = deadlineMs !== null && deadlineMs > this.#now() ? deadlineMs : null;
  }

  currentSession(stored: StoredAgent): number | null {
    if (stored.sessionExpiresAtMs !== null && stored.sessionExpiresAtMs <= this.#now()) stored.sessionExpiresAtMs = null;
    return stored.sessionExpiresAtMs;
  }

  snapshotOf(stored: StoredAgent): AgentSnapshot {
    return copy({
      agent: stored.agent,
      grants: [...stored.grants.values()].sort(byId),
      sessionExpiresAtMs: this.currentSession(stored),
    });
  }

  hostAgentSet(hostId: string): Set<string> {
    let set = this.hostAgentIds.get(hostId);
    if (!set) this.hostAgentIds.set(hostId, (set = new Set()));
    return set;
  }
}

/** The registration index's key for (host, agent key). */
export function hostKey(hostId: string, keyThumbprint: string): string {
  return JSON.stringify([hostId, keyThumbprint]);
}
