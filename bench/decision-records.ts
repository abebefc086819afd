// The recorded decisions the preview benchmark reads (bench/run.ts, the `preview` scenario). A
// preview reads the newest records from the decision stream, so the bench fills it with copies of
// records the server under test wrote itself: one allowed execute, one refused execute and one
// grants decision, each copied as the store holds it and varied where real traffic varies (the
// time, and an allowed call's amount and currency, kept within the grant so its recorded answer
// stays the policy's answer). The copies go straight into the stream, as XADD with the field the
// store writes, so filling 100,000 takes seconds rather than the hours that 1 % sampling would.
import type { Redis } from 'ioredis';
import { parseDecisionRecord, type DecisionRecord } from '../src/policy/decision-records.ts';
import { DECISION_RECORD_FIELD } from '../src/store/redis/decision-records.ts';

/** One real record of each kind the fill copies. */
export interface RecordTemplates {
  allowedExecute: DecisionRecord;
  refusedExecute: DecisionRecord;
  grants: DecisionRecord;
}

/** Of every FILL_CYCLE copies, one is a grants decision and REFUSED_PER_CYCLE are refused executes; the rest are allowed executes. */
const FILL_CYCLE = 50;
const REFUSED_PER_CYCLE = 5;
/** Entries per pipeline while filling: large enough to fill quickly, small enough to keep each reply small. */
const FILL_BATCH = 1000;
/** How far apart the copies' recorded times are, so 100,000 of them span the last 1,000 s or so. */
const COPY_SPACING_MS = 10;

type StreamEntry = [id: string, fields: string[]];

/**
 * One record of each kind among the newest `scan` in the stream, or the kinds still missing.
 * Only records that parse as the store's readers parse them are taken.
 */
export async function findTemplates(redis: Redis, streamKey: string, scan: number): Promise<Partial<RecordTemplates>> {
  const entries = (await redis.xrevrange(streamKey, '+', '-', 'COUNT', scan)) as StreamEntry[];
  const found: Partial<RecordTemplates> = {};
  for (const [, fields] of entries) {
    const at = fields.indexOf(DECISION_RECORD_FIELD);
    if (at < 0 || at + 1 >= fields.length) continue;
    let record: DecisionRecord | null;
    try {
      record = parseDecisionRecord(JSON.parse(fields[at + 1]!));
    } catch {
      record = null;
    }
    if (record === null) continue;
    if (record.entrypoint === 'agentgate/grants') found.grants ??= record;
    else if ((record.output as { allow?: unknown }).allow === true) found.allowedExecute ??= record;
    else found.refusedExecute ??= record;
  }
  return found;
}

/** The `i`th copy: which template, and what varies. */
export function copyOf(templates: RecordTemplates, i: number, atMs: number): string {
  const position = i % FILL_CYCLE;
  const at = new Date(atMs).toISOString();
  if (position === 0) return JSON.stringify({ ...templates.grants, at });
  if (position <= REFUSED_PER_CYCLE) {
    const refused = templates.refusedExecute;
    return JSON.stringify({ ...refused, at, input: { ...refused.input, now_ms: atMs } });
  }
  // An allowed call's arguments move within the grant (amount ≤ 1000, USD or EUR), so the
  // recorded answer, allowed by that grant, is still the one the live policy gives.
  const allowed = templates.allowedExecute;
  const args = allowed.input.arguments as Record<string, unknown>;
  const varied = { ...args, amount: 1 + ((i * 7919) % 1000), currency: i % 2 === 0 ? 'USD' : 'EUR' };
  return JSON.stringify({ ...allowed, at, input: { ...allowed.input, now_ms: atMs, arguments: varied } });
}

/**
 * Appends `count` copies to the stream, trimmed as the server trims it (MAXLEN ~ maxRecords), the
 * newest recorded now. Bounded: `count` entries in batches of FILL_BATCH.
 */
export async function fillDecisionStream(redis: Redis, streamKey: string, templates: RecordTemplates, count: number, maxRecords: number): Promise<void> {
  const newestMs = Date.now();
  for (let start = 0; start < count; start += FILL_BATCH) {
    const pipeline = redis.pipeline();
    for (let i = start; i < Math.min(count, start + FILL_BATCH); i++) {
      pipeline.xadd(streamKey, 'MAXLEN', '~', String(maxRecords), '*', DECISION_RECORD_FIELD, copyOf(templates, i, newestMs - (count - i) * COPY_SPACING_MS));
    }
    const replies = await pipeline.exec();
    const failed = replies?.find(([error]) => error !== null);
    if (failed) throw new Error(`filling the decision stream failed: ${String(failed[0])}`);
  }
}

/** The mix of the copies, in words, for the report. */
export const FILL_MIX = `of every ${FILL_CYCLE} copies, 1 grants decision, ${REFUSED_PER_CYCLE} refused executes and ${FILL_CYCLE - 1 - REFUSED_PER_CYCLE} allowed executes`;
