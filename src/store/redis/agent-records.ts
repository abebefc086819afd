// The Redis store's agents (the AgentRecords role of store.ts), hot path included: each agent's
// keys share its id's hash tag (keys.ts), so every script over one agent is atomic on a Redis
// Cluster too; the (host, key) index and the host's sets of agents and pending slots live in the
// host's slot, written by the admission script.
import type { AuditRecord } from '../../audit/events.ts';
import type { AgentSnapshot } from '../../domain/types.ts';
import {
  assertGrantsBelongTo, assertTaggable, assertVersion, byId, checkRoundTripNumbers, isTaggable, normalizeTtlMs, roundTripAudit, roundTripCapabilities, roundTripCounters,
  roundTripDecisions,
} from '../checks.ts';
import type {
  AgentAdmission, AgentChange, AgentRecords, AuditRecords, CasResult, CounterCount, CounterSpend, CreateAgentResult, DecisionRecords, ExecuteRoundTrip, ExecuteRoundTripResult,
} from '../store.ts';
import { AUDIT_EVENT_FIELD } from './audit-records.ts';
import { DECISION_RECORD_FIELD } from './decision-records.ts';
import { decodeAgent, decodeCounts, decodeFlags, decodeGrants, decodeOptionalMs, decodeSnapshot, encodeAgent, encodeAgentPatch, grantTriple, msString, normalizeSnapshot } from './codec.ts';
import { shareSlot } from './keys.ts';
import { RedisRole, type RedisParts } from './parts.ts';

/** No audit events (the round trip carries none, or they go apart on a Cluster). */
const NO_EVENTS: readonly AuditRecord[] = [];
/** No decision records, likewise. */
const NO_RECORDS: readonly string[] = [];

export class RedisAgentRecords extends RedisRole implements AgentRecords {
  /** The trail a Redis Cluster appends the round trip's events through (see executeRoundTrip). */
  readonly #audit: Pick<AuditRecords, 'appendAuditEvents'>;
  /** The decision stream a Redis Cluster appends the round trip's records through, likewise. */
  readonly #decisions: Pick<DecisionRecords, 'appendDecisionRecords'>;

