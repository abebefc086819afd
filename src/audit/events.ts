// The audit trail's rules that are decisions rather than plumbing (SECURITY.md, "The audit trail"):
// what an event is and how big it may be, which events a filter matches, how stream positions
// compare, what a time in a query means, and how long a failed webhook delivery waits. No I/O here.
import { IsoTimeFormatter } from '../common/iso-time.ts';

/** Who did what an event records: a host or agent by its key, the admin by its token, a person signed in, or agentgate itself. */
export const AUDIT_ACTORS = ['host', 'agent', 'admin', 'person', 'system'] as const;
type AuditActor = (typeof AUDIT_ACTORS)[number];

/** A detail's value: small and flat, so an event stays one short JSON line. */
type AuditDetailValue = string | number | boolean | readonly string[];

/**
 * An event as a service records it. Secrets never go in: no JWTs, keys, tokens, user codes or
 * execute arguments; only ids, names, outcomes and error codes.
 */
export interface AuditEventInput {
  /** `<subject>.<what happened>`, e.g. `agent.registered`, `execute.allowed`. */
  type: string;
  actor: AuditActor;
  agent_id?: string | undefined;
  host_id?: string | undefined;
  person_id?: string | undefined;
  capability?: string | undefined;
  outcome?: string | undefined;
  code?: string | undefined;
  [detail: string]: AuditDetailValue | undefined;
}

/** An event as it is stored: sanitized, stamped with the time it happened (ISO 8601). */
export interface AuditRecord {
  at: string;
  type: string;
  actor: AuditActor;
  [field: string]: AuditDetailValue;
}

/** An event as it is read: with its id, which is also its position in the trail. */
export interface AuditEvent extends AuditRecord {
  id: string;
}

/** Who acted, for services that many callers share (an approval by the admin, the page or a person's API). */
export interface AuditBy {
  actor: AuditActor;
  person_id?: string | undefined;
  /** Which door the actor came through, e.g. `admin_api`, `approval_page`, `people_api`. */
  via?: string | undefined;
}

/** Longest string kept in an event (ids are at most 128 characters, names 200). */
export const MAX_AUDIT_STRING = 256;
/** Most items kept of a list in an event (a registration names at most a few dozen capabilities). */
export const MAX_AUDIT_LIST = 64;
/** Most fields of one event, so no caller can make one event large. */
export const MAX_AUDIT_FIELDS = 24;

/** Every event's `at`; the formatter reuses the date part within a second (common/iso-time.ts). */
const eventTimes = new IsoTimeFormatter();

const cut = (text: string): string => (text.length > MAX_AUDIT_STRING ? `${text.slice(0, MAX_AUDIT_STRING - 1)}…` : text);

/**
 * The event as it will be stored: `at` first, undefined fields left out, strings and lists cut to
 * their bounds, non-finite numbers dropped, at most MAX_AUDIT_FIELDS fields. Never throws.
 */
export function sanitizeAuditEvent(input: AuditEventInput, atMs: number): AuditRecord {
  const record: AuditRecord = { at: eventTimes.format(atMs), type: cut(input.type), actor: input.actor };
  let fields = 3;
  // for...in with the own-property check visits exactly what Object.entries would, in the same
  // order, without building an array of [name, value] pairs for every event (one per execute).
  for (const name in input) {
    if (!Object.hasOwn(input, name)) continue;
    if (fields >= MAX_AUDIT_FIELDS) break;
    const value = input[name];
    if (name === 'type' || name === 'actor' || name === 'at' || name === 'id' || value === undefined) continue;
    let kept: AuditDetailValue | undefined;
    if (typeof value === 'string') kept = cut(value);
    else if (typeof value === 'boolean') kept = value;
    else if (typeof value === 'number') kept = Number.isFinite(value) ? value : undefined;
    else if (Array.isArray(value)) kept = value.slice(0, MAX_AUDIT_LIST).map((item) => cut(String(item)));
    if (kept === undefined) continue;
    record[cut(name)] = kept;
    fields++;
  }
  return record;
}

// ---- aggregating repeated refusals --------------------------------------------------------------

/**
 * The fields that say who was refused and for what: they make a refusal's key, and a summary of
 * repeats carries them. Never a capability name, a path, a request id or anything else a caller
 * can vary freely, so one caller has at most one key per event type and error code.
 */
