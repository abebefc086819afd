// The signed notification webhook (src/notify/webhook.ts) against a real HTTP receiver on
// 127.0.0.1: what arrives verifies and forgeries do not; failures are retried, refused or given up
// as the scheme says, one delivery at a time and in order; send() never throws and never waits;
// the queue is bounded; close() keeps its deadline even when the receiver hangs. Nothing here
// asserts on time: backoff is made zero (random 0), and waits are expect.poll on counters.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/logger.ts';
import {
  signatureHeaders,
  verifyWebhookSignature,
  WebhookSender,
  type WebhookNotification,
  type WebhookSenderOptions,
} from '../../src/notify/webhook.ts';
import { within } from '../support/within.ts';

const SECRET = 'a-test-secret-of-at-least-thirty-two-characters';
const TOLERANCE_SECONDS = 300;

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  id: string;
}

type Answer = { status: number; headers?: Record<string, string> } | 'hang';

interface Receiver {
  url: string;
  received: Received[];
  /** Requests the receiver holds unanswered right now. */
  hanging(): number;
  /** Answers every request held so far with `status`. */
  answerHeld(status: number): void;
  close(): Promise<void>;
}

const receivers: Receiver[] = [];
const senders: WebhookSender[] = [];

afterEach(async () => {
  await Promise.all(senders.splice(0).map((sender) => sender.close(0)));
  await Promise.all(receivers.splice(0).map((receiver) => receiver.close()));
});

