// The Redis store's audit trail (the AuditRecords role of store.ts): one stream (`XADD MAXLEN ~`,
// and `XTRIM MINID` for its age bound), read newest first with XREVRANGE, and forwarded through one
// consumer group that every instance's webhook forwarder shares, so each event is handed to one
// forwarder at a time and a forwarder that dies leaves its events to the others. The stream is one
// key: on a Redis Cluster it lives in one slot of its own. Its commands go on the store's one
// command connection (parts.ts), so an append in the hot path's tick rides with its round trip.
import type { AuditEvent, AuditRecord } from '../../audit/events.ts';
import { AUDIT_ID_PATTERN } from '../../audit/events.ts';
import { MAX_AUDIT_READ, type AuditClaim, type AuditRecords } from '../store.ts';
import type { RedisConnection } from './connection.ts';
import { AUDIT_FORWARD_GROUP } from './keys.ts';
import type { RedisParts, ScriptCommands } from './parts.ts';

/** The one field of a stream entry: the event as JSON (the execute script appends entries too). */
export const AUDIT_EVENT_FIELD = 'e';

/**
 * The idle time a given-back event is set to: far longer than any forwarder's reclaim window, so
 * any forwarder takes it over at once (XCLAIM cannot unassign an entry; this is its equivalent).
 */
const GIVEN_BACK_IDLE_MS = 365 * 24 * 3600 * 1000;

/** Forwarders forgotten in one call at most (the script walks the whole, small, registry). */
const MAX_FORGOTTEN_CONSUMERS = 100;

type StreamEntry = [id: string, fields: string[]];

export class RedisAuditRecords implements AuditRecords {
  readonly #connection: RedisConnection;
  readonly #scripts: ScriptCommands;
  readonly #key: string;

  constructor(redis: RedisParts) {
    this.#connection = redis.connection;
    this.#scripts = redis.scripts;
    this.#key = redis.keys.auditStream;
  }

