// The memory store's pending index (the PendingIndex role of store.ts): what waits for approval,
// by when, for the clean-up job, the clean-up's removals, and the approval page's user-code index,
// whose entries expire as their Redis keys would. The removals reach into the tables of hosts and
// agents it shares with their role objects (record-tables.ts says why).
import type { PendingIndex, PendingKind } from '../store.ts';
import { hostKey, type RecordTables } from './record-tables.ts';
import { ExpiringMap, type MemoryGate } from './shared-state.ts';

export class MemoryPendingIndex implements PendingIndex {
  readonly #gate: MemoryGate;
  readonly #tables: RecordTables;
  /** Agents and hosts waiting for approval, by creation time, and open approvals by deadline (for the clean-up job). */
  readonly #pendingSince: Record<PendingKind, Map<string, number>> = { agent: new Map(), host: new Map(), approval: new Map() };
  readonly #userCodes: ExpiringMap<string>;

  constructor(gate: MemoryGate, tables: RecordTables) {
    this.#gate = gate;
    this.#tables = tables;
    this.#userCodes = new ExpiringMap(gate.now);
  }

  async trackPending(kind: PendingKind, id: string, atMs: number): Promise<void> {
    this.#gate.assertOpen();
    this.#pendingSince[kind].set(id, atMs);
  }

  async untrackPending(kind: PendingKind, id: string): Promise<void> {
    this.#gate.assertOpen();
    this.#pendingSince[kind].delete(id);
  }

  async listStalePending(kind: PendingKind, beforeMs: number, limit: number): Promise<string[]> {
    this.#gate.assertOpen();
    return [...this.#pendingSince[kind]].filter(([, at]) => at < beforeMs).sort((a, b) => a[1] - b[1]).slice(0, limit).map(([id]) => id);
  }

  async removeStalePendingAgent(agentId: string, createdBeforeMs: number): Promise<boolean> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    const stored = tables.agents.get(agentId);
    if (!stored || stored.agent.status !== 'pending' || stored.agent.createdAtMs >= createdBeforeMs) return false;
    const { hostId, keyThumbprint } = stored.agent;
    tables.agents.delete(agentId);
    tables.hostAgentSet(hostId).delete(agentId);
    tables.hostPending.get(hostId)?.delete(agentId);
    if (tables.agentIdByHostKey.get(hostKey(hostId, keyThumbprint)) === agentId) tables.agentIdByHostKey.delete(hostKey(hostId, keyThumbprint));
    await this.untrackPending('agent', agentId);
    return true;
  }

  async removeStalePendingHost(hostId: string, createdBeforeMs: number): Promise<boolean> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    const host = tables.hosts.get(hostId);
    if (!host || host.status !== 'pending' || host.createdAtMs >= createdBeforeMs || tables.hostAgentSet(hostId).size > 0) return false;
    tables.hosts.delete(hostId);
    tables.hostAgentIds.delete(hostId);
    tables.hostPending.delete(hostId);
    if (tables.hostIdByThumbprint.get(host.thumbprint) === hostId) tables.hostIdByThumbprint.delete(host.thumbprint);
    if (host.jwksUrl !== undefined && tables.hostIdByJwksUrl.get(host.jwksUrl) === hostId) tables.hostIdByJwksUrl.delete(host.jwksUrl);
    await this.untrackPending('host', hostId);
    return true;
  }

  // ---- approvals ----------------------------------------------------------------------------

  async indexUserCode(lookupKey: string, agentId: string, untilMs: number): Promise<void> {
    this.#gate.assertOpen();
    this.#userCodes.set(lookupKey, agentId, untilMs);
  }

  async findAgentIdByUserCode(lookupKey: string): Promise<string | null> {
    this.#gate.assertOpen();
    return this.#userCodes.get(lookupKey);
  }
}
