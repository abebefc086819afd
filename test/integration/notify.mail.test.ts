// The approval mail sender (src/notify/mail.ts) against a real SMTP server (the smtp-server package)
// on 127.0.0.1, plain text with password login: the mail arrives with the link and the binding
// message and nothing secret; injection through the agent's words is stopped; 4xx replies and lost
// connections are retried, 5xx replies are not; send() never throws and never waits; the queue is
// bounded; close() keeps its deadline; logs never carry the SMTP password or the link. Nothing here
// asserts on time: backoff is made zero (random 0), and waits are expect.poll on counters.
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerDataStream } from 'smtp-server';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/logger.ts';
import { MailSender, type ApprovalMail, type MailSenderOptions } from '../../src/notify/mail.ts';
import { parseMail } from '../support/mail.ts';
import { freePort } from '../support/net.ts';
import { within } from '../support/within.ts';

const USER = 'mailer';
const PASSWORD = 'sm7p-pa55word-never-logged';
const LINK = 'https://idp.example.com/inbox/item_7f3a9c';
const WJ = '\u2060';

/** What the test server answers at RCPT TO and at the end of DATA, for attempt n (1-based). */
interface Script {
  rcpt?: (attempt: number) => number | 'ok';
  data?: (attempt: number) => number | 'ok' | 'hang';
}

interface TestServer {
  port: number;
  /** Raw messages the server accepted, in order. */
  received: string[];
  /** Logins the server accepted, with the test's user and password. */
  logins(): number;
  rcptAttempts(): number;
  dataAttempts(): number;
  close(): Promise<void>;
}

const servers: TestServer[] = [];
const senders: MailSender[] = [];

