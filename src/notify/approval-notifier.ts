// Telling a person that a CIBA approval waits for them (protocol §10), through the channels the
// configuration names: a signed webhook (webhook.ts) for operators who route it to chat or push,
// and e-mail (mail.ts). Both queue and send off the request path, and neither ever throws into it:
// a notice that cannot be sent is dropped, counted and logged, and the request stays in the
// person's inbox, where the notice only pointed.
import { randomUUID } from 'node:crypto';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import type { DeliverySettings } from './delivery.ts';
import { MailSender } from './mail.ts';
import { WebhookSender } from './webhook.ts';

/** What a notice says: nothing in it grants anything (no user code, no token), so it may travel in clear. */
export interface ApprovalNotice {
  approvalId: string;
  agentId: string;
  hostId: string;
  personId: string;
  /** The person's address, when their identity provider gave one: the mail goes there. */
  personEmail: string | null;
  personName?: string | undefined;
  agentName: string;
  hostName?: string | undefined;
  capabilities: string[];
  bindingMessage?: string | undefined;
  expiresAtMs: number;
  /** Straight to the item in the person's inbox. */
  link: string;
}

export type NotificationChannel = 'webhook' | 'email';

/** How often a notice is tried, and how long between tries (delivery.ts). */
const DELIVERY: Omit<DeliverySettings, 'logger'> = { maxAttempts: 5, backoffBaseMs: 1000, backoffMaxMs: 60_000, queueMax: 1000 };

export class ApprovalNotifier {
  readonly #webhook: WebhookSender | undefined;
  readonly #mail: MailSender | undefined;

  constructor(senders: { webhook?: WebhookSender | undefined; mail?: MailSender | undefined }) {
    this.#webhook = senders.webhook;
    this.#mail = senders.mail;
  }

  /** The channels in use, for discovery and the start-up line. */
  get channels(): NotificationChannel[] {
    return [...(this.#webhook ? ['webhook' as const] : []), ...(this.#mail ? ['email' as const] : [])];
  }

  /** Each channel's delivery counters (delivery.ts), for /metrics: what was sent, retried and given up on. */
  counters(): Array<{ channel: NotificationChannel; delivered: number; failedAttempts: number; dropped: number }> {
    const rows: Array<{ channel: NotificationChannel; delivered: number; failedAttempts: number; dropped: number }> = [];
    if (this.#webhook) {
      const { delivered, failedAttempts, dropped } = this.#webhook.counters;
      rows.push({ channel: 'webhook', delivered, failedAttempts, dropped });
    }
    if (this.#mail) {
      const { sent, failedAttempts, dropped } = this.#mail.counters;
      rows.push({ channel: 'email', delivered: sent, failedAttempts, dropped });
    }
    return rows;
  }

  /** Queues the notice on every channel; returns at once and never throws. */
  notify(notice: ApprovalNotice): void {
    const expiresAt = new Date(notice.expiresAtMs).toISOString();
    this.#webhook?.send({
      id: randomUUID(),
      type: 'approval.waiting',
      at: new Date().toISOString(),
      data: {
        approval_id: notice.approvalId,
        agent_id: notice.agentId,
        host_id: notice.hostId,
        person_id: notice.personId,
        ...(notice.personEmail === null ? {} : { person_email: notice.personEmail }),
        agent_name: notice.agentName,
        ...(notice.hostName === undefined ? {} : { host_name: notice.hostName }),
        capabilities: notice.capabilities,
        ...(notice.bindingMessage === undefined ? {} : { binding_message: notice.bindingMessage }),
        expires_at: expiresAt,
        link: notice.link,
      },
    });
    if (this.#mail && notice.personEmail !== null) {
      this.#mail.send({
        to: notice.personEmail,
        ...(notice.personName === undefined ? {} : { personName: notice.personName }),
        agentName: notice.agentName,
        ...(notice.hostName === undefined ? {} : { hostName: notice.hostName }),
        capabilities: notice.capabilities,
        ...(notice.bindingMessage === undefined ? {} : { bindingMessage: notice.bindingMessage }),
        link: notice.link,
        expiresAt,
      });
    }
  }

  /** Waits up to `deadlineMs` for what is queued to go out, then drops the rest (counted). Never throws. */
  async close(deadlineMs: number): Promise<void> {
    await Promise.allSettled([this.#webhook?.close(deadlineMs), this.#mail?.close(deadlineMs)]);
  }
}

/** The channels the configuration names; null when it names none (then CIBA is not offered). */
export function approvalNotifierFrom(config: Config, logger: Logger): ApprovalNotifier | null {
  const webhook = config.APPROVAL_WEBHOOK_URL && config.APPROVAL_WEBHOOK_SECRET
    ? new WebhookSender({ ...DELIVERY, logger, url: config.APPROVAL_WEBHOOK_URL, secret: config.APPROVAL_WEBHOOK_SECRET, timeoutMs: config.APPROVAL_WEBHOOK_TIMEOUT_MS })
    : undefined;
  const mail = config.SMTP_URL && config.SMTP_FROM
    ? new MailSender({
      ...DELIVERY, logger, smtpUrl: config.SMTP_URL, from: config.SMTP_FROM, providerName: config.PROVIDER_NAME,
      connectionTimeoutMs: config.SMTP_TIMEOUT_MS, sendTimeoutMs: config.SMTP_TIMEOUT_MS,
    })
    : undefined;
  return webhook || mail ? new ApprovalNotifier({ webhook, mail }) : null;
}
