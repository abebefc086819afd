// Signed notifications POSTed to an operator's webhook, off the request path: a caller queues a
// notification with send(), which returns at once, and one delivery loop POSTs them in order, one
// at a time, retrying with backoff, so a slow or failing receiver never slows a request down and
// never gets more than one connection from us.
//
// What a receiver gets, and how it checks that the notification came from us:
//
//   POST <url>
//   Content-Type: application/json
//   X-Agentgate-Timestamp: <unix time in whole seconds when this attempt was signed>
//   X-Agentgate-Signature: v1=<lowercase hex of HMAC-SHA256(secret, "<timestamp>.<raw body>")>
//
//   {"id":"…","type":"approval.waiting","at":"<ISO time>","data":{…}}
//
// To verify, a receiver takes the body exactly as received (the raw bytes, before any JSON
// parsing), computes HMAC-SHA256 with the shared secret over the UTF-8 bytes of the timestamp
// header, a full stop, and the body, and compares it in constant time with the hex after `v1=`. It
// refuses a timestamp further than its tolerance (five minutes is usual) from its own clock in
// either direction, so a captured request cannot be replayed later; within the tolerance it drops a
// repeated `id`, which is also how it discards the repeats our retries can cause (a 2xx we never
// saw means we send the same notification again). verifyWebhookSignature below does all of this
// but the `id` check. Each attempt is signed afresh, so a retry after a long backoff still carries
// a current timestamp.
//
// Answers: a 2xx is delivered. 408, 429, 5xx, network errors and timeouts are retried with
// exponential backoff and full jitter, honouring a `Retry-After` in seconds on 429 and 503 up to
// backoffMaxMs; after maxAttempts the notification is dropped. Any other answer (a 3xx, since
// redirects are never followed, and every other 4xx) is a failure that repeating the same request
// would not mend, so the notification is dropped at once. Every drop is counted and logged (at
// most once per LOG_EVERY_MS for each kind); logs never carry the secret, the body, or the URL's
// path and query, which for many webhook services hold a token.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { describeThrown } from '../common/thrown.ts';
import { LogThrottle, type Logger } from '../logger.ts';

export interface WebhookNotification {
  /** Unique for each notification, so a receiver can drop the repeats retries may cause. */
  id: string;
  /** What happened, e.g. 'approval.waiting'. */
  type: string;
  /** When it happened, as an ISO time. */
  at: string;
  data: Record<string, unknown>;
}

export interface WebhookSenderOptions {
  /** An http: or https: URL. */
  url: string;
  /** The HMAC key shared with the receiver; at least MIN_SECRET_CHARS characters. */
  secret: string;
  /** How long one attempt may take, from connecting until the answer's status arrives. */
  timeoutMs: number;
  /** Attempts per notification, the first included, before it is dropped. */
  maxAttempts: number;
  /** The ceiling of the first retry's delay; it doubles with each failure, up to backoffMaxMs. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Notifications waiting at most, besides the one being delivered; beyond it the oldest is dropped. */
  queueMax: number;
  logger: Logger;
  now?: () => number;
  random?: () => number;
  fetch?: typeof fetch;
}

export interface WebhookCounters {
  /** Notifications waiting now, the one being delivered (or waiting out its backoff) included. */
  queued: number;
  delivered: number;
  /** Attempts that did not end in a 2xx, whether or not they were retried. */
  failedAttempts: number;
  /** Notifications given up on: queue full, attempts exhausted, refused, unsendable, or left at close. */
  dropped: number;
}

/** A shorter secret is refused: HMAC-SHA256 keys should carry at least 256 bits of guesswork. */
export const MIN_SECRET_CHARS = 32;

/**
 * A body larger than this is dropped rather than sent: notifications are meant to be small (an
 * approval waits, here is where), and a receiver should not have to accept megabytes to read them.
 */
export const MAX_BODY_BYTES = 64 * 1024;

/** A failure that repeats on every notification (a receiver down) is logged once per this long for each kind. */
const LOG_EVERY_MS = 60_000;

/** A timestamp header longer than this many digits is refused before it is parsed (well past year 9999). */
const MAX_TIMESTAMP_DIGITS = 12;

const SIGNATURE_PATTERN = /^v1=([0-9a-f]{64})$/;