/** A receiver; `answer(n)` decides request n (1-based). */
async function startReceiver(answer: (request: number) => Answer, path = '/hook'): Promise<Receiver> {
  const received: Received[] = [];
  let hanging = 0;
  const held: Array<{ writeHead(status: number): { end(): void } }> = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      received.push({ headers: req.headers, body, id: (JSON.parse(body) as WebhookNotification).id });
      const outcome = answer(received.length);
      if (outcome === 'hang') {
        hanging += 1;
        res.once('close', () => (hanging -= 1));
        held.push(res);
        return;
      }
      res.writeHead(outcome.status, outcome.headers ?? {}).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const receiver: Receiver = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    received,
    hanging: () => hanging,
    answerHeld(status) {
      for (const res of held.splice(0)) res.writeHead(status).end();
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  receivers.push(receiver);
  return receiver;
}

interface CapturedLine {
  level: string;
  msg: string;
  fields: Record<string, unknown> | undefined;
}

function capturingLogger(lines: CapturedLine[]): Logger {
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => lines.push({ level, msg, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

function sender(url: string, overrides: Partial<WebhookSenderOptions> = {}): WebhookSender {
  const created = new WebhookSender({
    url,
    secret: SECRET,
    timeoutMs: 5000,
    maxAttempts: 5,
    backoffBaseMs: 1,
    backoffMaxMs: 5,
    queueMax: 100,
    logger: capturingLogger([]),
    random: () => 0,
    ...overrides,
  });
  senders.push(created);
  return created;
}

let counter = 0;
function notification(data: Record<string, unknown> = { request: 'r-1' }): WebhookNotification {
  counter += 1;
  return { id: `n-${counter}`, type: 'approval.waiting', at: new Date(0).toISOString(), data };
}

function verifies(request: Received, secret = SECRET, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
  return verifyWebhookSignature(
    secret,
    request.body,
    { timestamp: String(request.headers['x-agentgate-timestamp']), signature: String(request.headers['x-agentgate-signature']) },
    nowSeconds,
    TOLERANCE_SECONDS,
  );
}

describe('a delivered notification', () => {
  it('arrives as JSON with headers that verify against its raw body', async () => {
    const receiver = await startReceiver(() => ({ status: 204 }));
    const webhook = sender(receiver.url);
    const sent = notification({ request: 'r-42', agent: 'a-7' });
    webhook.send(sent);
    await expect.poll(() => webhook.counters.delivered).toBe(1);
    const [request] = receiver.received;
    expect(request!.headers['content-type']).toBe('application/json');
    expect(request!.headers['x-agentgate-signature']).toMatch(/^v1=[0-9a-f]{64}$/);
    expect(JSON.parse(request!.body)).toEqual(sent);
    expect(verifies(request!)).toBe(true);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 1, failedAttempts: 0, dropped: 0 });
  });
});

describe('verification refuses forgeries', () => {
  let delivered: Received;
  beforeAll(async () => {
    const receiver = await startReceiver(() => ({ status: 200 }));
    const webhook = sender(receiver.url);
    webhook.send(notification({ request: 'r-1', decision: 'pending' }));
    // expect.poll is for tests only; close() waits for the queue to drain, which is the same here.
    await webhook.close(10_000);
    expect(receiver.received).toHaveLength(1);
    delivered = receiver.received[0]!;
  });

  it('a tampered body with the original signature is refused', () => {
    const tampered = { ...delivered, body: delivered.body.replace('pending', 'approved') };
    expect(tampered.body).not.toBe(delivered.body);
    expect(verifies(tampered)).toBe(false);
  });

  it('a notification signed with another secret is refused', () => {
    expect(verifies(delivered, 'another-secret-also-thirty-two-characters-long')).toBe(false);
  });

  it('a captured notification replayed after the tolerance is refused', () => {
    const laterSeconds = Number(delivered.headers['x-agentgate-timestamp']) + TOLERANCE_SECONDS + 1;
    expect(verifies(delivered, SECRET, laterSeconds)).toBe(false);
  });

  it('a notification signed with a timestamp in the future is refused', () => {
    const nowSeconds = 1_700_000_000;
    const body = delivered.body;
    const headers = signatureHeaders(SECRET, body, nowSeconds + TOLERANCE_SECONDS + 1);
    const signed = { timestamp: headers['X-Agentgate-Timestamp']!, signature: headers['X-Agentgate-Signature']! };
    expect(verifyWebhookSignature(SECRET, body, signed, nowSeconds, TOLERANCE_SECONDS)).toBe(false);
  });

  it('a signature moved onto a fresh timestamp is refused', () => {
    const fresh = { ...delivered, headers: { ...delivered.headers, 'x-agentgate-timestamp': String(Number(delivered.headers['x-agentgate-timestamp']) + 1) } };
    expect(verifies(fresh)).toBe(false);
  });

  it('a signature header that is not v1 and 64 hex digits is refused', () => {
    for (const signature of ['', 'v1=', 'v0=' + 'a'.repeat(64), 'v1=' + 'g'.repeat(64), 'v1=' + 'a'.repeat(63), String(delivered.headers['x-agentgate-signature']) + '00']) {
      const forged = { ...delivered, headers: { ...delivered.headers, 'x-agentgate-signature': signature } };
      expect(verifies(forged)).toBe(false);
    }
  });
});

describe('retries', () => {
  it('a receiver that fails twice with 503 gets the same notification three times and it counts once', async () => {
    const receiver = await startReceiver((n) => ({ status: n <= 2 ? 503 : 200 }));
    const webhook = sender(receiver.url);
    const sent = notification();
    webhook.send(sent);
    await expect.poll(() => webhook.counters.delivered).toBe(1);
    expect(receiver.received.map((request) => request.id)).toEqual([sent.id, sent.id, sent.id]);
    expect(receiver.received.every((request) => verifies(request))).toBe(true);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 1, failedAttempts: 2, dropped: 0 });
  });

  it('a 429 with Retry-After is retried (the wait is capped at backoffMaxMs)', async () => {
    const receiver = await startReceiver((n) => (n === 1 ? { status: 429, headers: { 'retry-after': '3600' } } : { status: 200 }));
    const webhook = sender(receiver.url, { backoffMaxMs: 20 });
    webhook.send(notification());
    await expect.poll(() => webhook.counters.delivered).toBe(1);
    expect(webhook.counters.failedAttempts).toBe(1);
  });

  it('a 400 is not retried: the notification is dropped and the next one is delivered', async () => {
    const receiver = await startReceiver((n) => ({ status: n === 1 ? 400 : 200 }));
    const webhook = sender(receiver.url);
    const refused = notification();
    const next = notification();
    webhook.send(refused);
    webhook.send(next);
    await expect.poll(() => webhook.counters.delivered).toBe(1);
    // Delivery is in order, one at a time, so the refused one was finished with before `next` went.
    expect(receiver.received.map((request) => request.id)).toEqual([refused.id, next.id]);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 1, failedAttempts: 1, dropped: 1 });
  });

  it('a redirect to another server is not followed, so the signed notification never reaches it', async () => {
    const target = await startReceiver(() => ({ status: 200 }));
    const receiver = await startReceiver((n) => (n === 1 ? { status: 307, headers: { location: target.url } } : { status: 200 }));
    const webhook = sender(receiver.url);
    const redirected = notification();
    const next = notification();
    webhook.send(redirected);
    webhook.send(next);
    await expect.poll(() => webhook.counters.delivered).toBe(1);
    expect(receiver.received.map((request) => request.id)).toEqual([redirected.id, next.id]);
    expect(target.received).toEqual([]);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 1, failedAttempts: 1, dropped: 1 });
  });

  it('a receiver that never answers times out on every attempt and the notification is dropped after maxAttempts', async () => {
    const receiver = await startReceiver(() => 'hang');
    const webhook = sender(receiver.url, { timeoutMs: 200, maxAttempts: 3 });
    const sent = notification();
    webhook.send(sent);
    await expect.poll(() => webhook.counters.dropped, { timeout: 10_000 }).toBe(1);
    expect(receiver.received.map((request) => request.id)).toEqual([sent.id, sent.id, sent.id]);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 0, failedAttempts: 3, dropped: 1 });
    // Each timed-out attempt's connection was closed by the sender, not left open.
    await expect.poll(() => receiver.hanging()).toBe(0);
  });
});

