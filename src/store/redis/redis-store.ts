// The Redis implementation of Store (DESIGN §3): key layout in keys.ts, Lua in scripts.ts, record
// encoding in codec.ts, connections in connection.ts, the invalidation subscriber in
// invalidations.ts. Every read-then-write transition is one script in one hash slot, so it is
// atomic on a single Redis and on Redis Cluster alike.
import type { AgentSnapshot, HostRecord, HostStatus } from '../../domain/types.ts';
import { assertGrantsBelongTo, assertTaggable, assertVersion, byId, checkRoundTripNumbers, isTaggable, normalizeTtlMs, roundTripCapabilities } from '../checks.ts';
import type {
  AgentAdmission,
  AgentChange,
  CasResult,
  CreateAgentResult,
  Durability,
  DurabilityAnchors,
  ExecuteRoundTrip,
  ExecuteRoundTripResult,
  HostPatch,
  HostUpdate,
  Store,
} from '../store.ts';
import {
  decodeAgent,
  decodeGrants,
  decodeHost,
  decodeOptionalMs,
  decodeSnapshot,
  encodeAgent,
  encodeAgentPatch,
  encodeHost,
  encodeHostPatch,
  grantTriple,
  msString,
  normalizeSnapshot,
} from './codec.ts';
import {
  closeConnection,
  connectAndCheck,
  DEFAULT_COMMAND_TIMEOUT_MS,
  DEFAULT_WAIT_TIMEOUT_MS,
  describeTarget,
  isRedisUnavailable,
  openConnection,
  type RedisConnection,
  type RedisStoreOptions,
} from './connection.ts';
import { ReplicaWait } from './durability.ts';
import { InvalidationSubscriber } from './invalidations.ts';
import { keyLayout, type KeyLayout } from './keys.ts';
import { SCRIPTS, type ScriptName } from './scripts.ts';
import { RedisSideRecords } from './side-records.ts';
import { rotateHostKeyInRedis } from './host-rotation.ts';

export type { RedisStoreOptions } from './connection.ts';

/** The scripts as ioredis exposes them after defineCommand: keys first, then arguments. */
export type ScriptCommands = Record<ScriptName, (...keysThenArgs: string[]) => Promise<unknown>>;

/** How often createHost re-reads a thumbprint index that another writer holds (see createHost). */
const THUMBPRINT_CLAIM_ATTEMPTS = 3;

/**
 * Connects to Redis (or a Redis Cluster), checks it is usable for agentgate, and returns the store.
 * Throws with a message that says what is wrong and how to fix it.
 */
export async function createRedisStore(options: RedisStoreOptions): Promise<RedisStore> {
  const keys = keyLayout(options.keyPrefix ?? 'ag:');
  const connection = openConnection(options, 'commands');
  for (const [name, script] of Object.entries(SCRIPTS)) {
    connection.defineCommand(name, { numberOfKeys: script.numberOfKeys, lua: script.lua });
  }
  await connectAndCheck(connection, options);
  // Withdrawals wait for replicas on a connection of their own (durability.ts says why).
  const durabilityConnection = openConnection(options, 'durability');
  try {
    await connectAndCheck(durabilityConnection, options);
    const replicaWait = new ReplicaWait(durabilityConnection, {
      replicas: options.waitReplicas ?? 'auto',
      timeoutMs: options.waitTimeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS,
      markerKey: (anchorKey) => keys.durabilityMarker(anchorKey),
      onRoundError: options.onConnectionError,
    });
    await replicaWait.start();
    return new RedisStore(connection, keys, options, { connection: durabilityConnection, wait: replicaWait });
  } catch (error) {
    connection.disconnect();
    durabilityConnection.disconnect();
    throw error;
  }
}

export class RedisStore extends RedisSideRecords implements Store {
  readonly kind = 'redis' as const;
  readonly #connection: RedisConnection;
  readonly #scripts: ScriptCommands;
  readonly #keys: KeyLayout;
  readonly #options: RedisStoreOptions;
  readonly #invalidations: InvalidationSubscriber;
  readonly #durability: { connection: RedisConnection; wait: ReplicaWait };
  /** Where the store connects, in words (no password). */
  readonly target: string;

