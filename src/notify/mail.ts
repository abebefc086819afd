// Approval e-mails sent through an SMTP server, off the request path: a caller queues a mail with
// send(), which composes it at once (src/notify/approval-mail.ts, where the rules on what the mail
// may show live) and returns, and one loop sends queued mails one at a time, oldest first, so a slow
// or failing mail server never slows a request down and never gets more than one connection from us.
//
// Answers: a mail the server accepts is sent. Connection failures, timeouts, and 4xx replies (and
// 503, which says the session went wrong rather than that the mail is refused) are retried with
// exponential backoff and full jitter; after maxAttempts the mail is dropped. A 5xx reply is the
// server refusing this mail for good, and sending it again would be refused again, so it is dropped
// at once; so is a mail that cannot be composed safely (a link that is not http(s), say). Every drop
// is counted and logged at most once per LOG_EVERY_MS for each kind. Logs name the server by scheme,
// host and port only: never the credentials in the SMTP URL, the link, or the mail's contents.
import nodemailer, { type NodemailerError, type Transporter } from 'nodemailer';
import { describeThrown } from '../common/thrown.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import { composeApprovalMail, type ApprovalMail, type ComposedMail } from './approval-mail.ts';
import { retryDelayMs } from './webhook.ts';

export { ApprovalMailRefused, composeApprovalMail, type ApprovalMail, type ComposedMail } from './approval-mail.ts';

export interface MailSenderOptions {
  /** smtp: or smtps: (TLS from the start), with the credentials in it: smtps://user:pass@host:465. */
  smtpUrl: string;
  /** The From address, e.g. `"Agentgate" <approvals@example.com>`. */
  from: string;
  /** Our name as the person knows it, shown in the subject and the body. */
  providerName: string;
  /** How long connecting and then the server's greeting may each take. */
  connectionTimeoutMs: number;
  /** How long one attempt may take in all, and how long the connection may sit idle within it. */
  sendTimeoutMs: number;
  /** Attempts per mail, the first included, before it is dropped. */
  maxAttempts: number;
  /** The ceiling of the first retry's delay; it doubles with each failure, up to backoffMaxMs. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Mails waiting at most, besides the one being sent; beyond it the oldest is dropped. */
  queueMax: number;
  logger: Logger;
  random?: () => number;
}

export interface MailCounters {
  /** Mails waiting now, the one being sent (or waiting out its backoff) included. */
  queued: number;
  sent: number;
  /** Attempts that did not end in the server accepting the mail, whether or not they were retried. */
  failedAttempts: number;
  /** Mails given up on: refused by us or the server, attempts exhausted, queue full, or left at close. */
  dropped: number;
}

export type SmtpOutcome = 'retry' | 'refused';

/** Failures that say nothing about the mail itself, only that this attempt could not get through. */
const TRANSIENT_CODES: ReadonlySet<string> = new Set(['ECONNECTION', 'ESOCKET', 'ETIMEDOUT', 'EDNS', 'ETLS', 'EPROTOCOL', 'EABORT']);

/** A failure that repeats on every mail (a server down) is logged once per this long for each kind. */
const LOG_EVERY_MS = 60_000;

/**
 * Whether a failed attempt is worth repeating. With an SMTP reply the reply class decides (RFC
 * 5321: 4yz is transient, 5yz permanent, but 503 is a session out of step, which a new connection
 * mends). Without one, a connection-level failure is retried and anything else (no credentials, a
 * malformed envelope, a configuration problem) would fail the same way again, so it is not.
 */
export function outcomeOfSmtpError(err: unknown): SmtpOutcome {
  const { responseCode, code } = (typeof err === 'object' && err !== null ? err : {}) as NodemailerError;
  if (typeof responseCode === 'number' && responseCode >= 200 && responseCode < 600) {
    return responseCode >= 500 && responseCode !== 503 ? 'refused' : 'retry';
  }
  return typeof code === 'string' && TRANSIENT_CODES.has(code) ? 'retry' : 'refused';
}

interface Pending {
  /** Composed once, at send(), so a caller changing its object afterwards changes nothing sent. */
  message: ComposedMail;
}

