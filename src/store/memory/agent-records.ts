// The memory store's agents (the AgentRecords role of store.ts), hot path included, in the tables
// it shares with the host records and the pending index (record-tables.ts says why they share
// them). Its jti cache is the replay records' own (replay-records.ts says why).
import type { AgentRecord, AgentSnapshot } from '../../domain/types.ts';
import {
  assertGrantsBelongTo,
  assertTaggable,
  assertVersion,
  byId,
  checkRoundTripNumbers,
  normalizeTtlMs,
  roundTripAudit,
  roundTripCapabilities,
  roundTripCounters,
  roundTripDecisions,
} from '../checks.ts';
import type {
  AgentAdmission, AgentChange, AgentRecords, AuditRecords, CasResult, CounterCount, CounterSpend, CreateAgentResult, DecisionRecords, ExecuteRoundTrip, ExecuteRoundTripResult,
} from '../store.ts';
import { applyPatch, isUsable } from './agent-changes.ts';
import { copy, hostKey, type RecordTables, type StoredAgent } from './record-tables.ts';
import { agentJtiKey, type ReplayCache } from './replay-records.ts';
import { ExpiringMap, type MemoryGate } from './shared-state.ts';

export class MemoryAgentRecords implements AgentRecords {
  readonly #gate: MemoryGate;
  readonly #tables: RecordTables;
  readonly #jtis: ReplayCache;
  /** The audit trail the round trip appends the events it carries to (the store's own audit role). */
  readonly #audit: Pick<AuditRecords, 'appendAuditEvents'>;
  /** The decision records the round trip appends the records it carries to (the store's own decisions role). */
  readonly #decisions: Pick<DecisionRecords, 'appendDecisionRecords'>;
  /** The round trip's windowed counters: the count in the current window, forgotten when it ends. */
  readonly #windows: ExpiringMap<{ consumed: number; untilMs: number }>;

  constructor(
    gate: MemoryGate,
    tables: RecordTables,
    jtis: ReplayCache,
    audit: Pick<AuditRecords, 'appendAuditEvents'>,
    decisions: Pick<DecisionRecords, 'appendDecisionRecords'>,
  ) {
    this.#gate = gate;
    this.#tables = tables;
    this.#jtis = jtis;
    this.#audit = audit;
    this.#decisions = decisions;
    this.#windows = new ExpiringMap(gate.now);
  }

  async getAgent(agentId: string): Promise<AgentSnapshot | null> {
    this.#gate.assertOpen();
    const stored = this.#tables.agents.get(agentId);
    return stored ? this.#tables.snapshotOf(stored) : null;
  }

  async findAgentIdByKey(hostId: string, keyThumbprint: string): Promise<string | null> {
    this.#gate.assertOpen();
    return this.#tables.agentIdByHostKey.get(hostKey(hostId, keyThumbprint)) ?? null;
  }

