// The Redis store's agents (the AgentRecords role of store.ts), hot path included: each agent's
// keys share its id's hash tag (keys.ts), so every script over one agent is atomic on a Redis
// Cluster too; the (host, key) index and the host's sets of agents and pending slots live in the
// host's slot, written by the admission script.
import type { AgentSnapshot } from '../../domain/types.ts';
import { assertGrantsBelongTo, assertTaggable, assertVersion, byId, checkRoundTripNumbers, isTaggable, normalizeTtlMs, roundTripCapabilities } from '../checks.ts';
import type { AgentAdmission, AgentChange, AgentRecords, CasResult, CreateAgentResult, ExecuteRoundTrip, ExecuteRoundTripResult } from '../store.ts';
import { decodeAgent, decodeGrants, decodeOptionalMs, decodeSnapshot, encodeAgent, encodeAgentPatch, grantTriple, msString, normalizeSnapshot } from './codec.ts';
import { RedisRole } from './parts.ts';

export class RedisAgentRecords extends RedisRole implements AgentRecords {
  async getAgent(agentId: string): Promise<AgentSnapshot | null> {
    if (!isTaggable(agentId)) return null;
    const k = this.redis.keys;
    const reply = await this.redis.scripts.agentgateGetAgent(k.agent(agentId), k.session(agentId), k.grants(agentId));
    if (reply === null) return null;
    const [agentFields, grantJsons, session] = reply as [unknown, unknown, unknown];
    return decodeSnapshot(agentFields, grantJsons, session);
  }

  async findAgentIdByKey(hostId: string, keyThumbprint: string): Promise<string | null> {
    if (!isTaggable(hostId)) return null;
    return this.redis.connection.get(this.redis.keys.hostAgentKey(hostId, keyThumbprint));
  }

  /**
   * Writes the agent's keys in its own slot first, then claims the (host, key) index in the host's
   * slot. The index therefore only ever points at a complete agent; a crash in between leaves an
   * unreachable agent, never an index to nothing. When the claim loses a race, what was written
   * for the new agent is deleted and the winner's id returned: net, nothing was written.
   */
  async createAgent(snapshot: AgentSnapshot, admission?: AgentAdmission): Promise<CreateAgentResult> {
    const { connection, scripts, keys: k } = this.redis;
    const { agent, grants } = snapshot;
    assertTaggable('agent id', agent.id);
    assertTaggable('host id', agent.hostId);
    assertGrantsBelongTo(agent.id, grants);
    const indexKey = k.hostAgentKey(agent.hostId, agent.keyThumbprint);
    const existing = await connection.get(indexKey);
    if (existing !== null) return { created: false, reason: 'exists', existingAgentId: existing };

    const session = snapshot.sessionExpiresAtMs;
    const payload = {
      fields: encodeAgent(agent),
      grants: grants.map(grantTriple),
      ...(session === null ? {} : { session: msString(session, 'sessionExpiresAtMs') }),
    };
    const agentKeys = k.agentRecord(agent.id);
    const wrote = await scripts.agentgateCreateAgent(...agentKeys, JSON.stringify(payload));
    if (wrote !== 1) throw new Error(`agent id ${agent.id} already exists`);

    const [outcome, owner] = (await scripts.agentgateAdmitAgent(
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
    await connection.del(...agentKeys);
    if (outcome === 'exists') return { created: false, reason: 'exists', existingAgentId: owner! };
    if (outcome === 'host_changed' || outcome === 'too_many_agents' || outcome === 'too_many_pending') return { created: false, reason: outcome };
    throw new Error(`agent admission answered ${String(outcome)}`);
  }

  async forgetPendingAgent(hostId: string, agentId: string): Promise<void> {
    if (!isTaggable(hostId)) return;
    await this.redis.connection.zrem(this.redis.keys.hostPendingAgents(hostId), agentId);
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
    const k = this.redis.keys;
    const reply = (await this.redis.scripts.agentgateCasAgent(
      ...k.agentRecord(agentId),
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
    const outcome = await this.redis.scripts.agentgateClaimIndex(this.redis.keys.hostAgentKey(hostId, thumbprint), agentId);
    if (outcome === 'claimed' || outcome === 'ours' || outcome === 'taken') return outcome;
    throw new Error(`agent key claim answered ${String(outcome)}`);
  }

  async releaseAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<void> {
    if (!isTaggable(hostId)) return;
    await this.redis.scripts.agentgateDeleteIfValue(this.redis.keys.hostAgentKey(hostId, thumbprint), agentId);
  }

  // ---- hot path ------------------------------------------------------------------------------

  /**
   * Exactly one command on the wire: one EVALSHA (EVAL the first time on a connection). It is
   * issued before the first await, so the audit appends and rate-limit commands issued in the same
   * tick join its auto-pipeline (src/services/execute.ts).
   */
  async executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult> {
    const { agentId } = request;
    checkRoundTripNumbers(request);
    const capabilities = roundTripCapabilities(request);
    const jtiTtlMs = normalizeTtlMs(request.jtiTtlMs);
    if (!isTaggable(agentId)) return { kind: 'not_found' };
    const k = this.redis.keys;
    const reply = (await this.redis.scripts.agentgateExecute(
      ...k.agentRecord(agentId),
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
}