  /** Use createRedisStore, which connects and checks the server first. */
  constructor(connection: RedisConnection, keys: KeyLayout, options: RedisStoreOptions, durability: { connection: RedisConnection; wait: ReplicaWait }) {
    super(connection, keys);
    this.#durability = durability;
    this.target = describeTarget(options);
    this.#connection = connection;
    this.#scripts = connection as unknown as ScriptCommands;
    this.#keys = keys;
    this.#options = options;
    this.#invalidations = new InvalidationSubscriber(options, keys.invalidationChannel);
  }

  /**
   * The command connection, for the rate limiter only: its commands then ride in the same
   * auto-pipeline as the hot path's script (DESIGN §2 step 6). Do not issue store writes on it.
   */
  get connection(): RedisConnection {
    return this.#connection;
  }

  // ---- hosts -------------------------------------------------------------------------------

  async getHost(hostId: string): Promise<HostRecord | null> {
    if (!isTaggable(hostId)) return null;
    const fields = await this.#connection.hgetall(this.#keys.host(hostId));
    return Object.keys(fields).length === 0 ? null : decodeHost(Object.entries(fields).flat());
  }

  /** Resolves through the thumbprint index, then confirms the host still holds that thumbprint,
   * so an index left behind by an interrupted rotation can never resolve to the wrong key. */
  async findHostByThumbprint(thumbprint: string): Promise<HostRecord | null> {
    if (!isTaggable(thumbprint)) return null;
    const hostId = await this.#connection.get(this.#keys.hostByThumbprint(thumbprint));
    if (hostId === null) return null;
    const host = await this.getHost(hostId);
    return host?.thumbprint === thumbprint ? host : null;
  }