  /**
   * Not async on purpose: the command is issued before this returns, so in the tick of the hot
   * path's round trip it joins its auto-pipeline (no round trip of its own). One event is one
   * XADD; several, or any number with `maxAgeMs`, are one script call that XADDs each and trims by
   * age (audit-scripts.ts), not one command each. No events with `maxAgeMs` is one XTRIM MINID:
   * the audit writer trims by age that way, once a minute, off the hot path. Age is measured
   * against this process's clock, and the ids against the Redis server's: a skew between them
   * moves the bound by as much, which an age of at least an hour (AUDIT_MAX_AGE_SECONDS) absorbs.
   */
  appendAuditEvents(records: readonly AuditRecord[], maxEvents: number, maxAgeMs?: number): Promise<boolean[]> {
    if (!Number.isSafeInteger(maxEvents) || maxEvents < 1) return Promise.reject(new Error(`maxEvents must be a positive integer, got ${maxEvents}`));
    if (maxAgeMs !== undefined && (!Number.isSafeInteger(maxAgeMs) || maxAgeMs < 1)) {
      return Promise.reject(new Error(`maxAgeMs must be a positive integer, got ${maxAgeMs}`));
    }
    const minId = maxAgeMs === undefined ? '' : String(Math.max(0, Date.now() - maxAgeMs));
    if (records.length === 0) {
      if (minId === '') return Promise.resolve([]);
      return this.#connection.xtrim(this.#key, 'MINID', minId).then(() => []);
    }
    const maxLength = String(maxEvents);
    if (records.length === 1 && minId === '') {
      return this.#connection.xadd(this.#key, 'MAXLEN', '~', maxLength, '*', AUDIT_EVENT_FIELD, JSON.stringify(records[0])).then(() => [true], () => [false]);
    }
    return this.#scripts.agentgateAuditAppend(this.#key, maxLength, minId, AUDIT_EVENT_FIELD, ...records.map((record) => JSON.stringify(record))).then(
      (written) => records.map((_, i) => Array.isArray(written) && written[i] === 1),
      () => records.map(() => false),
    );
  }

  async readAuditEvents(beforeId: string | null, count: number): Promise<AuditEvent[]> {
    const bounded = boundedCount(count);
    if (beforeId !== null && !AUDIT_ID_PATTERN.test(beforeId)) throw new Error(`not an audit event id: ${beforeId}`);
    const entries = (await this.#connection.xrevrange(this.#key, beforeId === null ? '+' : `(${beforeId}`, '-', 'COUNT', bounded)) as StreamEntry[];
    return entries.map(decodeEntry);
  }

  async claimAuditEvents(claim: AuditClaim): Promise<AuditEvent[]> {
    const count = boundedCount(claim.count);
    const idleMs = Math.max(0, Math.trunc(claim.reclaimIdleMs));
    // Abandoned events first: XAUTOCLAIM hands over those idle at least reclaimIdleMs (and forgets
    // ones trimmed away meanwhile). A group that does not exist yet holds none.
    const reclaimed = await this.#withGroup(() => this.#connection.xautoclaim(this.#key, AUDIT_FORWARD_GROUP, claim.consumer, idleMs, '0-0', 'COUNT', count));
    const taken = ((reclaimed as [string, (StreamEntry | null)[]])[1] ?? []).filter((entry): entry is StreamEntry => entry !== null);
    if (taken.length > 0) return taken.map(decodeEntry);
    const read = await this.#withGroup(() => this.#connection.xreadgroup('GROUP', AUDIT_FORWARD_GROUP, claim.consumer, 'COUNT', count, 'STREAMS', this.#key, '>'));
    const streams = read as [string, StreamEntry[]][] | null;
    return (streams?.[0]?.[1] ?? []).map(decodeEntry);
  }

  async acknowledgeAuditEvents(ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.#withGroup(() => this.#connection.xack(this.#key, AUDIT_FORWARD_GROUP, ...ids));
  }

  async renewAuditClaims(consumer: string, ids: readonly string[]): Promise<string[]> {
    return this.#hold(consumer, ids, 0);
  }

  async releaseAuditClaims(consumer: string, ids: readonly string[]): Promise<void> {
    await this.#hold(consumer, ids, GIVEN_BACK_IDLE_MS);
  }

  async forgetIdleAuditConsumers(idleMs: number): Promise<number> {
    const removed = await this.#scripts.agentgateAuditForgetConsumers(this.#key, AUDIT_FORWARD_GROUP, String(Math.max(0, Math.trunc(idleMs))), String(MAX_FORGOTTEN_CONSUMERS));
    return Number(removed);
  }

  async #hold(consumer: string, ids: readonly string[], idleMs: number): Promise<string[]> {
    if (ids.length === 0) return [];
    if (ids.length > MAX_AUDIT_READ) throw new Error(`at most ${MAX_AUDIT_READ} audit ids at once`);
    const kept = await this.#scripts.agentgateAuditHold(this.#key, AUDIT_FORWARD_GROUP, consumer, String(idleMs), ...ids);
    return Array.isArray(kept) ? kept.map(String) : [];
  }

  /**
   * Runs a group command, creating the group first when Redis says it does not exist. The group
   * starts at the oldest event the stream holds (`0`), so an event recorded before the first
   * forwarder started is forwarded too; BUSYGROUP means another instance created it first.
   */
  async #withGroup<T>(command: () => Promise<T>): Promise<T> {
    try {
      return await command();
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOGROUP')) throw err;
    }
    try {
      await this.#connection.xgroup('CREATE', this.#key, AUDIT_FORWARD_GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('BUSYGROUP')) throw err;
    }
    return command();
  }
}

function boundedCount(count: number): number {
  if (!Number.isSafeInteger(count) || count < 1 || count > MAX_AUDIT_READ) throw new Error(`count must be 1-${MAX_AUDIT_READ}, got ${count}`);
  return count;
}

/**
 * A stream entry as an event. An entry that is not one of ours (written by hand, or corrupt) is
 * still shown, as `audit.unreadable` at the time of its id, rather than hidden or failing the read.
 */
function decodeEntry([id, fields]: StreamEntry): AuditEvent {
  const at = fields.indexOf(AUDIT_EVENT_FIELD);
  try {
    const parsed: unknown = JSON.parse(at >= 0 && at % 2 === 0 ? (fields[at + 1] ?? '') : '');
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const record = parsed as AuditRecord;
      if (typeof record.at === 'string' && typeof record.type === 'string') return { ...record, id };
    }
  } catch {
    // Falls through to the placeholder below.
  }
  return { id, at: new Date(Number(id.split('-')[0])).toISOString(), type: 'audit.unreadable', actor: 'system' };
}
