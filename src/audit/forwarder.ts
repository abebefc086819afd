// Forwards the audit trail to a webhook (AUDIT_WEBHOOK_URL): batches of events
// POSTed as `{events: [...]}`, each event with its id, so a receiver can also drop a repeat.
//
// Every instance runs one forwarder, and they share the store's forwarding group (a Redis
// consumer group; the memory store's in-process equivalent), so each event is handed to one of
// them at a time and acknowledged only after a 2xx. A failed delivery is retried with exponential
// backoff and jitter (1 s doubling to 60 s) by the forwarder that holds it, which renews its hold
// at least every FORWARDER_TIMING.renewEveryMs; events a forwarder held for
// FORWARDER_TIMING.reclaimIdleMs without renewing (it died) are taken over by another, and a
// forwarder that stops gives its events back at once. Nothing here runs on a request's path: it
// polls on its own timer (every FORWARDER_TIMING.pollMs when idle).
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { webhookBackoffMs, type AuditEvent } from './events.ts';
import { within } from '../common/deadline.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import type { AuditRecords } from '../store/store.ts';

/** The forwarder's timings. */
const FORWARDER_TIMING = {
  /** How often an idle forwarder looks for events. */
  pollMs: 1000,
  /** Held this long without a renewal, an event is presumed abandoned (its forwarder died). */
  reclaimIdleMs: 60_000,
  /**
   * A holder renews at least this often, also while it waits out a backoff; one POST (at most
   * AUDIT_WEBHOOK_TIMEOUT_MS, itself at most 30 s) plus this stays well inside `reclaimIdleMs`.
   */
  renewEveryMs: 10_000,
  /**
   * Forwarders that held nothing and were not seen for an hour are forgotten (every restart comes
   * back under a new name), looked for every ten minutes. A live forwarder polls every second.
   */
  forgetIdleConsumersMs: 3_600_000,
  forgetEveryMs: 600_000,
  /** How long closing waits for the store to take back what this forwarder held. */
  closeDeadlineMs: 5000,
  /** A receiver that keeps failing is logged about once in this long, however often it is retried. */
  logEveryMs: 10_000,
} as const;

interface AuditForwarderOptions {
  /** The store itself (not the fail-closed wrapper): failures are logged and retried here. */
  store: AuditRecords;
  url: string;
  /** Sent as `Authorization: Bearer <token>` when set. */
  token?: string | undefined;
  timeoutMs: number;
  batchSize: number;
  logger: Logger;
  pollMs?: number;
  random?: () => number;
  now?: () => number;
}

interface ForwarderCounters {
  delivered: number;
  failedAttempts: number;
}

export class AuditForwarder {
  readonly #options: AuditForwarderOptions;
  readonly #consumer = `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`.slice(0, 120);
  readonly #now: () => number;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<void> | null = null;
  #closed = false;
  #abort: AbortController | null = null;
  /** The events this forwarder holds, until acknowledged. */
  #batch: AuditEvent[] | null = null;
  /** The held batch was answered 2xx and only waits for its acknowledgement. */
  #delivered = false;
  #failures = 0;
  #nextAttemptAtMs = 0;
  #renewedAtMs = 0;
  #forgotAtMs = Number.NEGATIVE_INFINITY;
  readonly #counters: ForwarderCounters = { delivered: 0, failedAttempts: 0 };
  readonly #throttle: LogThrottle;

  constructor(options: AuditForwarderOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#throttle = new LogThrottle(FORWARDER_TIMING.logEveryMs, this.#now);
  }

  get consumer(): string {
    return this.#consumer;
  }