/** The two headers that sign `body` at `timestampSeconds`; see the module header for the scheme. */
export function signatureHeaders(secret: string, body: string, timestampSeconds: number): Record<string, string> {
  requireSecret(secret);
  if (!Number.isSafeInteger(timestampSeconds) || timestampSeconds < 0) {
    throw new RangeError('the signature timestamp must be a whole, non-negative number of seconds');
  }
  const timestamp = String(timestampSeconds);
  return {
    'X-Agentgate-Timestamp': timestamp,
    'X-Agentgate-Signature': `v1=${hmacOf(secret, timestamp, body).toString('hex')}`,
  };
}

/**
 * True when `headers` sign `body` with `secret` and the timestamp lies within `toleranceSeconds` of
 * `nowSeconds`, before or after. The comparison takes the same time wherever the signatures differ,
 * so a forger learns nothing from how long a refusal took. `body` must be the raw body as received.
 */
export function verifyWebhookSignature(
  secret: string,
  body: string,
  headers: { timestamp: string; signature: string },
  nowSeconds: number,
  toleranceSeconds: number,
): boolean {
  requireSecret(secret);
  // Cheap checks first: a malformed or stale header is refused before any hashing.
  if (typeof headers.timestamp !== 'string' || typeof headers.signature !== 'string') return false;
  if (headers.timestamp.length > MAX_TIMESTAMP_DIGITS || !/^\d+$/.test(headers.timestamp)) return false;
  if (!Number.isFinite(nowSeconds) || !Number.isFinite(toleranceSeconds) || toleranceSeconds < 0) return false;
  if (Math.abs(nowSeconds - Number(headers.timestamp)) > toleranceSeconds) return false;
  const match = SIGNATURE_PATTERN.exec(headers.signature);
  if (match === null) return false;
  const given = Buffer.from(match[1]!, 'hex');
  // The hex in the header is the timestamp's text as sent, so a timestamp of "0123" signs "0123.".
  return timingSafeEqual(given, hmacOf(secret, headers.timestamp, body));
}