export type RefusalKeyFields = Pick<AuditEventInput, 'type' | 'actor' | 'agent_id' | 'host_id' | 'person_id' | 'outcome' | 'code'>;

interface RefusalKey {
  /** The fields joined into one string: equal keys are the same caller refused for the same reason. */
  key: string;
  fields: RefusalKeyFields;
}

/** Codes that refuse an agent for its host's status: every agent of that host hears the same. */
const HOST_STATUS_CODES: ReadonlySet<string> = new Set(['host_pending', 'host_revoked', 'host_rejected']);

/**
 * The key a refusal is counted under, or null when the event is recorded one by one. The rule:
 * an event is aggregated when its `outcome` is `refused` and it names the caller that was refused
 * by something it holds — an agent by `agent_id` (with its host), a host by `host_id`, a person by
 * `person_id`, or the admin whose token verified (`capped` is false). Its key is the event type,
 * the actor, that caller and the error code. An agent refused for its host's status (`host_*`
 * codes) is keyed by its host alone, so a host's agents share one key. Refusals nobody holding a
 * key made (`capped`, with no caller named) stay under the per-window cap instead
 * (audit/log.ts), and so does agentgate's own work (`actor: system`).
 */
export function refusalKey(event: AuditEventInput, capped: boolean): RefusalKey | null {
  if (event.outcome !== 'refused') return null;
  const common = { type: event.type, actor: event.actor, outcome: 'refused', code: event.code };
  let fields: RefusalKeyFields;
  switch (event.actor) {
    case 'agent':
      if (event.agent_id === undefined) return null;
      fields = event.code !== undefined && HOST_STATUS_CODES.has(event.code) && event.host_id !== undefined
        ? { ...common, host_id: event.host_id }
        : { ...common, agent_id: event.agent_id, host_id: event.host_id };
      break;
    case 'host':
      if (event.host_id === undefined) return null;
      fields = { ...common, host_id: event.host_id };
      break;
    case 'person':
      if (event.person_id === undefined) return null;
      fields = { ...common, person_id: event.person_id };
      break;
    case 'admin':
      if (capped) return null;
      fields = common;
      break;
    default:
      return null;
  }
  const key = JSON.stringify([fields.type, fields.actor, fields.agent_id ?? null, fields.host_id ?? null, fields.person_id ?? null, fields.code ?? null]);
  return { key, fields };
}

/**
 * The one event that stands for the repeats of a refusal in one window: the same type and the same
 * who and what as the first (which was recorded on its own), `count` repeats, the first and last
 * of them, and the window's length.
 */
export function refusalSummary(fields: RefusalKeyFields, count: number, firstMs: number, lastMs: number, windowMs: number): AuditEventInput {
  return { ...fields, count, first_at: new Date(firstMs).toISOString(), last_at: new Date(lastMs).toISOString(), window_ms: windowMs };
}

/**
 * The families of the trail's event types (the part before the dot): a `type` filter outside them
 * matches nothing, ever, so GET /admin/audit refuses it with the list rather than answer an empty
 * page that reads as "nothing happened". test/unit/errors.newcomer.test.ts checks that every type
 * the code records belongs to one of them.
 */
export const AUDIT_EVENT_FAMILIES = ['admin', 'agent', 'approval', 'audit', 'capability', 'execute', 'grant', 'host', 'operators', 'passkey', 'policy'] as const;

// ---- reading -------------------------------------------------------------------------------------

/** What GET /admin/audit filters by; every given filter must match. */
export interface AuditFilter {
  agentId?: string | undefined;
  hostId?: string | undefined;
  /** Exact type (`execute.refused`), or a prefix before a dot (`execute` matches `execute.*`). */
  type?: string | undefined;
  /** Inclusive bounds on `at`, epoch ms. */
  sinceMs?: number | undefined;
  untilMs?: number | undefined;
}

/** `wanted` with a dot names one type; without, a family (`execute` is `execute.allowed` and `execute.refused`). */
export function typeMatches(type: string, wanted: string): boolean {
  return type === wanted || (!wanted.includes('.') && type.startsWith(`${wanted}.`));
}

