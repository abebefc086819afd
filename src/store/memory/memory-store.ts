// The in-memory Store, for the quick start and unit tests (DESIGN §3). It keeps the Redis store's
// semantics exactly (the shared contract suite runs against both), including the ones that come
// from Redis itself: a session deadline in the past is gone (Redis expires the key in real time),
// and replay records expire after their ttl. Records are deep-copied on the way in and out, so a
// caller can never change stored state except through these methods. Nothing survives a restart.
import { definedOnly } from '../../defined-only.ts';
import type { AgentRecord, AgentSnapshot, GrantRecord, HostRecord, HostStatus } from '../../domain/types.ts';
import {
  assertGrantsBelongTo,
  assertTaggable,
  assertVersion,
  byId,
  checkRoundTripNumbers,
  isTaggable,
  normalizeTtlMs,
  roundTripCapabilities,
} from '../checks.ts';
import { HOST_PATCH_FIELDS } from '../records.ts';
import type {
  AgentAdmission,
  AgentChange,
  CasResult,
  CreateAgentResult,
  Durability,
  ExecuteRoundTrip,
  ExecuteRoundTripResult,
  HostPatch,
  HostUpdate,
  Store,
} from '../store.ts';
import { ReplayCacheFullError, ReplayRecords } from './replay-records.ts';
import { applyPatch, isUsable } from './agent-changes.ts';
import { MemorySideRecords, MemoryStoreClosedError } from './side-records.ts';

export { MemoryStoreClosedError };

export interface MemoryStoreOptions {
  /** Wall clock (epoch ms) for jti and session expiry, as Redis's own clock would be; default Date.now. */
  now?: () => number;
  /** Upper bound on remembered jtis; past it, recording refuses rather than forget a live jti. */
  maxReplayRecords?: number;
  /** An invalidation listener threw; reported, as the Redis store reports its listener errors. */
  onListenerError?: (error: Error) => void;
}

interface StoredAgent {
  agent: AgentRecord;
  /** By grant id, in insertion order (the order Redis's index lists keep). */
  grants: Map<string, GrantRecord>;
  sessionExpiresAtMs: number | null;
}

const copy = <T>(value: T): T => structuredClone(value);

