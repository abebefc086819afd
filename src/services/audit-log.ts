// The audit trail's writer (issue 17 point 3): services record events here and never wait for
// them. Events wait in a bounded in-process queue and are appended to the store
// - by the execute hot path, right before its one Redis round trip and in the same tick, so
//   ioredis's auto-pipelining carries the appends in that round trip (no round trip of their own);
// - otherwise by an idle timer, AUDIT_FLUSH_MS after the first event that nothing carried;
// - and at shutdown (close).
// Recording never blocks or refuses a request. A full queue drops its oldest event; a failed append
// is retried once with the next flush, then dropped; both are counted and logged at most once per
// LOG_EVERY_MS. The price is durability: a crash loses what is queued, at most AUDIT_FLUSH_MS of
// events (docs/stances.md, SECURITY.md).
import { sanitizeAuditEvent, type AuditEventInput, type AuditRecord } from '../domain/audit.ts';
import { within } from '../deadline.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import type { Store } from '../store/store.ts';

export interface AuditLogOptions {
  /** The store itself, not the fail-closed wrapper: a failed append is logged here, never a 503. */
  store: Store;
  enabled: boolean;
  maxEvents: number;
  flushMs: number;
  queueMax: number;
  /** How long a flush waits for its appends (the Redis command timeout and a margin). */
  writeDeadlineMs: number;
  logger: Logger;
  /** Wall clock for `at` (default Date.now): when it happened, whatever clock the services decide with. */
  now?: () => number;
}

/** What the log has done since it started, for metrics and tests. */
export interface AuditCounters {
  recorded: number;
  written: number;
  /** Dropped because the queue was full (the oldest go first). */
  droppedQueueFull: number;
  /** Dropped after a second failed append. */
  droppedWriteFailed: number;
  /** Capped events beyond the per-window allowance (summarised by `audit.suppressed`). */
  suppressed: number;
}

/** Appends issued by one flush at most, so the request that carries them never issues thousands. */
export const AUDIT_FLUSH_CHUNK = 256;
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
  readonly #counters: AuditCounters = { recorded: 0, written: 0, droppedQueueFull: 0, droppedWriteFailed: 0, suppressed: 0 };
  readonly #throttle: LogThrottle;
  #window = { startMs: 0, count: 0, suppressed: 0 };

  constructor(options: AuditLogOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#throttle = new LogThrottle(LOG_EVERY_MS, this.#now);
    this.#ring = new Array<Queued | undefined>(Math.max(1, options.queueMax));
  }

  get counters(): Readonly<AuditCounters> {
    return { ...this.#counters };
  }

  /** Events waiting to be appended (queued and to retry). */
  get queued(): number {
    return this.#size + this.#retry.length;
  }

  /**
   * Queues an event; never throws, never waits. `capped`: an event anyone can cause at volume, so
   * it counts against the per-window allowance (CAPPED_EVENTS_PER_WINDOW).
   */
  record(event: AuditEventInput, options: { capped?: boolean } = {}): void {
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
      if (options.capped && ++this.#window.count > CAPPED_EVENTS_PER_WINDOW) {
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
   * without waiting for them. The hot path calls it in the tick of its round trip.
   */
  flushNow(): void {
    if (this.#size === 0 && this.#retry.length === 0) return;
    const batch = this.#retry.splice(0, AUDIT_FLUSH_CHUNK);
    while (batch.length < AUDIT_FLUSH_CHUNK && this.#size > 0) batch.push(this.#shift()!);
    if (this.#size === 0 && this.#retry.length === 0) this.#disarm();
    let appended: Promise<boolean[]>;
    try {
      appended = this.#options.store.appendAuditEvents(batch.map((item) => item.record), this.#options.maxEvents);
    } catch (err) {
      appended = Promise.reject(err);
    }
    const settled = appended.then(
      (written) => this.#settle(batch, written, undefined),
      (err: unknown) => this.#settle(batch, [], err),
    );
    this.#inFlight.add(settled);
    void settled.finally(() => this.#inFlight.delete(settled));
  }

  /** Appends everything queued and waits (bounded by the write deadline) for every append in flight. */
  async flush(): Promise<void> {
    this.#rollWindow(this.#now());
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
   * Stops the timer and writes what is queued: a second flush gives events whose append just
   * failed their one retry. Records after close are dropped; what could not be written is counted.
   */
  async close(): Promise<void> {
    this.#disarm();
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

  /** Ends an allowance window; its suppressed refusals become one event in the next. */
  #rollWindow(nowMs: number): void {
    if (nowMs - this.#window.startMs < CAPPED_WINDOW_MS) return;
    const { suppressed } = this.#window;
    this.#window = { startMs: nowMs, count: 0, suppressed: 0 };
    if (suppressed > 0) {
      this.#enqueue(sanitizeAuditEvent({ type: 'audit.suppressed', actor: 'system', count: suppressed, window_ms: CAPPED_WINDOW_MS }, nowMs));
    }
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
