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
// is counted and logged, throttled per kind (delivery.ts). Logs name the server by scheme,
// host and port only: never the credentials in the SMTP URL, the link, or the mail's contents.
import nodemailer, { type NodemailerError, type Transporter } from 'nodemailer';
import { describeThrown } from '../common/thrown.ts';
import { composeApprovalMail, type ApprovalMail, type ComposedMail } from './approval-mail.ts';
import { DeliveryQueue, type AttemptResult, type DeliverySettings } from './delivery.ts';

export { ApprovalMailRefused, composeApprovalMail, type ApprovalMail, type ComposedMail } from './approval-mail.ts';

/** The queue's settings (delivery.ts: attempts, backoff, queue bound, logger), and the SMTP server's. */
export interface MailSenderOptions extends DeliverySettings {
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

export class MailSender {
  readonly #options: MailSenderOptions;
  readonly #transport: Transporter;
  /** Scheme, host and port only: the URL's user part holds the password. */
  readonly #origin: string;
  /** Strings no log line may carry, whatever an error message quotes. */
  readonly #secrets: string[];
  /** Composed mails; composed once, at send(), so a caller changing its object afterwards changes nothing sent. */
  readonly #queue: DeliveryQueue<ComposedMail>;

  constructor(options: MailSenderOptions) {
    const url = new URL(options.smtpUrl);
    if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') throw new RangeError('the SMTP URL must be smtp: or smtps:');
    for (const name of ['connectionTimeoutMs', 'sendTimeoutMs'] as const) {
      if (!Number.isSafeInteger(options[name]) || options[name] < 1) throw new RangeError(`${name} must be a whole number, 1 or more`);
    }
    if (/[\r\n]/.test(options.from)) throw new RangeError('the From address must be one line');
    this.#options = options;
    this.#origin = `${url.protocol}//${url.host}`;
    const user = decodeURIComponent(url.username);
    const pass = decodeURIComponent(url.password);
    this.#secrets = [options.smtpUrl, url.password, pass].filter((s) => s.length > 0);
    this.#queue = new DeliveryQueue<ComposedMail>({
      itemName: 'approval mail', origin: this.#origin, logger: options.logger,
      maxAttempts: options.maxAttempts, backoffBaseMs: options.backoffBaseMs, backoffMaxMs: options.backoffMaxMs, queueMax: options.queueMax,
      ...(options.random ? { random: options.random } : {}),
      attempt: (message, stop) => this.#attempt(message, stop),
      onStop: () => this.#transport.close(),
    });
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
    const { delivered, ...rest } = this.#queue.counters;
    return { ...rest, sent: delivered };
  }

  /**
   * Queues `mail` and returns at once; the sending happens later, off the caller's path. Never
   * throws: a mail that cannot be sent is dropped, counted and logged, because a failed notice must
   * not fail the request that raised it.
   */
  send(mail: ApprovalMail): void {
    try {
      if (this.#queue.closing) {
        this.#queue.drop('closed', 'an approval mail was sent after the mail sender began closing; it is dropped', null);
        return;
      }
      let message: ComposedMail;
      try {
        message = composeApprovalMail(mail, this.#options.from, this.#options.providerName);
      } catch (err) {
        this.#queue.drop('refused-compose', 'an approval mail could not be composed safely; it is dropped', null, { error: describeThrown(err) });
        return;
      }
      this.#queue.enqueue(message);
    } catch (err) {
      // Nothing above should throw (a mail object with a throwing getter could); send must not.
      this.#queue.drop('send', 'an approval mail could not be queued; it is dropped', null, { error: describeThrown(err) });
    }
  }

  /**
   * Stops taking mails, waits up to `deadlineMs` for those queued to be sent or given up, then
   * stops: an attempt in flight is aborted, a backoff wait ends, and whatever is left is counted as
   * dropped. The counters are final when the promise resolves.
   */
  close(deadlineMs: number): Promise<void> {
    return this.#queue.close(deadlineMs);
  }

  /** One SMTP conversation, bounded by sendTimeoutMs; never throws. */
  async #attempt(message: ComposedMail, stop: AbortSignal): Promise<AttemptResult> {
    const signal = AbortSignal.any([AbortSignal.timeout(this.#options.sendTimeoutMs), stop]);
    try {
      await this.#transport.sendMail({ ...message, signal });
      return { outcome: 'delivered' };
    } catch (err) {
      const e = (typeof err === 'object' && err !== null ? err : {}) as NodemailerError;
      return {
        outcome: outcomeOfSmtpError(err),
        fields: {
          code: typeof e.code === 'string' ? e.code.slice(0, 40) : undefined,
          responseCode: typeof e.responseCode === 'number' ? e.responseCode : undefined,
          command: typeof e.command === 'string' ? e.command.slice(0, 40) : undefined,
          error: this.#scrub(describeThrown(err)),
        },
      };
    }
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
}