export function matchesAuditFilter(event: AuditEvent, filter: AuditFilter): boolean {
  if (filter.agentId !== undefined && event.agent_id !== filter.agentId) return false;
  if (filter.hostId !== undefined && event.host_id !== filter.hostId) return false;
  if (filter.type !== undefined && !typeMatches(event.type, filter.type)) return false;
  if (filter.sinceMs === undefined && filter.untilMs === undefined) return true;
  const atMs = Date.parse(event.at);
  if (Number.isNaN(atMs)) return false;
  if (filter.sinceMs !== undefined && atMs < filter.sinceMs) return false;
  return filter.untilMs === undefined || atMs <= filter.untilMs;
}

/** True when no filter is given: every event matches. */
export const isUnfiltered = (filter: AuditFilter): boolean =>
  filter.agentId === undefined && filter.hostId === undefined && filter.type === undefined && filter.sinceMs === undefined && filter.untilMs === undefined;

// ---- positions -----------------------------------------------------------------------------------

/** An event id is a Redis stream id, `<ms>-<sequence>`; the memory store makes the same kind. */
export const AUDIT_ID_PATTERN = /^\d{1,20}-\d{1,20}$/;

/** The id's two numbers; null when it is not an event id. */
export function parseAuditId(id: string): [bigint, bigint] | null {
  if (!AUDIT_ID_PATTERN.test(id)) return null;
  const dash = id.indexOf('-');
  return [BigInt(id.slice(0, dash)), BigInt(id.slice(dash + 1))];
}

/** Orders event ids as the stream does (by time, then sequence); both must be valid ids. */
export function compareAuditIds(a: string, b: string): number {
  const x = parseAuditId(a);
  const y = parseAuditId(b);
  if (!x || !y) throw new Error(`not audit event ids: ${a}, ${b}`);
  if (x[0] !== y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] === y[1] ? 0 : x[1] < y[1] ? -1 : 1;
}

/** The time (epoch ms, the store's clock) at which the event was appended. */
export function auditIdMs(id: string): number {
  const parsed = parseAuditId(id);
  if (!parsed) throw new Error(`not an audit event id: ${id}`);
  return Number(parsed[0]);
}

/** The earlier of two exclusive upper bounds (null: no bound). */
export function earlierBound(a: string | null, b: string | null): string | null {
  if (a === null) return b;
  if (b === null) return a;
  return compareAuditIds(a, b) <= 0 ? a : b;
}

const ISO_8601 = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;
const EPOCH_MS = /^\d{1,15}$/;

/** A query's time: ISO 8601 (a date, or a date and time) or epoch milliseconds; null when it is neither. */
export function parseAuditTime(text: string): number | null {
  if (EPOCH_MS.test(text)) return Number(text);
  if (!ISO_8601.test(text)) return null;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : ms;
}

// ---- forwarding ----------------------------------------------------------------------------------

const WEBHOOK_BACKOFF_INITIAL_MS = 1000;
const WEBHOOK_BACKOFF_MAX_MS = 60_000;

/**
 * How long to wait before delivery attempt `failures + 1`: 1 s doubling per failure up to 60 s,
 * with "equal jitter" (between half and all of it), so instances that failed together spread out
 * yet none retries sooner than half the schedule. `random` is in [0, 1).
 */
export function webhookBackoffMs(failures: number, random: number): number {
  const exponent = Math.min(Math.max(failures, 1) - 1, 16);
  const ceilingMs = Math.min(WEBHOOK_BACKOFF_MAX_MS, WEBHOOK_BACKOFF_INITIAL_MS * 2 ** exponent);
  return Math.round(ceilingMs / 2 + (ceilingMs / 2) * Math.min(Math.max(random, 0), 1));
}

/** At most this many audit events in one read or one forwarding claim. */
export const MAX_AUDIT_READ = 1000;

/**
 * Reading the trail, the part of the store's audit records (store.ts AuditRecords) that a query
 * needs. Declared here, with the trail, so that reading it (query.ts) needs nothing of the store.
 */
export interface AuditReader {
  /** Up to `count` events, newest first, strictly older than the id `beforeId` (null: from the newest). */
  readAuditEvents(beforeId: string | null, count: number): Promise<AuditEvent[]>;
}
