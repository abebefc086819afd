// The audit trail's writer: services record events here and never wait for
// them. Events wait in a bounded in-process queue and are appended to the store
// - by the execute hot path's one store command, which takes them over (handOver) and appends them
//   itself (no command of their own);
// - otherwise by an idle timer, AUDIT_FLUSH_MS after the first event that nothing carried;
// - and at shutdown (close).
// Recording never blocks or refuses a request. A full queue drops its oldest event; a failed append
// is retried once with the next flush, then dropped; both are counted and logged at most once per
// LOG_EVERY_MS. The price is durability: a crash loses what is queued, at most AUDIT_FLUSH_MS of
// events (docs/stances.md, SECURITY.md).
//
// Volume is bounded before anything is queued, so that what one caller repeats cannot push the
// other events out of the trail (SECURITY.md states the bound):
// - a refusal of a caller that holds a key (audit/events.ts refusalKey says which, and under what
//   key) is recorded the first time in a window; its repeats in that window are only counted, and
//   one summary with the count is recorded when the window ends (AUDIT_AGGREGATE_WINDOW_SECONDS).
//   The table of open windows is bounded (AUDIT_AGGREGATE_MAX_KEYS); refusals of keys beyond it are
//   counted into one overflow summary. Close writes every summary still open.
// - events anyone can cause without a key are capped per window (CAPPED_EVENTS_PER_WINDOW) and
//   the rest summarised by one `audit.suppressed` event.
// Besides its count bound (AUDIT_MAX_EVENTS), the trail is trimmed by age (AUDIT_MAX_AGE_SECONDS)
// once a minute, by an append of no events that only trims.
import { refusalKey, refusalSummary, sanitizeAuditEvent, type AuditEventInput, type AuditRecord, type RefusalKeyFields } from './events.ts';
import { within } from '../common/deadline.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import { MAX_ROUND_TRIP_AUDIT_EVENTS, type AuditRecords } from '../store/store.ts';

interface AuditLogOptions {
  /** The store itself, not the fail-closed wrapper: a failed append is logged here, never a 503. */
  store: AuditRecords;
  enabled: boolean;
  maxEvents: number;
  /** Events older than this are trimmed from the trail once a minute; undefined: no age bound. */
  maxAgeMs?: number | undefined;
  /** How long repeats of one refusal are counted before their summary is recorded (default 60 s). */
  aggregateWindowMs?: number | undefined;
  flushMs: number;
  queueMax: number;
  /** How long a flush waits for its appends (the Redis command timeout and a margin). */
  writeDeadlineMs: number;
  logger: Logger;
  /** Wall clock for `at` (default Date.now): when it happened, whatever clock the services decide with. */
  now?: () => number;
}

/** What the log has done since it started, for metrics and tests. */
interface AuditCounters {
  recorded: number;
  written: number;
  /** Dropped because the queue was full (the oldest go first). */
  droppedQueueFull: number;
  /** Dropped after a second failed append. */
  droppedWriteFailed: number;
  /** Capped events beyond the per-window allowance (summarised by `audit.suppressed`). */
  suppressed: number;
  /** Repeated refusals counted into a summary instead of being recorded one by one. */
  aggregated: number;
  /** Of those, refusals of keys the full key table could not take (one overflow summary per window). */
  overflowed: number;
}

/**
 * Appends issued by one flush at most, so the request that carries them never issues thousands:
 * as many as the store lets one round trip carry.
 */
export const AUDIT_FLUSH_CHUNK = MAX_ROUND_TRIP_AUDIT_EVENTS;

/** Queued events handed to a store call that appends them (AuditLog.handOver). */
export interface AuditHandover {
  records: readonly AuditRecord[];
  maxEvents: number;
  /** What the append answered: per event whether it was written, or its failure. */
  settle(appended: Promise<boolean[]>): void;
}
/** A failure that can repeat on every flush is logged at most this often. */
const LOG_EVERY_MS = 10_000;
/**
 * Capped events kept per window and instance: refusals anyone can cause at volume without holding
 * a key (a bad token at the admin API, an execute whose JWT does not verify, a replayed token) and
 * rate-limit refusals, which come in volume by definition. Beyond the allowance they are counted
 * and summarised by one `audit.suppressed` event, so volume cannot push the trail's real events
 * out of its AUDIT_MAX_EVENTS window.
 */