type Attempt = { outcome: 'sent' | SmtpOutcome; fields: Record<string, unknown> };

export class MailSender {
  readonly #options: MailSenderOptions;
  readonly #random: () => number;
  readonly #transport: Transporter;
  /** Scheme, host and port only: the URL's user part holds the password. */
  readonly #origin: string;
  /** Strings no log line may carry, whatever an error message quotes. */
  readonly #secrets: string[];
  readonly #throttle = new LogThrottle(LOG_EVERY_MS);
  readonly #waiting: Pending[] = [];
  #current: Pending | null = null;
  #loop: Promise<void> | null = null;
  #closing = false;
  #stopped = false;
  /** Aborts the attempt in flight and ends a backoff wait when the sender stops. */
  readonly #stop = new AbortController();
  readonly #counters = { sent: 0, failedAttempts: 0, dropped: 0 };

  constructor(options: MailSenderOptions) {
    const url = new URL(options.smtpUrl);
    if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') throw new RangeError('the SMTP URL must be smtp: or smtps:');
    for (const name of ['connectionTimeoutMs', 'sendTimeoutMs', 'maxAttempts', 'queueMax'] as const) requirePositiveInteger(name, options[name]);
    for (const name of ['backoffBaseMs', 'backoffMaxMs'] as const) requireNonNegativeInteger(name, options[name]);
    if (/[\r\n]/.test(options.from)) throw new RangeError('the From address must be one line');
    this.#options = options;
    this.#random = options.random ?? Math.random;
    this.#origin = `${url.protocol}//${url.host}`;
    const user = decodeURIComponent(url.username);
    const pass = decodeURIComponent(url.password);
    this.#secrets = [options.smtpUrl, url.password, pass].filter((s) => s.length > 0);
    this.#transport = nodemailer.createTransport({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      ...(url.port === '' ? {} : { port: Number(url.port) }),
      // smtps: is TLS from the first byte; smtp: upgrades with STARTTLS when the server offers it.
      secure: url.protocol === 'smtps:',
      ...(user === '' ? {} : { auth: { user, pass } }),
      connectionTimeout: options.connectionTimeoutMs,
      greetingTimeout: options.connectionTimeoutMs,
      socketTimeout: options.sendTimeoutMs,
      // Our mails have no attachments; nothing in one may make nodemailer read a file or fetch a URL.
      disableFileAccess: true,
      disableUrlAccess: true,
    });
  }

  get counters(): MailCounters {
    return { queued: this.#waiting.length + (this.#current === null ? 0 : 1), ...this.#counters };
  }

  /**
   * Queues `mail` and returns at once; the sending happens later, off the caller's path. Never
   * throws: a mail that cannot be sent is dropped, counted and logged, because a failed notice must
   * not fail the request that raised it.
   */
  send(mail: ApprovalMail): void {
    try {
      if (this.#closing) {
        this.#drop('closed', 'an approval mail was sent after the mail sender began closing; it is dropped');
        return;
      }
      let message: ComposedMail;
      try {
        message = composeApprovalMail(mail, this.#options.from, this.#options.providerName);
      } catch (err) {
        this.#drop('refused-compose', 'an approval mail could not be composed safely; it is dropped', { error: describeThrown(err) });
        return;
      }
      this.#waiting.push({ message });
      // One over at most, since every push checks: the oldest waiting goes, as the newest says most.
      if (this.#waiting.length > this.#options.queueMax) {
        this.#waiting.shift();
        this.#drop('queue-full', 'the mail queue is full; the oldest waiting mail is dropped', { queueMax: this.#options.queueMax });
      }
      this.#startLoop();
    } catch (err) {
      // Nothing above should throw (a mail object with a throwing getter could); send must not.
      this.#counters.dropped++;
      this.#logThrottled('send', 'an approval mail could not be queued; it is dropped', { error: describeThrown(err) });
    }
  }

  /**
   * Stops taking mails, waits up to `deadlineMs` for those queued to be sent or given up, then
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
    this.#transport.close();
    if (left > 0) {
      this.#counters.dropped += left;
      this.#options.logger.warn('the mail sender stopped with mails unsent; they are dropped', { origin: this.#origin, dropped: left });
    }
  }

  #startLoop(): void {
    if (this.#loop !== null) return;
    this.#loop = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.#sendAll())
      .catch((err: unknown) => {
        // #sendAll catches what it expects; this is the last line so no rejection goes unhandled.
        this.#logThrottled('loop', 'the mail sending loop failed', { error: this.#scrub(describeThrown(err)) });
      })
      .finally(() => {
        this.#loop = null;
        // A send() between the loop's last look at the queue and here would otherwise wait for the next send.
        if (this.#waiting.length > 0 && !this.#stopped) this.#startLoop();
      });
  }

  /** Sends waiting mails one at a time, oldest first; bounded by the queue and maxAttempts each. */
  async #sendAll(): Promise<void> {
    while (!this.#stopped) {
      const next = this.#waiting.shift();
      if (next === undefined) return;
      this.#current = next;
      await this.#deliver(next);
      if (!this.#stopped) this.#current = null;
    }
  }

  async #deliver(pending: Pending): Promise<void> {
    for (let attempt = 1; attempt <= this.#options.maxAttempts; attempt++) {
      const result = await this.#attempt(pending.message);
      // close() has counted this mail as dropped already; nothing more is said of it.
      if (this.#stopped) return;
      if (result.outcome === 'sent') {
        this.#counters.sent++;
        return;
      }
      this.#counters.failedAttempts++;
      if (result.outcome === 'refused') {
        this.#drop('refused', 'an approval mail was refused; it is not retried', { ...result.fields, attempts: attempt });
        return;
      }
      if (attempt === this.#options.maxAttempts) {
        this.#drop('exhausted', 'an approval mail failed on every attempt; it is dropped', { ...result.fields, attempts: attempt });
        return;
      }
      this.#logThrottled('retry', 'an approval mail could not be sent; retrying with backoff', result.fields);
      const backoff = { baseMs: this.#options.backoffBaseMs, maxMs: this.#options.backoffMaxMs };
      await this.#sleep(retryDelayMs(attempt, this.#random(), backoff, null));
      if (this.#stopped) return;
    }
  }

  /** One SMTP conversation, bounded by sendTimeoutMs; never throws. */
  async #attempt(message: ComposedMail): Promise<Attempt> {
    const signal = AbortSignal.any([AbortSignal.timeout(this.#options.sendTimeoutMs), this.#stop.signal]);
    try {
      await this.#transport.sendMail({ ...message, signal });
      return { outcome: 'sent', fields: {} };
    } catch (err) {
      const e = (typeof err === 'object' && err !== null ? err : {}) as NodemailerError;
      return {
        outcome: outcomeOfSmtpError(err),
        fields: {
          origin: this.#origin,
          code: typeof e.code === 'string' ? e.code.slice(0, 40) : undefined,
          responseCode: typeof e.responseCode === 'number' ? e.responseCode : undefined,
          command: typeof e.command === 'string' ? e.command.slice(0, 40) : undefined,
          error: this.#scrub(describeThrown(err)),
        },
      };
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

  /**
   * `text` with the SMTP URL and its password cut out. Nodemailer's messages are not known to
   * quote either, but an error message is text we do not control, so it is cleaned before it is
   * logged rather than trusted.
   */
  #scrub(text: string): string {
    let out = text;
    for (const secret of this.#secrets) out = out.split(secret).join('[redacted]');
    return out;
  }

  #drop(kind: string, message: string, fields: Record<string, unknown> = {}): void {
    this.#counters.dropped++;
    this.#logThrottled(kind, message, { origin: this.#origin, ...fields });
  }

  /** At most one line per kind per LOG_EVERY_MS, saying how many it stood for. */
  #logThrottled(kind: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(kind);
    if (suppressed === null) return;
    this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }
}

function requirePositiveInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a whole number, 1 or more`);
}

function requireNonNegativeInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a whole number, 0 or more`);
}
