// What every notifier shares (the signed webhook, webhook.ts; the approval mail, mail.ts): a
// bounded queue that a caller fills without waiting, and one loop that delivers what waits, oldest
// first and one at a time, retrying with backoff, so a slow or failing receiver never slows a
// request and never gets more than one connection from us. A notifier supplies only how one
// attempt is made and what its outcome means; the queue counts, drops, logs and stops.
import { describeThrown } from '../common/thrown.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import { retryDelayMs } from './backoff.ts';

/** How one attempt ended: delivered, worth another try, or refused for good. */
export type AttemptOutcome = 'delivered' | 'retry' | 'refused';

export interface AttemptResult {
  outcome: AttemptOutcome;
  /** A receiver's `Retry-After` in seconds, when it gave one. */
  retryAfter?: string | null;
  /** What the log may say of the failure (never a secret or the content). */
  fields?: Record<string, unknown>;
}

export interface DeliveryCounters {
  /** Items waiting now, the one being delivered (or waiting out its backoff) included. */
  queued: number;
  delivered: number;
  /** Attempts that did not deliver, whether or not they were retried. */
  failedAttempts: number;
  /** Items given up on: queue full, attempts exhausted, refused, unsendable, or left at close. */
  dropped: number;
}

export interface DeliveryQueueOptions<T> {
  /** What an item is, for log lines: 'webhook notification', 'approval mail'. */
  itemName: string;
  /** Where items go, for log lines, without anything secret (scheme, host and port). */
  origin: string;
  maxAttempts: number;
  /** The ceiling of the first retry's delay; it doubles with each failure, up to backoffMaxMs. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Items waiting at most, besides the one being delivered; beyond it the oldest is dropped. */
  queueMax: number;
  logger: Logger;
  random?: () => number;
  now?: () => number;
  /** One attempt at `item`; aborted by `signal` when the queue stops. Must not throw. */
  attempt(item: T, signal: AbortSignal): Promise<AttemptResult>;
  /** What the log may say to tell an item apart (never its content). */
  describe?(item: T): Record<string, unknown>;
  /** Called once when the queue stops, after the attempt in flight was aborted (closes a transport). */
  onStop?(): void;
}

/** The settings every notifier takes for its queue. */
export type DeliverySettings = Pick<DeliveryQueueOptions<unknown>, 'maxAttempts' | 'backoffBaseMs' | 'backoffMaxMs' | 'queueMax' | 'logger' | 'random'>;

/** A failure that repeats on every item (a receiver down) is logged once per this long for each kind. */
const LOG_EVERY_MS = 60_000;

export class DeliveryQueue<T> {
  readonly #options: DeliveryQueueOptions<T>;
  readonly #random: () => number;
  readonly #throttle: LogThrottle;
  /** Waiting items, oldest first; at most queueMax. */
  readonly #waiting: T[] = [];
  /** The item being delivered or waiting out its backoff. */
  #current: { item: T } | null = null;
  #loop: Promise<void> | null = null;
  #closing = false;
  #stopped = false;
  /** Aborts the attempt in flight and ends a backoff wait when the queue stops. */
  readonly #stop = new AbortController();
  readonly #counters = { delivered: 0, failedAttempts: 0, dropped: 0 };

  constructor(options: DeliveryQueueOptions<T>) {
    for (const name of ['maxAttempts', 'queueMax'] as const) {
      if (!Number.isSafeInteger(options[name]) || options[name] < 1) throw new RangeError(`${name} must be a whole number, 1 or more`);
    }
    if (!Number.isSafeInteger(options.backoffBaseMs) || options.backoffBaseMs < 0) throw new RangeError('backoffBaseMs must be a whole number of ms, 0 or more');
    if (!Number.isSafeInteger(options.backoffMaxMs) || options.backoffMaxMs < options.backoffBaseMs) {
      throw new RangeError('backoffMaxMs must be a whole number of ms, at least backoffBaseMs');
    }
    this.#options = options;
    this.#random = options.random ?? Math.random;
    this.#throttle = new LogThrottle(LOG_EVERY_MS, options.now ?? Date.now);
  }