  get counters(): Readonly<ForwarderCounters> {
    return { ...this.#counters };
  }

  start(): void {
    this.#schedule(0);
  }

  /** Stops polling, abandons a delivery in flight, and gives back (or acknowledges) what it held. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#abort?.abort();
    await this.#running?.catch(() => {});
    const batch = this.#batch;
    if (batch === null) return;
    this.#batch = null;
    const ids = batch.map((event) => event.id);
    const store = this.#options.store;
    const handBack = this.#delivered ? store.acknowledgeAuditEvents(ids) : store.releaseAuditClaims(this.#consumer, ids);
    await within(handBack, FORWARDER_TIMING.closeDeadlineMs, 'giving back audit events').catch((err: unknown) => {
      this.#options.logger.warn('could not give back the audit events this instance held; another takes them over after the reclaim time', { events: ids.length, reclaimAfterMs: FORWARDER_TIMING.reclaimIdleMs, err });
    });
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#running = this.#tick().finally(() => {
        this.#running = null;
      });
    }, delayMs);
    this.#timer.unref();
  }

  /** One step: claim a batch if none is held, then deliver or wait; schedules the next step. */
  async #tick(): Promise<void> {
    let delayMs = this.#options.pollMs ?? FORWARDER_TIMING.pollMs;
    try {
      if (this.#now() - this.#forgotAtMs >= FORWARDER_TIMING.forgetEveryMs) {
        this.#forgotAtMs = this.#now();
        await this.#options.store.forgetIdleAuditConsumers(FORWARDER_TIMING.forgetIdleConsumersMs);
      }
      if (this.#batch === null) {
        const events = await this.#options.store.claimAuditEvents({ consumer: this.#consumer, count: this.#options.batchSize, reclaimIdleMs: FORWARDER_TIMING.reclaimIdleMs });
        if (events.length > 0) {
          this.#batch = events;
          this.#delivered = false;
          this.#failures = 0;
          this.#nextAttemptAtMs = 0;
          this.#renewedAtMs = this.#now();
        }
      }
      if (this.#batch !== null) delayMs = await this.#advance(this.#batch);
    } catch (err) {
      this.#logThrottled('store', 'the audit forwarder cannot reach the store; it tries again', { err });
    }
    this.#schedule(delayMs);
  }

  /** Moves the held batch on by one step; answers how long to wait before the next. */
  async #advance(batch: AuditEvent[]): Promise<number> {
    const nowMs = this.#now();
    if (!this.#delivered) {
      if (nowMs - this.#renewedAtMs >= FORWARDER_TIMING.renewEveryMs || nowMs < this.#nextAttemptAtMs) {
        if (!(await this.#renew(batch))) return 0;
      }
      if (nowMs < this.#nextAttemptAtMs) return Math.min(FORWARDER_TIMING.renewEveryMs, this.#nextAttemptAtMs - nowMs);
      if (!(await this.#post(this.#batch!))) {
        this.#failures++;
        this.#counters.failedAttempts++;
        const waitMs = webhookBackoffMs(this.#failures, (this.#options.random ?? Math.random)());
        this.#nextAttemptAtMs = this.#now() + waitMs;
        return Math.min(FORWARDER_TIMING.renewEveryMs, waitMs);
      }
      this.#delivered = true;
      this.#counters.delivered += this.#batch!.length;
    }
    // A failed acknowledgement throws and is tried again on the next step, without a new POST.
    await this.#options.store.acknowledgeAuditEvents(this.#batch!.map((event) => event.id));
    const full = this.#batch!.length >= this.#options.batchSize;
    this.#batch = null;
    // A full batch means more may be waiting: go on at once.
    return full ? 0 : (this.#options.pollMs ?? FORWARDER_TIMING.pollMs);
  }

  /** Keeps the hold on what is still ours; false when nothing of the batch is left to deliver. */
  async #renew(batch: AuditEvent[]): Promise<boolean> {
    const kept = new Set(await this.#options.store.renewAuditClaims(this.#consumer, batch.map((event) => event.id)));
    this.#renewedAtMs = this.#now();
    const still = batch.filter((event) => kept.has(event.id));
    this.#batch = still.length > 0 ? still : null;
    return this.#batch !== null;
  }

  /** One delivery attempt: true on a 2xx within the timeout. Redirects are refused (the trail goes where it was configured to). */
  async #post(events: AuditEvent[]): Promise<boolean> {
    const abort = new AbortController();
    this.#abort = abort;
    const timer = setTimeout(() => abort.abort(), this.#options.timeoutMs);
    try {
      const response = await fetch(this.#options.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.#options.token ? { authorization: `Bearer ${this.#options.token}` } : {}) },
        body: JSON.stringify({ events }),
        redirect: 'error',
        signal: abort.signal,
      });
      await response.body?.cancel().catch(() => {});
      if (response.ok) return true;
      this.#logThrottled('status', 'the audit webhook refused a batch; retrying with backoff', { status: response.status, events: events.length });
      return false;
    } catch (err) {
      if (!this.#closed) this.#logThrottled('post', 'the audit webhook could not be reached; retrying with backoff', { events: events.length, error: (err as Error).message });
      return false;
    } finally {
      clearTimeout(timer);
      this.#abort = null;
    }
  }

  /** At most one line per kind per FORWARDER_TIMING.logEveryMs (the logger's LogThrottle), saying how many it stood for. */
  #logThrottled(kind: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(kind);
    if (suppressed === null) return;
    this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }
}