export const CAPPED_EVENTS_PER_WINDOW = 100;
export const CAPPED_WINDOW_MS = 10_000;
/**
 * Refusal keys (audit/events.ts refusalKey) with an open window at once, per instance. Beyond it a
 * new key's refusals are not recorded but counted into one overflow summary per window, so the
 * table costs at most a few MB and the refusals of many callers together add at most
 * 2 × AUDIT_AGGREGATE_MAX_KEYS + 1 events per window.
 */
export const AUDIT_AGGREGATE_MAX_KEYS = 10_000;
const DEFAULT_AGGREGATE_WINDOW_MS = 60_000;
/**
 * Summaries of windows that end within this of the first one due are written together, so a
 * table of many keys costs at most one timer per this long rather than one per key.
 */
const SWEEP_SLACK_MS = 250;
/** How often the trail is trimmed by age (AUDIT_MAX_AGE_SECONDS is at least an hour). */
export const AUDIT_AGE_TRIM_EVERY_MS = 60_000;

/** One refusal key's open window: its first refusal was recorded; the repeats are counted. */
interface RefusalWindow {
  fields: RefusalKeyFields;
  startMs: number;
  /** Repeats counted since the first (0: nothing to summarise). */
  count: number;
  firstMs: number;
  lastMs: number;
}

/** The window of refusals the full key table could not take. */
interface OverflowWindow {
  startMs: number;
  count: number;
  firstMs: number;
  lastMs: number;
}

interface Queued {
  record: AuditRecord;
  /** Appends tried so far. */
  attempts: number;
}