describe('send', () => {
  it('returns before any delivery starts, even when the receiver hangs', async () => {
    const order: string[] = [];
    const receiver = await startReceiver(() => {
      order.push('received');
      return 'hang';
    });
    const webhook = sender(receiver.url, { timeoutMs: 60_000 });
    for (let i = 1; i <= 3; i++) {
      webhook.send(notification());
      order.push(`returned ${i}`);
      expect(webhook.counters.queued).toBe(i);
    }
    await expect.poll(() => receiver.hanging()).toBe(1);
    expect(order).toEqual(['returned 1', 'returned 2', 'returned 3', 'received']);
    // One delivery at a time: the hanging receiver holds one request, the other two wait.
    expect(receiver.received).toHaveLength(1);
    expect(webhook.counters).toEqual({ queued: 3, delivered: 0, failedAttempts: 0, dropped: 0 });
  });

  it('never throws: an unserialisable, an oversized and a post-close notification are dropped and counted', async () => {
    const receiver = await startReceiver(() => ({ status: 200 }));
    const webhook = sender(receiver.url);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => webhook.send(notification({ amount: 10n }))).not.toThrow();
    expect(() => webhook.send(notification(cyclic))).not.toThrow();
    expect(() => webhook.send(notification({ blob: 'x'.repeat(100_000) }))).not.toThrow();
    await webhook.close(1000);
    expect(() => webhook.send(notification())).not.toThrow();
    expect(webhook.counters).toEqual({ queued: 0, delivered: 0, failedAttempts: 0, dropped: 4 });
    expect(receiver.received).toEqual([]);
  });
});

