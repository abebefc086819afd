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
import { DeliveryQueue, type AttemptOutcome, type AttemptResult, type DeliveryCounters, type DeliverySettings } from './delivery.ts';

export { retryDelayMs } from './backoff.ts';

export interface WebhookNotification {
  /** Unique for each notification, so a receiver can drop the repeats retries may cause. */
  id: string;
  /** What happened, e.g. 'approval.waiting'. */
  type: string;
  /** When it happened, as an ISO time. */
  at: string;
  data: Record<string, unknown>;
}

/** The queue's settings (delivery.ts: attempts, backoff, queue bound, logger), and the receiver's. */
export interface WebhookSenderOptions extends DeliverySettings {
  /** An http: or https: URL. */
  url: string;
  /** The HMAC key shared with the receiver; at least MIN_SECRET_CHARS characters. */
  secret: string;
  /** How long one attempt may take, from connecting until the answer's status arrives. */
  timeoutMs: number;
  now?: () => number;
  fetch?: typeof fetch;
}

/** The delivery counters (delivery.ts): `delivered` counts 2xx answers. */
export type WebhookCounters = DeliveryCounters;

/** A shorter secret is refused: HMAC-SHA256 keys should carry at least 256 bits of guesswork. */
export const MIN_SECRET_CHARS = 32;

/**
 * A body larger than this is dropped rather than sent: notifications are meant to be small (an
 * approval waits, here is where), and a receiver should not have to accept megabytes to read them.
 */
export const MAX_BODY_BYTES = 64 * 1024;

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
export type StatusOutcome = AttemptOutcome;

/**
 * 2xx delivered; 408, 429 and 5xx may pass, so they are retried; anything else (3xx, other 4xx)
 * would be answered the same way again, so it is not.
 */
export function outcomeOfStatus(status: number): StatusOutcome {
  if (status >= 200 && status < 300) return 'delivered';
  if (status === 408 || status === 429 || (status >= 500 && status < 600)) return 'retry';
  return 'refused';
}

interface Pending {
  notification: WebhookNotification;
  /** Serialised once, at send(), so a caller changing `data` afterwards changes nothing sent. */
  body: string;
}

export class WebhookSender {
  readonly #options: WebhookSenderOptions;
  readonly #now: () => number;
  readonly #fetch: typeof fetch;
  /** Scheme, host and port only: the path and query of a webhook URL often hold a token. */
  readonly #origin: string;
  readonly #queue: DeliveryQueue<Pending>;

  constructor(options: WebhookSenderOptions) {
    const url = new URL(options.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new RangeError('the webhook URL must be http: or https:');
    }
    requireSecret(options.secret);
    if (!Number.isSafeInteger(options.timeoutMs) || options.timeoutMs < 1) throw new RangeError('timeoutMs must be a whole number, 1 or more');
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#origin = url.origin;
    this.#queue = new DeliveryQueue<Pending>({
      itemName: 'webhook notification', origin: this.#origin, logger: options.logger,
      maxAttempts: options.maxAttempts, backoffBaseMs: options.backoffBaseMs, backoffMaxMs: options.backoffMaxMs, queueMax: options.queueMax,
      ...(options.random ? { random: options.random } : {}), now: this.#now,
      attempt: (pending, stop) => this.#attempt(pending.body, stop),
      describe: (pending) => describeNotification(pending.notification),
    });
  }

  get counters(): WebhookCounters {
    return this.#queue.counters;
  }

  /**
   * Queues the notification; delivery starts on a later turn of the event loop, so nothing of it
   * runs on the caller's path. Never throws: a notification that cannot be sent is dropped,
   * counted and logged, because a failed notification must not fail the request that raised it.
   */
  send(notification: WebhookNotification): void {
    try {
      let body: string;
      try {
        body = JSON.stringify(notification);
      } catch (err) {
        this.#queue.drop('unserialisable', 'a webhook notification could not be written as JSON; it is dropped', null, { ...describeNotification(notification), error: describeThrown(err) });
        return;
      }
      if (Buffer.byteLength(body, 'utf8') > MAX_BODY_BYTES) {
        this.#queue.drop('too-large', 'a webhook notification is larger than the limit; it is dropped', null, { ...describeNotification(notification), maxBytes: MAX_BODY_BYTES });
        return;
      }
      this.#queue.enqueue({ notification, body });
    } catch (err) {
      // Nothing above should throw (a notification with a throwing getter could); send must not.
      this.#queue.drop('send', 'a webhook notification could not be queued; it is dropped', null, { error: describeThrown(err) });
    }
  }

  /**
   * Stops taking notifications, waits up to `deadlineMs` for those queued to be delivered or given
   * up, then stops: an attempt in flight is aborted, a backoff wait ends, and whatever is left is
   * counted as dropped. The counters are final when the promise resolves.
   */
  close(deadlineMs: number): Promise<void> {
    return this.#queue.close(deadlineMs);
  }

  /** One POST, signed now, bounded by timeoutMs; never throws. */
  async #attempt(body: string, stop: AbortSignal): Promise<AttemptResult> {
    const signal = AbortSignal.any([AbortSignal.timeout(this.#options.timeoutMs), stop]);
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
      return { outcome, retryAfter, fields: { status: response.status } };
    } catch (err) {
      const timedOut = err instanceof DOMException && err.name === 'TimeoutError';
      return {
        outcome: 'retry',
        fields: {
          status: null,
          why: timedOut ? `no answer within ${this.#options.timeoutMs} ms` : 'unreachable',
          error: describeThrown(err),
          cause: (err as { cause?: unknown }).cause === undefined ? undefined : describeThrown((err as { cause?: unknown }).cause),
        },
      };
    }
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