  /**
   * Writes the host hash first (under its fresh id, which nobody else knows), then claims the
   * thumbprint index with SET NX. This order means the index only ever points at a complete host:
   * a crash between the steps leaves an unreachable hash, never an index to nothing. When the
   * index is taken, our hash is deleted and the existing host returned. The index may briefly name
   * a host that is mid-rotation onto this thumbprint, so that case is re-read a few times.
   */
  async createHost(host: HostRecord): Promise<{ host: HostRecord; created: boolean }> {
    assertTaggable('host id', host.id);
    assertTaggable('host thumbprint', host.thumbprint);
    const hostKey = this.#keys.host(host.id);
    const wrote = await this.#scripts.agentgateCreateHash(hostKey, ...encodeHost(host));
    if (wrote !== 1) throw new Error(`host id ${host.id} already exists`);
    const indexKey = this.#keys.hostByThumbprint(host.thumbprint);
    for (let attempt = 1; attempt <= THUMBPRINT_CLAIM_ATTEMPTS; attempt++) {
      if ((await this.#connection.set(indexKey, host.id, 'NX')) === 'OK') {
        return { host: decodeHost(encodeHost(host)), created: true };
      }
      const existing = await this.findHostByThumbprint(host.thumbprint);
      if (existing) {
        await this.#connection.del(hostKey);
        return { host: existing, created: false };
      }
      await sleep(20 * attempt);
    }
    await this.#connection.del(hostKey);
    throw new Error(
      `host thumbprint ${host.thumbprint} is held by a host that does not use it (a rotation in flight or interrupted); retry later`,
    );
  }

  async updateHost(hostId: string, patch: HostPatch, fromStatuses?: readonly HostStatus[]): Promise<HostUpdate> {
    if (!isTaggable(hostId)) return null;
    const allowed = fromStatuses === undefined ? '' : fromStatuses.join(',');
    if (fromStatuses !== undefined && fromStatuses.length === 0) throw new Error('updateHost: fromStatuses must name at least one status');
    const { set, unset } = encodeHostPatch(patch);
    const reply = (await this.#scripts.agentgateUpdateHost(this.#keys.host(hostId), allowed, String(unset.length), ...unset, ...set)) as [string, unknown] | null;
    if (reply === null) return null;
    return { host: decodeHost(reply[1]), updated: reply[0] === 'ok' };
  }

  /** See host-rotation.ts for the order of its steps and why every intermediate state is safe. */
  rotateHostKey(
    hostId: string,
    expectedThumbprint: string,
    next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
  ): Promise<'ok' | 'not_found' | 'conflict' | 'taken'> {
    return rotateHostKeyInRedis({ connection: this.#connection, scripts: this.#scripts, keys: this.#keys }, hostId, expectedThumbprint, next);
  }

  async listHostAgentIds(hostId: string): Promise<string[]> {
    if (!isTaggable(hostId)) return [];
    const ids = await this.#connection.smembers(this.#keys.hostAgents(hostId));
    return ids.sort();
  }

  // ---- agents ------------------------------------------------------------------------------

  async getAgent(agentId: string): Promise<AgentSnapshot | null> {
    if (!isTaggable(agentId)) return null;
    const k = this.#keys;
    const reply = await this.#scripts.agentgateGetAgent(k.agent(agentId), k.session(agentId), k.grants(agentId));
    if (reply === null) return null;
    const [agentFields, grantJsons, session] = reply as [unknown, unknown, unknown];
    return decodeSnapshot(agentFields, grantJsons, session);
  }

  async findAgentIdByKey(hostId: string, keyThumbprint: string): Promise<string | null> {
    if (!isTaggable(hostId)) return null;
    return this.#connection.get(this.#keys.hostAgentKey(hostId, keyThumbprint));
  }

  /**
   * Writes the agent's keys in its own slot first, then claims the (host, key) index in the host's
   * slot. The index therefore only ever points at a complete agent; a crash in between leaves an
   * unreachable agent, never an index to nothing. When the claim loses a race, what was written
   * for the new agent is deleted and the winner's id returned: net, nothing was written.
   */
  async createAgent(snapshot: AgentSnapshot, admission?: AgentAdmission): Promise<CreateAgentResult> {
    const { agent, grants } = snapshot;
    assertTaggable('agent id', agent.id);
    assertTaggable('host id', agent.hostId);
    assertGrantsBelongTo(agent.id, grants);
    const k = this.#keys;
    const indexKey = k.hostAgentKey(agent.hostId, agent.keyThumbprint);
    const existing = await this.#connection.get(indexKey);
    if (existing !== null) return { created: false, reason: 'exists', existingAgentId: existing };

    const session = snapshot.sessionExpiresAtMs;
    const payload = {
      fields: encodeAgent(agent),
      grants: grants.map(grantTriple),
      ...(session === null ? {} : { session: msString(session, 'sessionExpiresAtMs') }),
    };
    const agentKeys = [k.agent(agent.id), k.session(agent.id), k.grants(agent.id), k.grantsByCapability(agent.id)] as const;
    const wrote = await this.#scripts.agentgateCreateAgent(...agentKeys, JSON.stringify(payload));
    if (wrote !== 1) throw new Error(`agent id ${agent.id} already exists`);

    const [outcome, owner] = (await this.#scripts.agentgateAdmitAgent(
      indexKey,
      k.hostAgents(agent.hostId),
      k.host(agent.hostId),
      k.hostPendingAgents(agent.hostId),
      agent.id,
      admission ? '1' : '0',
      agent.hostStatus,
      agent.hostThumbprint,
      String(admission?.maxAgents ?? 0),
      admission?.pendingUntilMs === undefined ? '' : msString(admission.pendingUntilMs, 'pendingUntilMs'),
      msString(admission?.nowMs ?? 0, 'nowMs'),
      String(admission?.maxPendingAgents ?? 0),
      admission?.hostUserId ?? '',
    )) as [string, string | undefined];
    if (outcome === 'ok') return { created: true, snapshot: normalizeSnapshot(snapshot) };
    // Refused: what was written in the agent's slot goes, so net nothing was written.
    await this.#connection.del(...agentKeys);
    if (outcome === 'exists') return { created: false, reason: 'exists', existingAgentId: owner! };
    if (outcome === 'host_changed' || outcome === 'too_many_agents' || outcome === 'too_many_pending') return { created: false, reason: outcome };
    throw new Error(`agent admission answered ${String(outcome)}`);
  }

  async removeStalePendingAgent(agentId: string, createdBeforeMs: number): Promise<boolean> {
    if (!isTaggable(agentId)) return false;
    const k = this.#keys;
    const removed = (await this.#scripts.agentgateRemoveStalePendingAgent(
      k.agent(agentId), k.session(agentId), k.grants(agentId), k.grantsByCapability(agentId), msString(createdBeforeMs, 'createdBeforeMs'),
    )) as [string, string] | null;
    if (!removed) return false;
    // Only the instance that deleted the agent gets here, so the host-slot clean-up runs once.
    const [hostId, keyThumbprint] = removed;
    await this.#scripts.agentgateForgetRemovedAgent(k.hostAgents(hostId), k.hostPendingAgents(hostId), k.hostAgentKey(hostId, keyThumbprint), agentId);
    await this.untrackPending('agent', agentId);
    return true;
  }

  async removeStalePendingHost(hostId: string, createdBeforeMs: number): Promise<boolean> {
    if (!isTaggable(hostId)) return false;
    const k = this.#keys;
    const thumbprint = (await this.#scripts.agentgateRemoveStalePendingHost(
      k.host(hostId), k.hostAgents(hostId), k.hostPendingAgents(hostId), msString(createdBeforeMs, 'createdBeforeMs'),
    )) as string | null;
    if (thumbprint === null) return false;
    await this.#scripts.agentgateDeleteIfValue(k.hostByThumbprint(thumbprint), hostId);
    await this.untrackPending('host', hostId);
    return true;
  }

  async forgetPendingAgent(hostId: string, agentId: string): Promise<void> {
    if (!isTaggable(hostId)) return;
    await this.#connection.zrem(this.#keys.hostPendingAgents(hostId), agentId);
  }

  async casAgent(agentId: string, expectVersion: number, change: AgentChange): Promise<CasResult> {
    if (!isTaggable(agentId)) return { ok: false, reason: 'not_found', snapshot: null };
    assertVersion('expectVersion', expectVersion);
    assertGrantsBelongTo(agentId, change.replaceGrants);
    assertGrantsBelongTo(agentId, change.upsertGrants);
    const { set, unset } = encodeAgentPatch(change.set ?? {});
    const payload = {
      set,
      unset,
      replace: change.replaceGrants !== undefined,
      grants: [...(change.replaceGrants ?? []), ...(change.upsertGrants ?? [])].map(grantTriple),
      ...(change.sessionExpiresAtMs === undefined ? {} : { session: msString(change.sessionExpiresAtMs, 'sessionExpiresAtMs') }),
    };
    const k = this.#keys;
    const reply = (await this.#scripts.agentgateCasAgent(
      k.agent(agentId),
      k.session(agentId),
      k.grants(agentId),
      k.grantsByCapability(agentId),
      String(expectVersion),
      String(expectVersion + 1),
      JSON.stringify(payload),
    )) as [string, unknown, unknown, unknown];
    const [outcome, agentFields, grantJsons, session] = reply;
    if (outcome === 'not_found') return { ok: false, reason: 'not_found', snapshot: null };
    const snapshot = decodeSnapshot(agentFields, grantJsons, session);
    return outcome === 'ok' ? { ok: true, snapshot } : { ok: false, reason: 'conflict', snapshot };
  }