describe('the queue', () => {
  it('drops the oldest waiting notification when it overflows, and delivers the rest in order', async () => {
    const receiver = await startReceiver((n) => (n === 1 ? 'hang' : { status: 200 }));
    // The first attempt is held unanswered, which holds the queue while more arrive.
    const webhook = sender(receiver.url, { queueMax: 2, maxAttempts: 1 });
    const [first, second, third, fourth] = [notification(), notification(), notification(), notification()];
    webhook.send(first!);
    await expect.poll(() => receiver.hanging()).toBe(1);
    webhook.send(second!);
    webhook.send(third!);
    webhook.send(fourth!);
    expect(webhook.counters).toEqual({ queued: 3, delivered: 0, failedAttempts: 0, dropped: 1 });
    receiver.answerHeld(503);
    await expect.poll(() => webhook.counters.delivered).toBe(2);
    expect(receiver.received.map((request) => request.id)).toEqual([first!.id, third!.id, fourth!.id]);
    // `second` fell off the full queue; `first` failed its only attempt.
    expect(webhook.counters).toEqual({ queued: 0, delivered: 2, failedAttempts: 1, dropped: 2 });
  });
});

describe('close', () => {
  it('resolves within its deadline when the receiver hangs, aborting the attempt and dropping what was left', async () => {
    const receiver = await startReceiver(() => 'hang');
    const webhook = sender(receiver.url, { timeoutMs: 600_000 });
    webhook.send(notification());
    webhook.send(notification());
    await expect.poll(() => receiver.hanging()).toBe(1);
    // The bound only turns a hung close() into a plain failure; it asserts nothing about speed.
    await within(10_000, 'close() with a hanging receiver', webhook.close(100));
    expect(webhook.counters).toEqual({ queued: 0, delivered: 0, failedAttempts: 0, dropped: 2 });
    await expect.poll(() => receiver.hanging()).toBe(0);
  });

  it('waits for the queue to drain when the receiver answers', async () => {
    const receiver = await startReceiver(() => ({ status: 200 }));
    const webhook = sender(receiver.url);
    for (let i = 0; i < 5; i++) webhook.send(notification());
    await webhook.close(10_000);
    expect(webhook.counters).toEqual({ queued: 0, delivered: 5, failedAttempts: 0, dropped: 0 });
    expect(receiver.received).toHaveLength(5);
  });
});

describe('logging', () => {
  it('a log line never carries the secret, the body, or the token in the URL path', async () => {
    const lines: CapturedLine[] = [];
    const receiver = await startReceiver((n) => (n <= 2 ? { status: 503 } : n <= 6 ? { status: 400 } : 'hang'), '/hooks/path-token-XYZ?key=query-token-XYZ');
    const webhook = sender(receiver.url, { logger: capturingLogger(lines), maxAttempts: 2, timeoutMs: 200 });
    for (let i = 0; i < 6; i++) webhook.send(notification({ person: 'alice@example.com' }));
    await expect.poll(() => webhook.counters.dropped, { timeout: 10_000 }).toBe(6);
    await webhook.close(0);
    const written = JSON.stringify(lines);
    expect(lines.length).toBeGreaterThan(0);
    for (const leak of [SECRET, 'alice@example.com', 'path-token-XYZ', 'query-token-XYZ']) expect(written).not.toContain(leak);
    // Four refusals in a row are one line: the rest are counted for the next line in the window.
    expect(lines.filter((line) => line.msg.includes('refused'))).toHaveLength(1);
  });
});

describe('construction', () => {
  it('refuses a secret shorter than 32 characters', () => {
    expect(() => new WebhookSender({ url: 'https://example.test/', secret: 'short', timeoutMs: 1, maxAttempts: 1, backoffBaseMs: 1, backoffMaxMs: 1, queueMax: 1, logger: capturingLogger([]) })).toThrow(RangeError);
  });

  it('refuses a URL that is not http or https', () => {
    expect(() => new WebhookSender({ url: 'file:///etc/passwd', secret: SECRET, timeoutMs: 1, maxAttempts: 1, backoffBaseMs: 1, backoffMaxMs: 1, queueMax: 1, logger: capturingLogger([]) })).toThrow(RangeError);
  });
});