export class MemoryStore extends MemorySideRecords implements Store {
  readonly kind = 'memory' as const;
  readonly #now: () => number;
  readonly #hosts = new Map<string, HostRecord>();
  readonly #hostIdByThumbprint = new Map<string, string>();
  readonly #hostAgentIds = new Map<string, Set<string>>();
  /** hostId -> (agent id -> approval deadline ms): the pending slots, as the Redis sorted set. */
  readonly #hostPending = new Map<string, Map<string, number>>();
  /** [hostId, keyThumbprint] (as JSON) -> agent id: the registration index. */
  readonly #agentIdByHostKey = new Map<string, string>();
  readonly #agents = new Map<string, StoredAgent>();
  readonly #replay: ReplayRecords;
  readonly #listeners: ((agentId: string) => void)[] = [];
  readonly #onListenerError: ((error: Error) => void) | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    super(options.now ?? Date.now);
    this.#now = options.now ?? Date.now;
    this.#onListenerError = options.onListenerError;
    this.#replay = new ReplayRecords(this.#now, options.maxReplayRecords);
  }

  // ---- hosts -------------------------------------------------------------------------------

  async getHost(hostId: string): Promise<HostRecord | null> {
    this.assertOpen();
    const host = this.#hosts.get(hostId);
    return host ? copy(host) : null;
  }

  async findHostByThumbprint(thumbprint: string): Promise<HostRecord | null> {
    this.assertOpen();
    const hostId = this.#hostIdByThumbprint.get(thumbprint);
    return hostId === undefined ? null : this.getHost(hostId);
  }

  async createHost(host: HostRecord): Promise<{ host: HostRecord; created: boolean }> {
    this.assertOpen();
    assertTaggable('host id', host.id);
    assertTaggable('host thumbprint', host.thumbprint);
    if (this.#hosts.has(host.id)) throw new Error(`host id ${host.id} already exists`);
    const existingId = this.#hostIdByThumbprint.get(host.thumbprint);
    if (existingId !== undefined) return { host: copy(this.#hosts.get(existingId)!), created: false };
    this.#hosts.set(host.id, copy(host));
    this.#hostIdByThumbprint.set(host.thumbprint, host.id);
    return { host: copy(host), created: true };
  }

  async updateHost(hostId: string, patch: HostPatch, fromStatuses?: readonly HostStatus[]): Promise<HostUpdate> {
    this.assertOpen();
    if (fromStatuses !== undefined && fromStatuses.length === 0) throw new Error('updateHost: fromStatuses must name at least one status');
    const host = this.#hosts.get(hostId);
    if (!host) return null;
    if (fromStatuses !== undefined && !fromStatuses.includes(host.status)) return { host: copy(host), updated: false };
    const fields = copy(patch);
    const next: HostRecord = { ...host, ...definedOnly(fields, HOST_PATCH_FIELDS.set) };
    // As for agents (agent-changes.ts applyPatch): `null` removes a removable field, a value sets it.
    for (const field of HOST_PATCH_FIELDS.remove) {
      const value = fields[field];
      if (value === null) delete next[field];
      else if (value !== undefined) next[field] = value;
    }
    this.#hosts.set(hostId, next);
    return { host: copy(this.#hosts.get(hostId)!), updated: true };
  }

  /** Same outcome order as Redis, whose first step is claiming the new thumbprint: taken, then
   * not_found, then conflict. */
  async rotateHostKey(
    hostId: string,
    expectedThumbprint: string,
    next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
  ): Promise<'ok' | 'not_found' | 'conflict' | 'taken'> {
    this.assertOpen();
    if (!isTaggable(hostId)) return 'not_found';
    assertTaggable('host thumbprint', next.thumbprint);
    const owner = this.#hostIdByThumbprint.get(next.thumbprint);
    if (owner !== undefined && owner !== hostId) return 'taken';
    const host = this.#hosts.get(hostId);
    if (!host) return 'not_found';
    if (host.thumbprint !== expectedThumbprint) return 'conflict';
    this.#hosts.set(hostId, { ...host, thumbprint: next.thumbprint, publicJwk: copy(next.publicJwk), updatedAtMs: next.updatedAtMs });
    if (this.#hostIdByThumbprint.get(expectedThumbprint) === hostId) this.#hostIdByThumbprint.delete(expectedThumbprint);
    this.#hostIdByThumbprint.set(next.thumbprint, hostId);
    return 'ok';
  }

  async listHostAgentIds(hostId: string): Promise<string[]> {
    this.assertOpen();
    return [...(this.#hostAgentIds.get(hostId) ?? [])].sort();
  }

  // ---- agents ------------------------------------------------------------------------------

  async getAgent(agentId: string): Promise<AgentSnapshot | null> {
    this.assertOpen();
    const stored = this.#agents.get(agentId);
    return stored ? this.#snapshotOf(stored) : null;
  }

  async findAgentIdByKey(hostId: string, keyThumbprint: string): Promise<string | null> {
    this.assertOpen();
    return this.#agentIdByHostKey.get(hostKey(hostId, keyThumbprint)) ?? null;
  }

  async createAgent(snapshot: AgentSnapshot, admission?: AgentAdmission): Promise<CreateAgentResult> {
    this.assertOpen();
    const { agent, grants } = snapshot;
    assertTaggable('agent id', agent.id);
    assertTaggable('host id', agent.hostId);
    assertGrantsBelongTo(agent.id, grants);
    const indexKey = hostKey(agent.hostId, agent.keyThumbprint);
    const existing = this.#agentIdByHostKey.get(indexKey);
    if (existing !== undefined) return { created: false, reason: 'exists', existingAgentId: existing };
    if (this.#agents.has(agent.id)) throw new Error(`agent id ${agent.id} already exists`);
    if (admission) {
      const refusal = this.#admissionRefusal(agent, admission);
      if (refusal) return { created: false, reason: refusal };
    }
    const stored: StoredAgent = { agent: copy(agent), grants: new Map(), sessionExpiresAtMs: null };
    for (const grant of grants) stored.grants.set(grant.id, copy(grant));
    this.#setSession(stored, snapshot.sessionExpiresAtMs);
    this.#agents.set(agent.id, stored);
    this.#agentIdByHostKey.set(indexKey, agent.id);
    this.#hostAgentSet(agent.hostId).add(agent.id);
    return { created: true, snapshot: copy({ ...snapshot, grants: [...grants].sort(byId) }) };
  }

  /** The checks the Redis admission script makes, in the same order; records the pending slot. */
  #admissionRefusal(agent: AgentRecord, admission: AgentAdmission): 'host_changed' | 'too_many_agents' | 'too_many_pending' | null {
    const host = this.#hosts.get(agent.hostId);
    if (!host || host.status !== agent.hostStatus || host.thumbprint !== agent.hostThumbprint || host.userId !== admission.hostUserId) return 'host_changed';
    if (this.#hostAgentSet(agent.hostId).size >= admission.maxAgents) return 'too_many_agents';
    if (admission.pendingUntilMs !== undefined) {
      const pending = this.#hostPending.get(agent.hostId) ?? new Map<string, number>();
      for (const [id, untilMs] of pending) if (untilMs <= admission.nowMs) pending.delete(id);
      if (pending.size >= admission.maxPendingAgents) return 'too_many_pending';
      pending.set(agent.id, admission.pendingUntilMs);
      this.#hostPending.set(agent.hostId, pending);
    }
    return null;
  }

  async removeStalePendingAgent(agentId: string, createdBeforeMs: number): Promise<boolean> {
    this.assertOpen();
    const stored = this.#agents.get(agentId);
    if (!stored || stored.agent.status !== 'pending' || stored.agent.createdAtMs >= createdBeforeMs) return false;
    const { hostId, keyThumbprint } = stored.agent;
    this.#agents.delete(agentId);
    this.#hostAgentSet(hostId).delete(agentId);
    this.#hostPending.get(hostId)?.delete(agentId);
    if (this.#agentIdByHostKey.get(hostKey(hostId, keyThumbprint)) === agentId) this.#agentIdByHostKey.delete(hostKey(hostId, keyThumbprint));
    await this.untrackPending('agent', agentId);
    return true;
  }

  async removeStalePendingHost(hostId: string, createdBeforeMs: number): Promise<boolean> {
    this.assertOpen();
    const host = this.#hosts.get(hostId);
    if (!host || host.status !== 'pending' || host.createdAtMs >= createdBeforeMs || this.#hostAgentSet(hostId).size > 0) return false;
    this.#hosts.delete(hostId);
    this.#hostAgentIds.delete(hostId);
    this.#hostPending.delete(hostId);
    if (this.#hostIdByThumbprint.get(host.thumbprint) === hostId) this.#hostIdByThumbprint.delete(host.thumbprint);
    await this.untrackPending('host', hostId);
    return true;
  }

  async forgetPendingAgent(hostId: string, agentId: string): Promise<void> {
    this.assertOpen();
    const pending = this.#hostPending.get(hostId);
    pending?.delete(agentId);
    if (pending?.size === 0) this.#hostPending.delete(hostId);
  }

  async casAgent(agentId: string, expectVersion: number, change: AgentChange): Promise<CasResult> {
    this.assertOpen();
    assertVersion('expectVersion', expectVersion);
    assertGrantsBelongTo(agentId, change.replaceGrants);
    assertGrantsBelongTo(agentId, change.upsertGrants);
    const stored = this.#agents.get(agentId);
    if (!stored) return { ok: false, reason: 'not_found', snapshot: null };
    if (stored.agent.version !== expectVersion) return { ok: false, reason: 'conflict', snapshot: this.#snapshotOf(stored) };
    stored.agent = applyPatch(stored.agent, change.set ?? {}, expectVersion + 1);
    if (change.replaceGrants !== undefined) stored.grants.clear();
    for (const grant of [...(change.replaceGrants ?? []), ...(change.upsertGrants ?? [])]) {
      stored.grants.set(grant.id, copy(grant));
    }
    if (change.sessionExpiresAtMs !== undefined) this.#setSession(stored, change.sessionExpiresAtMs);
    return { ok: true, snapshot: this.#snapshotOf(stored) };
  }

  async claimAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<'claimed' | 'ours' | 'taken'> {
    this.assertOpen();
    assertTaggable('host id', hostId);
    const owner = this.#agentIdByHostKey.get(hostKey(hostId, thumbprint));
    if (owner === undefined) {
      this.#agentIdByHostKey.set(hostKey(hostId, thumbprint), agentId);
      return 'claimed';
    }
    return owner === agentId ? 'ours' : 'taken';
  }

  async releaseAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<void> {
    this.assertOpen();
    if (this.#agentIdByHostKey.get(hostKey(hostId, thumbprint)) === agentId) this.#agentIdByHostKey.delete(hostKey(hostId, thumbprint));
  }

  // ---- hot path ------------------------------------------------------------------------------

  async executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult> {
    this.assertOpen();
    checkRoundTripNumbers(request);
    const capabilities = roundTripCapabilities(request);
    const ttlMs = normalizeTtlMs(request.jtiTtlMs);
    const stored = this.#agents.get(request.agentId);
    if (!stored) return { kind: 'not_found' };
    if (stored.agent.keyVersion !== request.keyVersion) return { kind: 'stale_key' };
    if (!this.#replay.record(agentJtiKey(request.agentId, request.jti), ttlMs)) return { kind: 'replay' };
    const agentAsRead = copy(stored.agent);
    const sessionAsRead = this.#currentSession(stored);
    if (isUsable(stored.agent, sessionAsRead, request.nowMs)) {
      this.#setSession(stored, request.nowMs + request.sessionTtlMs);
      stored.agent = { ...stored.agent, lastUsedAtMs: request.nowMs };
    }
    const grants = [...stored.grants.values()].filter((grant) => capabilities.includes(grant.capability));
    return { kind: 'ok', agent: agentAsRead, sessionExpiresAtMs: sessionAsRead, grants: copy(grants).sort(byId) };
  }

  // ---- replay --------------------------------------------------------------------------------

  async recordAgentJti(agentId: string, jti: string, ttlMs: number): Promise<boolean> {
    this.assertOpen();
    assertTaggable('agent id', agentId);
    return this.#replay.record(agentJtiKey(agentId, jti), normalizeTtlMs(ttlMs));
  }

  async recordHostJti(hostThumbprint: string, jti: string, ttlMs: number): Promise<boolean> {
    this.assertOpen();
    assertTaggable('host thumbprint', hostThumbprint);
    return this.#replay.record(JSON.stringify(['host', hostThumbprint, jti]), normalizeTtlMs(ttlMs));
  }

  // ---- key-cache invalidation ----------------------------------------------------------------

  /** Delivered asynchronously, as Redis pub/sub would be, and each listener on its own. */
  async publishAgentInvalidation(agentId: string): Promise<void> {
    this.assertOpen();
    for (const listener of [...this.#listeners]) {
      queueMicrotask(() => {
        try {
          listener(agentId);
        } catch (error) {
          // A failing listener must not stop the others, and is reported, as with the Redis store.
          this.#onListenerError?.(error instanceof Error ? error : new Error(String(error)));
        }
      });
    }
  }

  onAgentInvalidation(listener: (agentId: string) => void): void {
    this.#listeners.push(listener);
  }

  // ---- lifecycle -----------------------------------------------------------------------------

  /** One process holds the only copy: there is no replica to wait for (and no failover to survive). */
  async confirmDurable(): Promise<Durability> {
    return 'durable';
  }

  isUnavailable(error: unknown): boolean {
    return error instanceof MemoryStoreClosedError || error instanceof ReplayCacheFullError;
  }

  async ping(): Promise<void> {
    this.assertOpen();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.#listeners.length = 0;
  }

  // ---- internals -----------------------------------------------------------------------------



  /** A deadline already past on the wall clock is dropped, as Redis drops an expired key. */
  #setSession(stored: StoredAgent, deadlineMs: number | null): void {
    stored.sessionExpiresAtMs = deadlineMs !== null && deadlineMs > this.#now() ? deadlineMs : null;
  }

  #currentSession(stored: StoredAgent): number | null {
    if (stored.sessionExpiresAtMs !== null && stored.sessionExpiresAtMs <= this.#now()) stored.sessionExpiresAtMs = null;
    return stored.sessionExpiresAtMs;
  }

  #snapshotOf(stored: StoredAgent): AgentSnapshot {
    return copy({
      agent: stored.agent,
      grants: [...stored.grants.values()].sort(byId),
      sessionExpiresAtMs: this.#currentSession(stored),
    });
  }

  #hostAgentSet(hostId: string): Set<string> {
    let set = this.#hostAgentIds.get(hostId);
    if (!set) this.#hostAgentIds.set(hostId, (set = new Set()));
    return set;
  }
}

function hostKey(hostId: string, keyThumbprint: string): string {
  return JSON.stringify([hostId, keyThumbprint]);
}

/** One key per (agent, jti), shared by executeRoundTrip and recordAgentJti. */
function agentJtiKey(agentId: string, jti: string): string {
  return JSON.stringify(['agent', agentId, jti]);
}