  async createAgent(snapshot: AgentSnapshot, admission?: AgentAdmission): Promise<CreateAgentResult> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    const { agent, grants } = snapshot;
    assertTaggable('agent id', agent.id);
    assertTaggable('host id', agent.hostId);
    assertGrantsBelongTo(agent.id, grants);
    const indexKey = hostKey(agent.hostId, agent.keyThumbprint);
    const existing = tables.agentIdByHostKey.get(indexKey);
    if (existing !== undefined) return { created: false, reason: 'exists', existingAgentId: existing };
    if (tables.agents.has(agent.id)) throw new Error(`agent id ${agent.id} already exists`);
    if (admission) {
      const refusal = this.#admissionRefusal(agent, admission);
      if (refusal) return { created: false, reason: refusal };
    }
    const stored: StoredAgent = { agent: copy(agent), grants: new Map(), sessionExpiresAtMs: null };
    for (const grant of grants) stored.grants.set(grant.id, copy(grant));
    tables.setSession(stored, snapshot.sessionExpiresAtMs);
    tables.agents.set(agent.id, stored);
    tables.agentIdByHostKey.set(indexKey, agent.id);
    tables.hostAgentSet(agent.hostId).add(agent.id);
    return { created: true, snapshot: copy({ ...snapshot, grants: [...grants].sort(byId) }) };
  }

  /** The checks the Redis admission script makes, in the same order; records the pending slot. */
  #admissionRefusal(agent: AgentRecord, admission: AgentAdmission): 'host_changed' | 'too_many_agents' | 'too_many_pending' | null {
    const tables = this.#tables;
    const host = tables.hosts.get(agent.hostId);
    if (!host || host.status !== agent.hostStatus || host.thumbprint !== agent.hostThumbprint || host.userId !== admission.hostUserId) return 'host_changed';
    if (tables.hostAgentSet(agent.hostId).size >= admission.maxAgents) return 'too_many_agents';
    if (admission.pendingUntilMs !== undefined) {
      const pending = tables.hostPending.get(agent.hostId) ?? new Map<string, number>();
      for (const [id, untilMs] of pending) if (untilMs <= admission.nowMs) pending.delete(id);
      if (pending.size >= admission.maxPendingAgents) return 'too_many_pending';
      pending.set(agent.id, admission.pendingUntilMs);
      tables.hostPending.set(agent.hostId, pending);
    }
    return null;
  }

  async forgetPendingAgent(hostId: string, agentId: string): Promise<void> {
    this.#gate.assertOpen();
    const pending = this.#tables.hostPending.get(hostId);
    pending?.delete(agentId);
    if (pending?.size === 0) this.#tables.hostPending.delete(hostId);
  }

  async casAgent(agentId: string, expectVersion: number, change: AgentChange): Promise<CasResult> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    assertVersion('expectVersion', expectVersion);
    assertGrantsBelongTo(agentId, change.replaceGrants);
    assertGrantsBelongTo(agentId, change.upsertGrants);
    const stored = tables.agents.get(agentId);
    if (!stored) return { ok: false, reason: 'not_found', snapshot: null };
    if (stored.agent.version !== expectVersion) return { ok: false, reason: 'conflict', snapshot: tables.snapshotOf(stored) };
    stored.agent = applyPatch(stored.agent, change.set ?? {}, expectVersion + 1);
    if (change.replaceGrants !== undefined) stored.grants.clear();
    for (const grant of [...(change.replaceGrants ?? []), ...(change.upsertGrants ?? [])]) {
      stored.grants.set(grant.id, copy(grant));
    }
    if (change.sessionExpiresAtMs !== undefined) tables.setSession(stored, change.sessionExpiresAtMs);
    return { ok: true, snapshot: tables.snapshotOf(stored) };
  }

  async claimAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<'claimed' | 'ours' | 'taken'> {
    this.#gate.assertOpen();
    assertTaggable('host id', hostId);
    const owner = this.#tables.agentIdByHostKey.get(hostKey(hostId, thumbprint));
    if (owner === undefined) {
      this.#tables.agentIdByHostKey.set(hostKey(hostId, thumbprint), agentId);
      return 'claimed';
    }
    return owner === agentId ? 'ours' : 'taken';
  }

  async releaseAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<void> {
    this.#gate.assertOpen();
    const index = this.#tables.agentIdByHostKey;
    if (index.get(hostKey(hostId, thumbprint)) === agentId) index.delete(hostKey(hostId, thumbprint));
  }

  // ---- hot path ------------------------------------------------------------------------------

  async executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    checkRoundTripNumbers(request);
    const capabilities = roundTripCapabilities(request);
    const counters = roundTripCounters(request);
    const audit = roundTripAudit(request);
    const decisions = roundTripDecisions(request);
    const ttlMs = normalizeTtlMs(request.jtiTtlMs);
    // The events and records are appended whatever the outcome: they are other calls' records, carried here.
    const auditWritten = audit ? await this.#audit.appendAuditEvents(audit.records, audit.maxEvents) : [];
    const decisionsWritten = decisions ? await this.#decisions.appendDecisionRecords(decisions.records, decisions.maxRecords) : [];
    const stored = tables.agents.get(request.agentId);
    if (!stored) return { kind: 'not_found', auditWritten, decisionsWritten };
    if (stored.agent.keyVersion !== request.keyVersion) return { kind: 'stale_key', auditWritten, decisionsWritten };
    const counts = counters.map((counter) => this.#spend(counter));
    if (!this.#jtis.record(agentJtiKey(request.agentId, request.jti), ttlMs)) return { kind: 'replay', counts, auditWritten, decisionsWritten };
    const agentAsRead = copy(stored.agent);
    const sessionAsRead = tables.currentSession(stored);
    if (isUsable(stored.agent, sessionAsRead, request.nowMs)) {
      tables.setSession(stored, request.nowMs + request.sessionTtlMs);
      stored.agent = { ...stored.agent, lastUsedAtMs: request.nowMs };
    }
    const grants = [...stored.grants.values()].filter((grant) => capabilities.includes(grant.capability));
    return { kind: 'ok', agent: agentAsRead, sessionExpiresAtMs: sessionAsRead, grants: copy(grants).sort(byId), counts, auditWritten, decisionsWritten };
  }

  /** A fixed window, as the Redis script keeps it: the first spend after a window ended opens the next. */
  #spend(counter: CounterSpend): CounterCount {
    const nowMs = this.#gate.now();
    const open = this.#windows.get(counter.key);
    const untilMs = open?.untilMs ?? nowMs + counter.windowSeconds * 1000;
    const consumed = (open?.consumed ?? 0) + counter.points;
    this.#windows.set(counter.key, { consumed, untilMs }, untilMs);
    return { consumed, msBeforeNext: untilMs - nowMs };
  }
}