function hmacOf(secret: string, timestamp: string, body: string): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`, 'utf8').digest();
}

function requireSecret(secret: string): void {
  if (typeof secret !== 'string' || secret.length < MIN_SECRET_CHARS) {
    throw new RangeError(`the webhook secret must be at least ${MIN_SECRET_CHARS} characters`);
  }
}

/** What an answer's status means for the notification. */
export type StatusOutcome = 'delivered' | 'retry' | 'refused';

/**
 * 2xx delivered; 408, 429 and 5xx may pass, so they are retried; anything else (3xx, other 4xx)
 * would be answered the same way again, so it is not.
 */
export function outcomeOfStatus(status: number): StatusOutcome {
  if (status >= 200 && status < 300) return 'delivered';
  if (status === 408 || status === 429 || (status >= 500 && status < 600)) return 'retry';
  return 'refused';
}

/**
 * How long to wait after the `failures`-th failed attempt (1 for the first): full jitter, a uniform
 * draw (`random` in [0, 1)) below a ceiling that starts at backoffBaseMs and doubles, capped at
 * backoffMaxMs. A receiver's `Retry-After` in seconds (given only for 429 and 503) raises the wait
 * to what it asked for, but never past backoffMaxMs, so a receiver cannot park the queue for a day.
 */
export function retryDelayMs(
  failures: number,
  random: number,
  backoff: { baseMs: number; maxMs: number },
  retryAfter: string | null,
): number {
  // The exponent is capped so the doubling cannot overflow to Infinity for a large attempt count.
  const exponent = Math.min(Math.max(failures, 1) - 1, 30);
  const ceilingMs = Math.min(backoff.maxMs, backoff.baseMs * 2 ** exponent);
  const jitteredMs = Math.floor(ceilingMs * Math.min(Math.max(random, 0), 1));
  const askedMs = retryAfterMs(retryAfter);
  return askedMs === null ? jitteredMs : Math.max(jitteredMs, Math.min(askedMs, backoff.maxMs));
}

/** `Retry-After` as delay seconds, in ms; null for an HTTP date, garbage, or no header. */
function retryAfterMs(value: string | null): number | null {
  if (value === null) return null;
  const trimmed = value.trim();
  // Ten digits is over 300 years; anything longer is not a delay we would honour anyway.
  if (trimmed.length === 0 || trimmed.length > 10 || !/^\d+$/.test(trimmed)) return null;
  return Number(trimmed) * 1000;
}

interface Pending {
  notification: WebhookNotification;
  /** Serialised once, at send(), so a caller changing `data` afterwards changes nothing sent. */
  body: string;
}

/** The result of one attempt. */
type Attempt = { outcome: StatusOutcome; status: number | null; retryAfter: string | null };

export class WebhookSender {
  readonly #options: WebhookSenderOptions;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #fetch: typeof fetch;
  /** Scheme, host and port only: the path and query of a webhook URL often hold a token. */
  readonly #origin: string;
  readonly #throttle: LogThrottle;
  /** Waiting notifications, oldest first; at most queueMax. */
  readonly #waiting: Pending[] = [];
  /** The notification being delivered or waiting out its backoff. */
  #current: Pending | null = null;
  #loop: Promise<void> | null = null;
  #closing = false;
  #stopped = false;
  /** Aborts the attempt in flight and ends a backoff wait when the sender stops. */
  readonly #stop = new AbortController();
  readonly #counters = { delivered: 0, failedAttempts: 0, dropped: 0 };

  constructor(options: WebhookSenderOptions) {
    const url = new URL(options.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new RangeError('the webhook URL must be http: or https:');
    }
    requireSecret(options.secret);
    requirePositiveInteger('timeoutMs', options.timeoutMs);
    requirePositiveInteger('maxAttempts', options.maxAttempts);
    requirePositiveInteger('queueMax', options.queueMax);
    if (!Number.isSafeInteger(options.backoffBaseMs) || options.backoffBaseMs < 0) {
      throw new RangeError('backoffBaseMs must be a whole number of ms, 0 or more');
    }
    if (!Number.isSafeInteger(options.backoffMaxMs) || options.backoffMaxMs < options.backoffBaseMs) {
      throw new RangeError('backoffMaxMs must be a whole number of ms, at least backoffBaseMs');
    }
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#random = options.random ?? Math.random;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#origin = url.origin;
    this.#throttle = new LogThrottle(LOG_EVERY_MS, this.#now);
  }

  get counters(): WebhookCounters {
    return { queued: this.#waiting.length + (this.#current === null ? 0 : 1), ...this.#counters };
  }

  /**
   * Queues the notification; delivery starts on a later turn of the event loop, so nothing of it
   * runs on the caller's path. Never throws: a notification that cannot be sent is dropped,
   * counted and logged, because a failed notification must not fail the request that raised it.
   */
  send(notification: WebhookNotification): void {
    try {
      if (this.#closing) {
        this.#drop('closed', 'a webhook notification was sent after the sender began closing; it is dropped', notification);
        return;
      }
      let body: string;
      try {
        body = JSON.stringify(notification);
      } catch (err) {
        this.#drop('unserialisable', 'a webhook notification could not be written as JSON; it is dropped', notification, { error: describeThrown(err) });
        return;
      }
      if (Buffer.byteLength(body, 'utf8') > MAX_BODY_BYTES) {
        this.#drop('too-large', 'a webhook notification is larger than the limit; it is dropped', notification, { maxBytes: MAX_BODY_BYTES });
        return;
      }
      this.#waiting.push({ notification, body });
      // One over at most, since every push checks: the oldest waiting goes, as the newest says most.
      if (this.#waiting.length > this.#options.queueMax) {
        const oldest = this.#waiting.shift()!;
        this.#drop('queue-full', 'the webhook queue is full; the oldest waiting notification is dropped', oldest.notification, { queueMax: this.#options.queueMax });
      }
      this.#startLoop();
    } catch (err) {
      // Nothing above should throw (a notification with a throwing getter could); send must not.
      this.#counters.dropped++;
      this.#logThrottled('send', 'a webhook notification could not be queued; it is dropped', { error: describeThrown(err) });
    }
  }

  /**
   * Stops taking notifications, waits up to `deadlineMs` for those queued to be delivered or given
   * up, then stops: an attempt in flight is aborted, a backoff wait ends, and whatever is left is
   * counted as dropped. The counters are final when the promise resolves.
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
    if (left > 0) {
      this.#counters.dropped += left;
      this.#options.logger.warn('the webhook sender stopped with notifications undelivered; they are dropped', { origin: this.#origin, dropped: left });
    }
  }

  #startLoop(): void {
    if (this.#loop !== null) return;
    this.#loop = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.#deliverAll())
      .catch((err: unknown) => {
        // #deliverAll catches what it expects; this is the last line so no rejection goes unhandled.
        this.#logThrottled('loop', 'the webhook delivery loop failed', { error: describeThrown(err) });
      })
      .finally(() => {
        this.#loop = null;
        // A send() between the loop's last look at the queue and here would otherwise wait for the next send.
        if (this.#waiting.length > 0 && !this.#stopped) this.#startLoop();
      });
  }

  /**
   * Delivers waiting notifications one at a time, oldest first. Bounded by what is queued: each
   * turn takes one notification off the queue, and each notification has at most maxAttempts.
   */
  async #deliverAll(): Promise<void> {
    while (!this.#stopped) {
      const next = this.#waiting.shift();
      if (next === undefined) return;
      this.#current = next;
      await this.#deliver(next);
      if (!this.#stopped) this.#current = null;
    }
  }

  /** Up to maxAttempts attempts at one notification, with backoff between them. */
  async #deliver(pending: Pending): Promise<void> {
    const { notification } = pending;
    for (let attempt = 1; attempt <= this.#options.maxAttempts; attempt++) {
      const result = await this.#attempt(pending.body);
      // close() has counted this notification as dropped already; nothing more is said of it.
      if (this.#stopped) return;
      if (result.outcome === 'delivered') {
        this.#counters.delivered++;
        return;
      }
      this.#counters.failedAttempts++;
      if (result.outcome === 'refused') {
        this.#drop('refused', 'the webhook receiver refused a notification; it is not retried', notification, { status: result.status, attempts: attempt });
        return;
      }
      if (attempt === this.#options.maxAttempts) {
        this.#drop('exhausted', 'a webhook notification failed on every attempt; it is dropped', notification, { status: result.status, attempts: attempt });
        return;
      }
      const backoff = { baseMs: this.#options.backoffBaseMs, maxMs: this.#options.backoffMaxMs };
      await this.#sleep(retryDelayMs(attempt, this.#random(), backoff, result.retryAfter));
      if (this.#stopped) return;
    }
  }

  /** One POST, signed now, bounded by timeoutMs; never throws. */
  async #attempt(body: string): Promise<Attempt> {
    const signal = AbortSignal.any([AbortSignal.timeout(this.#options.timeoutMs), this.#stop.signal]);
    try {
      const response = await this.#fetch(this.#options.url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          ...signatureHeaders(this.#options.secret, body, Math.floor(this.#now() / 1000)),
        },
        body,
        // A redirect would send a signed notification somewhere nobody configured; a 3xx is refused.
        redirect: 'manual',
        signal,
      });
      // The answer's body means nothing to us; cancelling it frees the connection at once.
      await response.body?.cancel().catch(() => {});
      const outcome = outcomeOfStatus(response.status);
      const retryAfter = response.status === 429 || response.status === 503 ? response.headers.get('retry-after') : null;
      if (outcome === 'retry') {
        this.#logThrottled('status', 'the webhook receiver answered with a failure; retrying with backoff', { origin: this.#origin, status: response.status });
      }
      return { outcome, status: response.status, retryAfter };
    } catch (err) {
      if (!this.#stopped) {
        const timedOut = err instanceof DOMException && err.name === 'TimeoutError';
        this.#logThrottled(timedOut ? 'timeout' : 'unreachable', timedOut ? 'the webhook receiver did not answer in time; retrying with backoff' : 'the webhook receiver could not be reached; retrying with backoff', {
          origin: this.#origin,
          timeoutMs: this.#options.timeoutMs,
          error: describeThrown(err),
          cause: (err as { cause?: unknown }).cause === undefined ? undefined : describeThrown((err as { cause?: unknown }).cause),
        });
      }
      return { outcome: 'retry', status: null, retryAfter: null };
    }
  }

  /** Waits `ms`, or less if the sender stops meanwhile. */
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

  #drop(kind: string, message: string, notification: WebhookNotification, fields: Record<string, unknown> = {}): void {
    this.#counters.dropped++;
    this.#logThrottled(kind, message, { origin: this.#origin, ...describeNotification(notification), ...fields });
  }

  /** At most one line per kind per LOG_EVERY_MS, saying how many it stood for. */
  #logThrottled(kind: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(kind);
    if (suppressed === null) return;
    this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }
}

/** The id and type only, bounded: `data` may name people and is never logged. */
function describeNotification(notification: WebhookNotification): Record<string, unknown> {
  try {
    return {
      notificationId: String(notification.id).slice(0, 200),
      notificationType: String(notification.type).slice(0, 100),
    };
  } catch {
    return {};
  }
}

function requirePositiveInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a whole number, 1 or more`);
}