export class AuditLog {
  readonly #options: AuditLogOptions;
  readonly #now: () => number;
  /** A ring: `#head` is the oldest, `#size` how many; a full ring overwrites its oldest. */
  readonly #ring: (Queued | undefined)[];
  #head = 0;
  #size = 0;
  /** Events whose first append failed: the next flush sends them first. */
  #retry: Queued[] = [];
  readonly #inFlight = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | null = null;
  #closed = false;
  readonly #counters: AuditCounters = {
    recorded: 0, written: 0, droppedQueueFull: 0, droppedWriteFailed: 0, suppressed: 0, aggregated: 0, overflowed: 0,
  };
  readonly #throttle: LogThrottle;
  #window = { startMs: 0, count: 0, suppressed: 0 };
  readonly #aggregateWindowMs: number;
  /**
   * Open refusal windows by key, in the order they opened: all have the same length, so the first
   * entry is the next to end (a key whose window ended is deleted and reopened at the end).
   */
  readonly #refusals = new Map<string, RefusalWindow>();
  #overflow: OverflowWindow | null = null;
  #sweepTimer: NodeJS.Timeout | null = null;
  #ageTimer: NodeJS.Timeout | null = null;

  constructor(options: AuditLogOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#throttle = new LogThrottle(LOG_EVERY_MS, this.#now);
    this.#ring = new Array<Queued | undefined>(Math.max(1, options.queueMax));
    this.#aggregateWindowMs = Math.max(1, options.aggregateWindowMs ?? DEFAULT_AGGREGATE_WINDOW_MS);
    if (options.enabled && options.maxAgeMs !== undefined) {
      this.#ageTimer = setInterval(() => this.#trimByAge(), AUDIT_AGE_TRIM_EVERY_MS);
      // Shutdown stops it; alone it must not keep a finished process alive.
      this.#ageTimer.unref();
    }
  }

  get counters(): Readonly<AuditCounters> {
    return { ...this.#counters };
  }

  /** Events waiting to be appended (queued and to retry). */
  get queued(): number {
    return this.#size + this.#retry.length;
  }

  /** Refusal keys with an open window (bounded by AUDIT_AGGREGATE_MAX_KEYS). */
  get openRefusalWindows(): number {
    return this.#refusals.size;
  }

  /**
   * Queues an event; never throws, never waits. A refusal with a key (audit/events.ts refusalKey)
   * is queued only when it is the first of its key in the window; its repeats are counted for the
   * window's summary. `capped`: an event anyone can cause at volume, so it counts against the
   * per-window allowance (CAPPED_EVENTS_PER_WINDOW).
   */
  record(event: AuditEventInput, options?: { capped?: boolean }): void {
    if (!this.#options.enabled) return;
    if (this.#closed) {
      // The drain waits for every handler before the log closes, so this is a bug, not a race.
      this.#counters.droppedWriteFailed++;
      this.#logThrottled('after-close', 'an audit event was recorded after shutdown began; it is lost', { type: event.type });
      return;
    }
    try {
      const nowMs = this.#now();
      this.#rollWindow(nowMs);
      this.#endRefusalWindows(nowMs, false);
      const capped = options?.capped === true;
      const refusal = refusalKey(event, capped);
      if (refusal !== null && this.#countRepeat(refusal.key, refusal.fields, nowMs)) return;
      if (capped && ++this.#window.count > CAPPED_EVENTS_PER_WINDOW) {
        this.#window.suppressed++;
        this.#counters.suppressed++;
        return;
      }
      this.#enqueue(sanitizeAuditEvent(event, nowMs));
    } catch (err) {
      this.#logThrottled('record', 'could not record an audit event', { err });
    }
  }

  /**
   * Issues the appends of up to AUDIT_FLUSH_CHUNK queued events now, synchronously, and returns
   * without waiting for them.
   */
  flushNow(): void {
    const handover = this.handOver();
    if (!handover) return;
    let appended: Promise<boolean[]>;
    try {
      appended = this.#options.store.appendAuditEvents(handover.records, handover.maxEvents);
    } catch (err) {
      appended = Promise.reject(err);
    }
    handover.settle(appended);
  }

  /**
   * Hands up to AUDIT_FLUSH_CHUNK queued events to a store call the caller makes anyway (the hot
   * path's round trip appends them in its own command), or null when none wait. The caller passes
   * `settle` what the append answered, which events were written, or its failure; until then the
   * events count as in flight (a flush waits for them), and those not written are retried once.
   */
  handOver(): AuditHandover | null {
    if (this.#size === 0 && this.#retry.length === 0) return null;
    const batch = this.#retry.splice(0, AUDIT_FLUSH_CHUNK);
    while (batch.length < AUDIT_FLUSH_CHUNK && this.#size > 0) batch.push(this.#shift()!);
    if (this.#size === 0 && this.#retry.length === 0) this.#disarm();
    return {
      records: batch.map((item) => item.record),
      maxEvents: this.#options.maxEvents,
      settle: (appended) => {
        const settled = appended.then(
          (written) => this.#settle(batch, written, undefined),
          (err: unknown) => this.#settle(batch, [], err),
        );
        this.#inFlight.add(settled);
        void settled.finally(() => this.#inFlight.delete(settled));
      },
    };
  }

  /** Appends everything queued and waits (bounded by the write deadline) for every append in flight. */
  async flush(): Promise<void> {
    const nowMs = this.#now();
    this.#rollWindow(nowMs);
    this.#endRefusalWindows(nowMs, false);
    const chunks = Math.ceil(this.queued / AUDIT_FLUSH_CHUNK);
    for (let i = 0; i < chunks; i++) this.flushNow();
    if (this.#inFlight.size === 0) return;
    try {
      await within(Promise.allSettled([...this.#inFlight]), this.#options.writeDeadlineMs, 'audit flush');
    } catch (err) {
      this.#logThrottled('flush', 'audit events are still being written after the deadline', { err });
    }
  }

  /**
   * Stops the timers, ends every open window (so the summaries of counted refusals and suppressed
   * events are queued, never lost), and writes what is queued: a second flush gives events whose
   * append just failed their one retry. Records after close are dropped; what could not be written
   * is counted.
   */
  async close(): Promise<void> {
    this.#disarm();
    this.#stopMaintenance();
    if (this.#options.enabled && !this.#closed) {
      try {
        const nowMs = this.#now();
        this.#endRefusalWindows(nowMs, true);
        this.#rollWindow(nowMs, true);
      } catch (err) {
        this.#logThrottled('summaries', 'could not queue the audit summaries at shutdown', { err });
      }
    }
    await this.flush();
    if (this.#retry.length > 0) await this.flush();
    this.#closed = true;
    this.#disarm();
    const lost = this.queued;
    if (lost > 0) {
      this.#counters.droppedWriteFailed += lost;
      this.#options.logger.error('audit events lost at shutdown: the store did not take them', { events: lost });
    }
  }

  #enqueue(record: AuditRecord): void {
    this.#counters.recorded++;
    if (this.#size === this.#ring.length) {
      this.#shift();
      this.#counters.droppedQueueFull++;
      this.#logThrottled('overflow', 'the audit queue is full; dropping its oldest events', {
        queueMax: this.#ring.length, droppedQueueFull: this.#counters.droppedQueueFull,
      });
    }
    this.#ring[(this.#head + this.#size) % this.#ring.length] = { record, attempts: 0 };
    this.#size++;
    this.#arm();
  }

  #shift(): Queued | undefined {
    if (this.#size === 0) return undefined;
    const item = this.#ring[this.#head];
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#ring.length;
    this.#size--;
    return item;
  }

  #settle(batch: Queued[], written: boolean[], err: unknown): void {
    let failed = 0;
    batch.forEach((item, i) => {
      if (written[i] === true) {
        this.#counters.written++;
        return;
      }
      failed++;
      if (item.attempts === 0 && !this.#closed && this.#retry.length < this.#ring.length) {
        this.#retry.push({ record: item.record, attempts: 1 });
      } else {
        this.#counters.droppedWriteFailed++;
      }
    });
    if (failed === 0) return;
    this.#logThrottled('append', 'could not append audit events; retrying once with the next flush, then dropping them', {
      failed, droppedWriteFailed: this.#counters.droppedWriteFailed, err,
    });
    if (this.#retry.length > 0) this.#arm();
  }

  /** Ends an allowance window (`force`: at shutdown, early); its suppressed refusals become one event. */
  #rollWindow(nowMs: number, force = false): void {
    if (!force && nowMs - this.#window.startMs < CAPPED_WINDOW_MS) return;
    const { suppressed } = this.#window;
    this.#window = { startMs: nowMs, count: 0, suppressed: 0 };
    if (suppressed > 0) {
      this.#enqueue(sanitizeAuditEvent({ type: 'audit.suppressed', actor: 'system', reason: 'capped', count: suppressed, window_ms: CAPPED_WINDOW_MS }, nowMs));
    }
  }

  /**
   * True when this refusal is a repeat in its key's open window (or beyond the full key table):
   * counted, not recorded. False when it opens a window: the caller records it.
   */
  #countRepeat(key: string, fields: RefusalKeyFields, nowMs: number): boolean {
    const open = this.#refusals.get(key);
    if (open !== undefined) {
      if (nowMs - open.startMs < this.#aggregateWindowMs) {
        this.#countInto(open, nowMs);
        return true;
      }
      // Its window ended and the sweep has not reached it (the clock went back): summarise it now.
      this.#refusals.delete(key);
      this.#summarise(open, nowMs);
    }
    if (this.#refusals.size >= AUDIT_AGGREGATE_MAX_KEYS) {
      this.#overflow ??= { startMs: nowMs, count: 0, firstMs: nowMs, lastMs: nowMs };
      this.#countInto(this.#overflow, nowMs);
      this.#counters.overflowed++;
      this.#armSweep(nowMs);
      return true;
    }
    this.#refusals.set(key, { fields, startMs: nowMs, count: 0, firstMs: nowMs, lastMs: nowMs });
    this.#armSweep(nowMs);
    return false;
  }

  #countInto(window: { count: number; firstMs: number; lastMs: number }, nowMs: number): void {
    if (window.count === 0) window.firstMs = nowMs;
    window.count++;
    window.lastMs = nowMs;
    this.#counters.aggregated++;
  }

  /**
   * Ends the windows that are over (`all`: every one, at shutdown) and queues a summary for each
   * that counted repeats. Bounded: the table holds at most AUDIT_AGGREGATE_MAX_KEYS windows, and
   * it stops at the first still open, since windows end in the order they opened.
   */
  #endRefusalWindows(nowMs: number, all: boolean): void {
    for (const [key, open] of this.#refusals) {
      if (!all && nowMs - open.startMs < this.#aggregateWindowMs) break;
      this.#refusals.delete(key);
      this.#summarise(open, nowMs);
    }
    const overflow = this.#overflow;
    if (overflow !== null && (all || nowMs - overflow.startMs >= this.#aggregateWindowMs)) {
      this.#overflow = null;
      this.#enqueue(sanitizeAuditEvent({
        type: 'audit.suppressed', actor: 'system', reason: 'refusal_keys_full', count: overflow.count,
        first_at: new Date(overflow.firstMs).toISOString(), last_at: new Date(overflow.lastMs).toISOString(), window_ms: this.#aggregateWindowMs,
      }, nowMs));
    }
  }

  #summarise(window: RefusalWindow, nowMs: number): void {
    if (window.count === 0) return;
    this.#enqueue(sanitizeAuditEvent(refusalSummary(window.fields, window.count, window.firstMs, window.lastMs, this.#aggregateWindowMs), nowMs));
  }

  /**
   * Arms one timer for when the oldest open window ends (plus SWEEP_SLACK_MS, so windows ending
   * close together are summarised by one sweep). Summaries of refusals that stopped are then
   * written without waiting for another refusal or for shutdown.
   */
  #armSweep(nowMs: number): void {
    if (this.#sweepTimer !== null || this.#closed) return;
    let endsMs = Number.POSITIVE_INFINITY;
    for (const [, open] of this.#refusals) {
      endsMs = open.startMs + this.#aggregateWindowMs;
      break;
    }
    if (this.#overflow !== null) endsMs = Math.min(endsMs, this.#overflow.startMs + this.#aggregateWindowMs);
    if (endsMs === Number.POSITIVE_INFINITY) return;
    this.#sweepTimer = setTimeout(() => {
      this.#sweepTimer = null;
      try {
        const now = this.#now();
        this.#endRefusalWindows(now, false);
        this.#armSweep(now);
      } catch (err) {
        this.#logThrottled('sweep', 'could not end the audit refusal windows', { err });
      }
    }, Math.max(0, endsMs - nowMs) + SWEEP_SLACK_MS);
    this.#sweepTimer.unref();
  }

  /**
   * Trims events older than maxAgeMs from the trail: an append of no events, which only trims. Not
   * on the hot path: execute's appends stay one XADD (services/execute.ts).
   */
  #trimByAge(): void {
    const { maxAgeMs } = this.#options;
    if (maxAgeMs === undefined || this.#closed) return;
    let trimmed: Promise<unknown>;
    try {
      trimmed = this.#options.store.appendAuditEvents([], this.#options.maxEvents, maxAgeMs);
    } catch (err) {
      trimmed = Promise.reject(err);
    }
    const settled = trimmed.then(
      () => undefined,
      (err: unknown) => this.#logThrottled('trim', 'could not trim the audit trail by age; the next minute tries again', { err }),
    );
    this.#inFlight.add(settled);
    void settled.finally(() => this.#inFlight.delete(settled));
  }

  #stopMaintenance(): void {
    if (this.#sweepTimer !== null) clearTimeout(this.#sweepTimer);
    this.#sweepTimer = null;
    if (this.#ageTimer !== null) clearInterval(this.#ageTimer);
    this.#ageTimer = null;
  }

  #arm(): void {
    if (this.#timer !== null || this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, this.#options.flushMs);
    // Shutdown flushes explicitly; the timer alone must not keep a finished process alive.
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** At most one line per kind per LOG_EVERY_MS (the logger's LogThrottle), saying how many it stood for. */
  #logThrottled(kind: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(kind);
    if (suppressed === null) return;
    this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }
}
