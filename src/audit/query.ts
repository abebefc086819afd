// GET /admin/audit: one page of the audit trail, newest first, filtered, with a
// cursor to older events. One request reads at most max(AUDIT_SCAN_FLOOR, 10 × limit) events,
// however rare the filter, and answers a cursor to go on from where it stopped: no request can make
// the server read the whole trail.
//
// `since` and `until` bound the time an event happened (`at`, the recording instance's clock),
// while the trail is ordered by when it was appended (its id, the store's clock). The two differ
// by the queueing delay (up to about two AUDIT_FLUSH_MS and a write timeout) plus clock skew, so
// the scan starts and stops `auditTimeSlackMs` beyond the bounds and filters on `at` exactly.
import {
  auditIdMs,
  earlierBound,
  isUnfiltered,
  matchesAuditFilter,
  MAX_AUDIT_READ,
  type AuditEvent,
  type AuditFilter,
  type AuditReader,
} from './events.ts';
import type { Config } from '../config.ts';

/** The most events one page answers, and how many it answers when the request names no limit. */
export const AUDIT_MAX_LIMIT = 500;
export const AUDIT_DEFAULT_LIMIT = 50;
/** Events one request may read: at least the floor, else this many per event it may answer. */
const AUDIT_SCAN_FLOOR = 1000;
const SCAN_PER_RESULT = 10;
/** How far instance clocks may drift from the store's and `since`/`until` still hold exactly. */
const AUDIT_CLOCK_SKEW_MS = 30_000;

interface AuditQuery {
  filter: AuditFilter;
  limit: number;
  /** A `next_cursor` from an earlier page: go on with the events older than it. */
  cursor?: string | undefined;
}

export interface AuditPage {
  events: AuditEvent[];
  /** Where the next page starts; null when the trail (or the `since` bound) is reached. */
  nextCursor: string | null;
}

/** The most an event's append can trail its `at` (and lead it, by clock skew). */
function auditTimeSlackMs(config: Pick<Config, 'AUDIT_FLUSH_MS' | 'REDIS_COMMAND_TIMEOUT_MS'>): number {
  return 2 * config.AUDIT_FLUSH_MS + config.REDIS_COMMAND_TIMEOUT_MS + AUDIT_CLOCK_SKEW_MS;
}

export async function queryAudit(deps: { store: AuditReader; config: Pick<Config, 'AUDIT_FLUSH_MS' | 'REDIS_COMMAND_TIMEOUT_MS'> }, query: AuditQuery): Promise<AuditPage> {
  const { store } = deps;
  const slackMs = auditTimeSlackMs(deps.config);
  const { filter } = query;
  const limit = Math.min(Math.max(1, Math.trunc(query.limit)), AUDIT_MAX_LIMIT);
  const budget = Math.max(AUDIT_SCAN_FLOOR, SCAN_PER_RESULT * limit);
  const unfiltered = isUnfiltered(filter);
  // An event appended after until + slack cannot have happened by `until`: start below it.
  const untilBound = filter.untilMs === undefined ? null : `${Math.max(0, Math.floor(filter.untilMs + slackMs) + 1)}-0`;
  // An event appended before since - slack cannot have happened at `since` or later: stop there.
  const stopBelowMs = filter.sinceMs === undefined ? null : filter.sinceMs - slackMs;
  let before = earlierBound(query.cursor ?? null, untilBound);
  const events: AuditEvent[] = [];
  let scanned = 0;
  // Bounded: every round reads at least one event of the budget, or ends.
  while (scanned < budget) {
    const wanted = unfiltered ? limit - events.length : Math.max(200, 2 * limit);
    const count = Math.min(MAX_AUDIT_READ, budget - scanned, wanted);
    const chunk = await store.readAuditEvents(before, count);
    for (const event of chunk) {
      scanned++;
      before = event.id;
      if (stopBelowMs !== null && auditIdMs(event.id) < stopBelowMs) return { events, nextCursor: null };
      if (!matchesAuditFilter(event, filter)) continue;
      events.push(event);
      if (events.length === limit) return { events, nextCursor: event.id };
    }
    if (chunk.length < count) return { events, nextCursor: null };
  }
  return { events, nextCursor: before };
}
