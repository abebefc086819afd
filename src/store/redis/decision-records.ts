// The Redis store's recorded policy decisions (the DecisionRecords role of store.ts): one stream
// (`XADD MAXLEN ~`), read newest first with XREVRANGE. Nothing forwards it and no person reads it
// as a trail, so unlike the audit stream it has no consumer group and no age bound. The stream is
// one key: on a Redis Cluster it lives in one slot of its own. Its commands go on the store's one
// command connection (parts.ts), so an append in the hot path's tick rides with its round trip; a
// preview reads the stream from a process of its own, on a connection of its own
// (openDecisionStreamReader).
import { assertMaxRecords, decisionReadBounds } from '../checks.ts';
import type { DecisionRecords, DecisionStreamAddress, StoredDecision } from '../store.ts';
import { closeConnection, connectAndCheck, openConnection, type RedisConnection } from './connection.ts';
import { RedisRole, type RedisParts } from './parts.ts';

/** The one field of a stream entry: the record's JSON text (the execute script appends entries too). */
export const DECISION_RECORD_FIELD = 'record';

type StreamEntry = [id: string, fields: string[]];

export class RedisDecisionRecords extends RedisRole implements DecisionRecords {
  readonly #key: string;
  readonly #address: DecisionStreamAddress;

  /** `connectTo` is how this store connects: another process reading the stream connects the same way. */
  constructor(redis: RedisParts, connectTo: DecisionStreamAddress['redis']) {
    super(redis);
    this.#key = redis.keys.decisionStream;
    this.#address = { redis: connectTo, streamKey: this.#key };
  }

  decisionStreamAddress(): DecisionStreamAddress {
    return this.#address;
  }

  /**
   * Not async on purpose: the command is issued before this returns, so in the tick of the hot
   * path's round trip it joins its auto-pipeline (no round trip of its own). One record is one
   * XADD; several are one call of the audit trail's append script, which is the same for any stream
   * and field (audit-scripts.ts AUDIT_APPEND; no minimum id, so no trim by age). A refused append
   * answers false for its records rather than rejecting: the records are a sample, and losing some
   * must not fail the call that carried them.
   */
  appendDecisionRecords(records: readonly string[], maxRecords: number): Promise<boolean[]> {
    try {
      assertMaxRecords(maxRecords);
    } catch (error) {
      return Promise.reject(error);
    }
    if (records.length === 0) return Promise.resolve([]);
    const maxLength = String(maxRecords);
    if (records.length === 1) {
      return this.redis.connection.xadd(this.#key, 'MAXLEN', '~', maxLength, '*', DECISION_RECORD_FIELD, records[0]!).then(() => [true], () => [false]);
    }
    return this.redis.scripts.agentgateAuditAppend(this.#key, maxLength, '', DECISION_RECORD_FIELD, ...records).then(
      (written) => records.map((_, i) => Array.isArray(written) && written[i] === 1),
      () => records.map(() => false),
    );
  }

  readDecisionRecords(count: number, beforeId?: string): Promise<StoredDecision[]> {
    return readDecisionPage(this.redis.connection, this.#key, count, beforeId);
  }
}

/** A reader of the decision stream on a connection of its own, for a process other than the store's. */
export interface DecisionStreamReader {
  readDecisionRecords(count: number, beforeId?: string): Promise<StoredDecision[]>;
  close(): Promise<void>;
}

/** How long closing the reader's connection may take before it is dropped. */
const READER_CLOSE_MS = 1000;

/**
 * Opens a connection as `address` says and reads the stream on it, as the store's own reads do. The
 * connection carries nothing else, so a preview's large replies queue behind no request's command
 * and no request's behind them. Fails closed as the store's connection does: a command not answered
 * within the command timeout rejects.
 */
export async function openDecisionStreamReader(address: DecisionStreamAddress): Promise<DecisionStreamReader> {
  const connection = openConnection(address.redis, 'commands');
  // Bounded, and on failure disconnected, with a message that says what failed where.
  await connectAndCheck(connection, address.redis);
  return {
    readDecisionRecords: (count, beforeId) => readDecisionPage(connection, address.streamKey, count, beforeId),
    close: () => closeConnection(connection, READER_CLOSE_MS),
  };
}

/**
 * Reads of a page at most, past entries that are not records (written by hand, or by something
 * else): a read that found only such entries says nothing about what is older, so the page reads on
 * past them rather than come back empty, which its readers take for the end of the stream.
 */
const MAX_READS_PER_PAGE = 100;

/** Up to `count` records of the stream at `key`, newest first, each older than `beforeId` when given; empty only when no older record was found. */
async function readDecisionPage(connection: RedisConnection, key: string, count: number, beforeId?: string): Promise<StoredDecision[]> {
  const before = decisionReadBounds(count, beforeId);
  // Nothing is older than 0-0, and Redis refuses `(0-0` as an end (it has no predecessor).
  if (before !== null && before.ms === 0n && before.seq === 0n) return [];
  let end = beforeId === undefined ? '+' : `(${beforeId}`;
  // Bounded by MAX_READS_PER_PAGE reads of `count` entries each.
  for (let read = 0; read < MAX_READS_PER_PAGE; read++) {
    const entries = (await connection.xrevrange(key, end, '-', 'COUNT', count)) as StreamEntry[];
    if (entries.length === 0) return [];
    const decisions: StoredDecision[] = [];
    for (const [id, fields] of entries) {
      const json = recordField(fields);
      if (json !== null) decisions.push({ id, json });
    }
    if (decisions.length > 0) return decisions;
    end = `(${entries[entries.length - 1]![0]}`;
  }
  return [];
}

/**
 * The record's JSON text of an entry's fields (name, value, name, value, ...), or null when the
 * entry has no such field: one written by hand, or by something else, is skipped, not thrown. The
 * loop is bounded by the entry, which Redis holds whole.
 */
function recordField(fields: readonly string[]): string | null {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === DECISION_RECORD_FIELD) return fields[i + 1]!;
  }
  return null;
}