  get counters(): DeliveryCounters {
    return { queued: this.#waiting.length + (this.#current === null ? 0 : 1), ...this.#counters };
  }

  /** True once close() began: an item offered now is dropped. */
  get closing(): boolean {
    return this.#closing;
  }

  /**
   * Queues `item`; delivery starts on a later turn of the event loop, so none of it runs on the
   * caller's path. A full queue drops its oldest waiting item: the newest says most.
   */
  enqueue(item: T): void {
    if (this.#closing) {
      this.drop('closed', `a ${this.#options.itemName} came after the sender began closing; it is dropped`, item);
      return;
    }
    this.#waiting.push(item);
    // One over at most, since every push checks.
    if (this.#waiting.length > this.#options.queueMax) {
      const oldest = this.#waiting.shift()!;
      this.drop('queue-full', `the queue is full; the oldest waiting ${this.#options.itemName} is dropped`, oldest, { queueMax: this.#options.queueMax });
    }
    this.#startLoop();
  }

  /** Counts an item given up on (or one that could not even be queued: `item` null) and logs it, throttled. */
  drop(kind: string, message: string, item: T | null, fields: Record<string, unknown> = {}): void {
    this.#counters.dropped++;
    this.logThrottled(kind, message, { origin: this.#options.origin, ...(item === null ? {} : this.#describe(item)), ...fields });
  }

  /** At most one line per kind per LOG_EVERY_MS, saying how many it stood for. */
  logThrottled(kind: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(kind);
    if (suppressed === null) return;
    this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }

  /**
   * Stops taking items, waits up to `deadlineMs` for those queued to be delivered or given up, then
   * stops: an attempt in flight is aborted, a backoff wait ends, and whatever is left is counted as
   * dropped. The counters are final when the promise resolves.
   */
  async close(deadlineMs: number): Promise<void> {
    this.#closing = true;
    if (this.#loop !== null) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.max(0, deadlineMs));
      });
      try {
        await Promise.race([this.#loop, late]);
      } finally {
        clearTimeout(timer);
      }
    }
    if (this.#stopped) return;
    this.#stopped = true;
    const left = this.#waiting.length + (this.#current === null ? 0 : 1);
    this.#waiting.length = 0;
    this.#current = null;
    this.#stop.abort();
    this.#options.onStop?.();
    if (left > 0) {
      this.#counters.dropped += left;
      this.#options.logger.warn(`the sender stopped with ${this.#options.itemName}s undelivered; they are dropped`, { origin: this.#options.origin, dropped: left });
    }
  }

  #describe(item: T): Record<string, unknown> {
    try {
      return this.#options.describe?.(item) ?? {};
    } catch {
      return {};
    }
  }

  #startLoop(): void {
    if (this.#loop !== null) return;
    this.#loop = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.#deliverAll())
      .catch((err: unknown) => {
        // #deliverAll catches what it expects; this is the last line so no rejection goes unhandled.
        this.logThrottled('loop', `the ${this.#options.itemName} delivery loop failed`, { error: describeThrown(err) });
      })
      .finally(() => {
        this.#loop = null;
        // An enqueue between the loop's last look at the queue and here would otherwise wait for the next one.
        if (this.#waiting.length > 0 && !this.#stopped) this.#startLoop();
      });
  }

  /** Delivers waiting items one at a time, oldest first; bounded by the queue and maxAttempts each. */
  async #deliverAll(): Promise<void> {
    while (!this.#stopped) {
      if (this.#waiting.length === 0) return;
      const item = this.#waiting.shift()!;
      this.#current = { item };
      await this.#deliver(item);
      if (!this.#stopped) this.#current = null;
    }
  }

  /** Up to maxAttempts attempts at one item, with backoff between them. */
  async #deliver(item: T): Promise<void> {
    const { maxAttempts, itemName } = this.#options;
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      const result = await this.#options.attempt(item, this.#stop.signal);
      // close() has counted this item as dropped already; nothing more is said of it.
      if (this.#stopped) return;
      if (result.outcome === 'delivered') {
        this.#counters.delivered++;
        return;
      }
      this.#counters.failedAttempts++;
      const fields = { ...result.fields, attempts: attempt };
      if (result.outcome === 'refused') {
        this.drop('refused', `a ${itemName} was refused; it is not retried`, item, fields);
        return;
      }
      if (attempt === maxAttempts) {
        this.drop('exhausted', `a ${itemName} failed on every attempt; it is dropped`, item, fields);
        return;
      }
      this.logThrottled('retry', `a ${itemName} could not be delivered; retrying with backoff`, { origin: this.#options.origin, ...fields });
      const backoff = { baseMs: this.#options.backoffBaseMs, maxMs: this.#options.backoffMaxMs };
      await this.#sleep(retryDelayMs(attempt, this.#random(), backoff, result.retryAfter ?? null));
      if (this.#stopped) return;
    }
  }

  /** Waits `ms`, or less if the queue stops meanwhile. */
  #sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.#stopped) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#stop.signal.removeEventListener('abort', done);
        resolve();
      };
      // Unref'd: a backoff wait alone should not keep a process from exiting; close() is the orderly way out.
      const timer = setTimeout(done, ms).unref();
      this.#stop.signal.addEventListener('abort', done, { once: true });
    });
  }
}