  constructor(redis: RedisParts, audit: Pick<AuditRecords, 'appendAuditEvents'>, decisions: Pick<DecisionRecords, 'appendDecisionRecords'>) {
    super(redis);
    this.#audit = audit;
    this.#decisions = decisions;
  }

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
   * One command on a single Redis, one EVALSHA (EVAL the first time on a connection): the execute
   * script also spends the counters and appends the audit events and the decision records
   * (scripts.ts EXECUTE_ROUND_TRIP). It is issued before the first await, so the audit appends and
   * rate-limit commands issued in the same tick join its auto-pipeline (src/services/execute.ts). On a Redis Cluster a
   * script touches one slot, so only the counters in the agent's slot (its own budget) ride in it; a
   * counter in another slot (the host's budget) is one more script on its node, and the events and
   * the records one append each on their stream's, issued in the same tick so that they go out in
   * parallel with it.
   */
  async executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult> {
    const { agentId } = request;
    checkRoundTripNumbers(request);
    const capabilities = roundTripCapabilities(request);
    const counters = roundTripCounters(request);
    const audit = roundTripAudit(request);
    const decisions = roundTripDecisions(request);
    const jtiTtlMs = normalizeTtlMs(request.jtiTtlMs);
    if (!isTaggable(agentId)) {
      // No agent has such an id, so there is no slot to run the script in; what it carries is still appended.
      return {
        kind: 'not_found',
        auditWritten: audit ? this.#audit.appendAuditEvents(audit.records, audit.maxEvents) : [],
        decisionsWritten: decisions ? this.#decisions.appendDecisionRecords(decisions.records, decisions.maxRecords) : [],
      };
    }
    const { keys: k, cluster } = this.redis;
    const agentKeys = k.agentRecord(agentId);
    const agentKey = agentKeys[0];
    const inScript = cluster ? counters.filter((counter) => shareSlot(counter.key, agentKey)) : counters;
    const events = cluster ? NO_EVENTS : (audit?.records ?? NO_EVENTS);
    const records = cluster ? NO_RECORDS : (decisions?.records ?? NO_RECORDS);
    // Issued before the script, in this tick: on a Cluster they travel beside it (an auto-pipeline per
    // node). On a single Redis every counter, event and record is in the script, so nothing goes apart.
    const appendedApart = cluster && audit ? this.#audit.appendAuditEvents(audit.records, audit.maxEvents) : null;
    const recordedApart = cluster && decisions ? this.#decisions.appendDecisionRecords(decisions.records, decisions.maxRecords) : null;
    const spentApart = cluster ? counters.map((counter) => (inScript.includes(counter) ? null : this.#spendApart(counter))) : null;
    // Read only once the script answered; until then a failure of theirs must not go unhandled.
    appendedApart?.catch(() => undefined);
    recordedApart?.catch(() => undefined);
    if (spentApart) for (const pending of spentApart) pending?.catch(() => undefined);
    // The script's keys and arguments (scripts.ts EXECUTE_ROUND_TRIP) in one list, built in place and
    // handed to ioredis as one argument: ioredis flattens a command's arguments, so this is the same
    // command on the wire, and the list is not spread into a new array at each layer it passes.
    const args: string[] = [
      agentKeys[0], agentKeys[1], agentKeys[2], agentKeys[3],
      k.agentJti(agentId, request.jti),
      inScript[0]?.key ?? agentKey,
      inScript[1]?.key ?? agentKey,
      events.length > 0 ? k.auditStream : agentKey,
      records.length > 0 ? k.decisionStream : agentKey,
      String(request.keyVersion),
      String(jtiTtlMs),
      msString(request.nowMs, 'nowMs'),
      msString(request.nowMs + request.sessionTtlMs, 'session deadline'),
      String(inScript.length),
      String(events.length),
      String(audit?.maxEvents ?? 1),
      AUDIT_EVENT_FIELD,
      String(records.length),
      String(decisions?.maxRecords ?? 1),
      DECISION_RECORD_FIELD,
    ];
    for (const counter of inScript) args.push(String(counter.points), String(counter.windowSeconds));
    for (const event of events) args.push(JSON.stringify(event));
    for (const record of records) args.push(record);
    for (const capability of capabilities) args.push(capability);
    // The script's own connection when it is up (script-connection.ts says why), else the shared one.
    const executeConnection = this.redis.executeConnection;
    const reply = (await (executeConnection?.ready ? executeConnection.run(args) : this.redis.scripts.agentgateExecute(args))) as [string, unknown, unknown, unknown?, unknown?, unknown?, unknown?];
    const outcome = reply[0];
    // Not awaited: on a Cluster the execute does not wait for the streams' nodes (store.ts says why).
    const auditWritten = appendedApart ?? decodeFlags(reply[1]);
    const decisionsWritten = recordedApart ?? decodeFlags(reply[2]);
    if (outcome === 'not_found' || outcome === 'stale_key') {
      // These spend nothing (the retry of a stale key spends): what went beside is given back.
      if (spentApart) {
        await Promise.all(counters.map(async (counter, i) => {
          const spent = await spentApart[i]?.then(() => true, () => false);
          if (spent) await this.redis.scripts.agentgateGiveBackCounter(counter.key, String(counter.points));
        }));
      }
      return { kind: outcome, auditWritten, decisionsWritten };
    }
    const scriptCounts = decodeCounts(reply[3]);
    // In the order of `counters`: each from the script, or from its spend apart (Cluster only).
    const counts: CounterCount[] = [];
    let fromScript = 0;
    for (let i = 0; i < counters.length; i++) {
      const apart = spentApart?.[i];
      counts.push(apart ? await apart : scriptCounts[fromScript++]!);
    }
    if (outcome === 'replay') return { kind: 'replay', counts, auditWritten, decisionsWritten };
    return {
      kind: 'ok',
      agent: decodeAgent(reply[4]),
      sessionExpiresAtMs: decodeOptionalMs(reply[5], `session of agent ${agentId}`),
      grants: decodeGrants(reply[6]).sort(byId),
      counts,
      auditWritten,
      decisionsWritten,
    };
  }

  async #spendApart(counter: CounterSpend): Promise<CounterCount> {
    const reply = await this.redis.scripts.agentgateSpendCounter(counter.key, String(counter.points), String(counter.windowSeconds));
    return decodeCounts(reply)[0]!;
  }
}