afterEach(async () => {
  await Promise.all(senders.splice(0).map((sender) => sender.close(0)));
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

function smtpError(responseCode: number): Error & { responseCode: number } {
  return Object.assign(new Error(responseCode >= 500 ? 'mailbox unavailable' : 'try again later'), { responseCode });
}

async function startServer(script: Script = {}): Promise<TestServer> {
  const received: string[] = [];
  let rcpt = 0;
  let data = 0;
  let logins = 0;
  const server = new SMTPServer({
    authOptional: true,
    allowInsecureAuth: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    closeTimeout: 100,
    onAuth(auth, _session, callback) {
      if (auth.username !== USER || auth.password !== PASSWORD) return callback(smtpError(535));
      logins += 1;
      callback(null, { user: USER });
    },
    onRcptTo(_address, _session, callback) {
      rcpt += 1;
      const answer = script.rcpt?.(rcpt) ?? 'ok';
      callback(answer === 'ok' ? null : smtpError(answer));
    },
    onData(stream: SMTPServerDataStream, _session, callback) {
      data += 1;
      const answer = script.data?.(data) ?? 'ok';
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        if (answer === 'hang') return;
        if (answer !== 'ok') return callback(smtpError(answer));
        received.push(Buffer.concat(chunks).toString('utf8'));
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const test: TestServer = {
    port: (server.server.address() as AddressInfo).port,
    received,
    logins: () => logins,
    rcptAttempts: () => rcpt,
    dataAttempts: () => data,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  servers.push(test);
  return test;
}

function capturingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const record = (level: string) => (msg: string, fields?: Record<string, unknown>) => lines.push(JSON.stringify({ level, msg, ...fields }));
  return { lines, logger: { debug: record('debug'), info: record('info'), warn: record('warn'), error: record('error') } };
}

function sender(port: number, logger: Logger, overrides: Partial<MailSenderOptions> = {}): MailSender {
  const created = new MailSender({
    smtpUrl: `smtp://${USER}:${PASSWORD}@127.0.0.1:${port}`,
    from: 'Agentgate <approvals@example.com>',
    providerName: 'Example IdP',
    connectionTimeoutMs: 5000,
    sendTimeoutMs: 5000,
    maxAttempts: 3,
    backoffBaseMs: 1000,
    backoffMaxMs: 1000,
    queueMax: 10,
    logger,
    random: () => 0,
    ...overrides,
  });
  senders.push(created);
  return created;
}

function approval(overrides: Partial<ApprovalMail> = {}): ApprovalMail {
  return {
    to: 'alice@example.com',
    personName: 'Alice',
    agentName: 'Report Bot',
    hostName: 'laptop-7',
    capabilities: ['read_reports'],
    bindingMessage: 'Blue tiger 42',
    link: LINK,
    expiresAt: '2030-01-02T03:04:05.000Z',
    ...overrides,
  };
}

describe('MailSender against a real SMTP server', () => {
  it('the mail arrives once, with the link and the binding message, and nothing like a user code or token', async () => {
    const server = await startServer();
    const { logger, lines } = capturingLogger();
    const mails = sender(server.port, logger);
    mails.send(approval());
    await expect.poll(() => mails.counters.sent).toBe(1);
    expect(server.received).toHaveLength(1);
    // The credentials in the SMTP URL were used, so the password the logs must not carry was in play.
    expect(server.logins()).toBe(1);
    const { headers, text, html } = parseMail(server.received[0]!);
    expect(headers).toMatch(/^Subject: Example IdP: Report Bot asks for your approval$/m);
    expect(headers).toMatch(/^To: alice@example\.com$/m);
    for (const part of [text, html]) {
      expect(part).toContain(LINK);
      expect(part).toContain('Blue tiger 42');
    }
    // A user code looks like XXXX-XXXX; nothing of the kind, and no JWT, is in the mail.
    expect(server.received[0]).not.toMatch(/\b[A-Z]{4}-[A-Z]{4}\b/);
    expect(server.received[0]).not.toMatch(/eyJ[\w-]+\./);
    expect(mails.counters).toEqual({ queued: 0, sent: 1, failedAttempts: 0, dropped: 0 });
    expect(lines.join('\n')).not.toContain(PASSWORD);
  });

  it('header injection through the agent name adds no header: a Bcc in the name stays in the subject text', async () => {
    const server = await startServer();
    const mails = sender(server.port, capturingLogger().logger);
    mails.send(approval({ agentName: 'Bot\r\nBcc: victim@example.org\r\nX-Injected: yes' }));
    await expect.poll(() => mails.counters.sent).toBe(1);
    expect(server.rcptAttempts()).toBe(1);
    const { headers } = parseMail(server.received[0]!);
    expect(headers).not.toMatch(/^Bcc:/im);
    expect(headers).not.toMatch(/^X-Injected:/im);
    expect(headers).toMatch(/^Subject: Example IdP: Bot Bcc: victim@example\.org X-Injected: yes asks for your approval$/m);
  });

  it('HTML injection through the binding message is escaped, and a URL in it is not a link', async () => {
    const server = await startServer();
    const mails = sender(server.port, capturingLogger().logger);
    mails.send(approval({ bindingMessage: '<script>alert(1)</script><a href="https://evil.example">x</a>' }));
    await expect.poll(() => mails.counters.sent).toBe(1);
    const { html } = parseMail(server.received[0]!);
    expect(html).not.toContain('<script>');
    expect(html).not.toContain('evil.example');
    expect(html).toContain('&#60;script&#62;alert(1)&#60;/');
    expect(html.replaceAll(WJ, '')).toContain('&#60;a href=&#34;https://evil.example&#34;&#62;x');
    expect(html.match(/<a /g)).toHaveLength(1);
  });

  it('a link that is not http(s) is refused: nothing is sent, the mail is dropped and counted', async () => {
    const server = await startServer();
    const { logger, lines } = capturingLogger();
    const mails = sender(server.port, logger);
    mails.send(approval({ link: 'javascript:alert(document.cookie)' }));
    expect(mails.counters).toEqual({ queued: 0, sent: 0, failedAttempts: 0, dropped: 1 });
    // A good mail after it goes through, so the refusal stopped nothing else.
    mails.send(approval());
    await expect.poll(() => mails.counters.sent).toBe(1);
    expect(server.received).toHaveLength(1);
    expect(lines.join('\n')).not.toContain('javascript:');
  });

  it.each([
    ['RCPT TO', { rcpt: (n: number) => (n === 1 ? 451 : 'ok') }],
    ['the end of DATA', { data: (n: number) => (n === 1 ? 451 : 'ok') }],
  ] as const)('a 451 at %s is retried, and the mail arrives once', async (_where, script: Script) => {
    const server = await startServer(script);
    const { logger, lines } = capturingLogger();
    const mails = sender(server.port, logger);
    mails.send(approval());
    await expect.poll(() => mails.counters.sent).toBe(1);
    expect(server.received).toHaveLength(1);
    expect(mails.counters.failedAttempts).toBeGreaterThanOrEqual(1);
    expect(mails.counters.dropped).toBe(0);
    expect(lines.join('\n')).not.toContain(PASSWORD);
    expect(lines.join('\n')).not.toContain(LINK);
  });

  it('a 550 is not retried: one attempt, then the mail is dropped', async () => {
    const server = await startServer({ rcpt: () => 550 });
    const mails = sender(server.port, capturingLogger().logger);
    mails.send(approval());
    await expect.poll(() => mails.counters.dropped).toBe(1);
    expect(mails.counters).toEqual({ queued: 0, sent: 0, failedAttempts: 1, dropped: 1 });
    expect(server.rcptAttempts()).toBe(1);
  });

  it('an unreachable server is retried up to maxAttempts, then the mail is dropped; logs carry neither password nor link', async () => {
    const port = await freePort();
    const { logger, lines } = capturingLogger();
    const mails = sender(port, logger, { backoffBaseMs: 0, backoffMaxMs: 0 });
    mails.send(approval());
    await expect.poll(() => mails.counters.dropped).toBe(1);
    expect(mails.counters).toEqual({ queued: 0, sent: 0, failedAttempts: 3, dropped: 1 });
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join('\n')).toContain(`smtp://127.0.0.1:${port}`);
    expect(lines.join('\n')).not.toContain(PASSWORD);
    expect(lines.join('\n')).not.toContain(LINK);
    expect(lines.join('\n')).not.toContain('item_7f3a9c');
  });

  it('send() returns before delivery and never throws, whatever it is given', async () => {
    const server = await startServer();
    const mails = sender(server.port, capturingLogger().logger);
    mails.send(approval());
    // Nothing has been sent yet: the sending happens after send() has returned.
    expect(mails.counters).toEqual({ queued: 1, sent: 0, failedAttempts: 0, dropped: 0 });
    expect(server.received).toHaveLength(0);
    const hostile = {
      get to(): string {
        throw new Error('a getter that throws');
      },
    };
    expect(() => mails.send(null as unknown as ApprovalMail)).not.toThrow();
    expect(() => mails.send(hostile as unknown as ApprovalMail)).not.toThrow();
    expect(() => mails.send({ ...approval(), capabilities: 'not an array' as unknown as string[] })).not.toThrow();
    await expect.poll(() => mails.counters.sent).toBe(2);
    expect(mails.counters.dropped).toBe(2);
  });

  it('the queue is bounded: past queueMax the oldest waiting mail is dropped and counted', async () => {
    const server = await startServer();
    const mails = sender(server.port, capturingLogger().logger, { queueMax: 1 });
    for (const word of ['first', 'second', 'third']) mails.send(approval({ bindingMessage: word }));
    expect(mails.counters).toEqual({ queued: 1, sent: 0, failedAttempts: 0, dropped: 2 });
    await expect.poll(() => mails.counters.sent).toBe(1);
    expect(parseMail(server.received[0]!).text).toContain('third');
  });

  it('close() keeps its deadline while the server hangs, and counts the mail left as dropped', async () => {
    const server = await startServer({ data: () => 'hang' });
    const mails = sender(server.port, capturingLogger().logger, { sendTimeoutMs: 60_000 });
    mails.send(approval());
    await expect.poll(() => server.dataAttempts()).toBe(1);
    // The bound only turns a hung close() into a plain failure; it asserts nothing about speed.
    await within(10_000, 'close(200) resolving', mails.close(200));
    expect(mails.counters).toEqual({ queued: 0, sent: 0, failedAttempts: 0, dropped: 1 });
    mails.send(approval());
    expect(mails.counters.dropped).toBe(2);
  });
});