  async claimAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<'claimed' | 'ours' | 'taken'> {
    assertTaggable('host id', hostId);
    const outcome = await this.#scripts.agentgateClaimIndex(this.#keys.hostAgentKey(hostId, thumbprint), agentId);
    if (outcome === 'claimed' || outcome === 'ours' || outcome === 'taken') return outcome;
    throw new Error(`agent key claim answered ${String(outcome)}`);
  }

  async releaseAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<void> {
    if (!isTaggable(hostId)) return;
    await this.#scripts.agentgateDeleteIfValue(this.#keys.hostAgentKey(hostId, thumbprint), agentId);
  }

  // ---- hot path ------------------------------------------------------------------------------

  /** Exactly one command on the wire: one EVALSHA (EVAL the first time on a connection). */
  async executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult> {
    const { agentId } = request;
    checkRoundTripNumbers(request);
    const capabilities = roundTripCapabilities(request);
    const jtiTtlMs = normalizeTtlMs(request.jtiTtlMs);
    if (!isTaggable(agentId)) return { kind: 'not_found' };
    const k = this.#keys;
    const reply = (await this.#scripts.agentgateExecute(
      k.agent(agentId),
      k.session(agentId),
      k.grants(agentId),
      k.grantsByCapability(agentId),
      k.agentJti(agentId, request.jti),
      String(request.keyVersion),
      String(jtiTtlMs),
      msString(request.nowMs, 'nowMs'),
      msString(request.nowMs + request.sessionTtlMs, 'session deadline'),
      ...capabilities,
    )) as [string, unknown?, unknown?, unknown?];
    const [outcome, agentFields, session, grantJsons] = reply;
    if (outcome === 'not_found' || outcome === 'stale_key' || outcome === 'replay') return { kind: outcome };
    return {
      kind: 'ok',
      agent: decodeAgent(agentFields),
      sessionExpiresAtMs: decodeOptionalMs(session, `session of agent ${agentId}`),
      grants: decodeGrants(grantJsons).sort(byId),
    };
  }

  // ---- replay --------------------------------------------------------------------------------

  async recordAgentJti(agentId: string, jti: string, ttlMs: number): Promise<boolean> {
    assertTaggable('agent id', agentId);
    return this.#recordOnce(this.#keys.agentJti(agentId, jti), ttlMs);
  }

  async recordHostJti(hostThumbprint: string, jti: string, ttlMs: number): Promise<boolean> {
    assertTaggable('host thumbprint', hostThumbprint);
    return this.#recordOnce(this.#keys.hostJti(hostThumbprint, jti), ttlMs);
  }

  async #recordOnce(key: string, ttlMs: number): Promise<boolean> {
    return (await this.#connection.set(key, '1', 'PX', normalizeTtlMs(ttlMs), 'NX')) === 'OK';
  }

  // ---- key-cache invalidation ----------------------------------------------------------------

  async publishAgentInvalidation(agentId: string): Promise<void> {
    await this.#connection.publish(this.#keys.invalidationChannel, agentId);
  }

  /** Registers a listener; see InvalidationSubscriber for when it starts receiving. */
  onAgentInvalidation(listener: (agentId: string) => void): void {
    this.#invalidations.add(listener);
  }

  // ---- durability ----------------------------------------------------------------------------

  /** The agents' and hosts' own hash keys anchor the rounds: each lives in its record's slot. */
  confirmDurable(anchors: DurabilityAnchors): Promise<Durability> {
    const k = this.#keys;
    const keys = [...(anchors.agentIds ?? []).filter(isTaggable).map(k.agent), ...(anchors.hostIds ?? []).filter(isTaggable).map(k.host)];
    return this.#durability.wait.confirm(keys);
  }

  /** What withdrawals wait for, in words, for the start-up line. */
  durability(): string {
    return this.#durability.wait.describe();
  }

  // ---- lifecycle -----------------------------------------------------------------------------

  isUnavailable(error: unknown): boolean {
    return isRedisUnavailable(error);
  }

  async ping(): Promise<void> {
    const reply = await this.#connection.ping();
    if (reply !== 'PONG') throw new Error(`Redis answered PING with ${String(reply)}`);
  }

  async close(): Promise<void> {
    const ms = this.#options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    await Promise.all([closeConnection(this.#connection, ms), closeConnection(this.#durability.connection, ms), this.#invalidations.close(ms)]);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
