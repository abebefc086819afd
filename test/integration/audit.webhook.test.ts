// Forwarding the audit trail to a webhook (AUDIT_WEBHOOK_URL), against a real
// local HTTP receiver: a receiver that hangs and then fails gets the same batch again with
// exponential backoff and every event exactly once, while requests keep being served at once; two
// instances on one Redis deliver each event once between them; and an instance that stops hands
// what it held to the next one.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { AuditEvent } from '../../src/audit/events.ts';
import type { Store } from '../../src/store/store.ts';
import { Client } from '../support/client.ts';
import { uniquePrefix } from '../support/redis.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

interface Attempt {
  atMs: number;
  ids: string[];
}

interface Receiver {
  url: string;
  attempts: Attempt[];
  /** Ids of every event in a batch answered 2xx, in arrival order (repeats kept, to be counted). */
  accepted: string[];
  /** Deliveries the receiver is holding unanswered right now (the sender has not given up on them). */
  hanging(): number;
  close(): Promise<void>;
}

/** A webhook receiver; `answer(n)` decides attempt n (1-based): a status, or 'hang' (never answers). */
async function startReceiver(answer: (attempt: number) => number | 'hang', delayMs = 0): Promise<Receiver> {
  const attempts: Attempt[] = [];
  const accepted: string[] = [];
  let hanging = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { events: AuditEvent[] };
      const ids = body.events.map((event) => event.id);
      attempts.push({ atMs: Date.now(), ids });
      const outcome = answer(attempts.length);
      if (outcome === 'hang') {
        hanging += 1;
        res.once('close', () => (hanging -= 1));
        return;
      }
      setTimeout(() => {
        if (outcome >= 200 && outcome < 300) accepted.push(...ids);
        res.writeHead(outcome, { 'content-type': 'application/json' }).end('{}');
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/audit`,
    attempts,
    accepted,
    hanging: () => hanging,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Every id the trail holds, oldest first (bounded: the tests write a few hundred at most). */
async function trailIds(store: Store): Promise<string[]> {
  const ids: string[] = [];
  let before: string | null = null;
  for (let page = 0; page < 20; page++) {
    const events = await store.readAuditEvents(before, 1000);
    ids.push(...events.map((event) => event.id));
    if (events.length < 1000) return ids.reverse();
    before = events.at(-1)!.id;
  }
  throw new Error('the trail is longer than this test wrote');
}

/** Waits until the receiver has accepted every event the trail holds now (bounded by the test's time). */
async function allDelivered(receiver: Receiver, store: Store, timeoutMs = 20_000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ids = await trailIds(store);
    const accepted = new Set(receiver.accepted);
    if (ids.length > 0 && ids.every((id) => accepted.has(id))) return ids;
    if (Date.now() > deadline) throw new Error(`${ids.filter((id) => !accepted.has(id)).length} of ${ids.length} events were never delivered`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const item of opened.splice(0).reverse()) await item.close();
});
afterAll(async () => {
  for (const item of opened.splice(0).reverse()) await item.close();
});

async function server(options: Parameters<typeof startTestServer>[0]): Promise<TestServer> {
  const started = await startTestServer(options);
  opened.push(started);
  return started;
}

forEachStore('the audit webhook', (storeKind) => {
  it('a receiver that hangs, then fails, gets the same batch again with backoff, every event once, and requests are not held up', async () => {
    const receiver = await startReceiver((attempt) => (attempt === 1 ? 'hang' : attempt === 2 ? 500 : 200));
    opened.push(receiver);
    // Long enough for a busy machine to serve the five executes below while the first delivery hangs.
    const timeoutMs = 5000;
    const instance = await server({
      store: storeKind,
      env: { AUDIT_WEBHOOK_URL: receiver.url, AUDIT_WEBHOOK_TIMEOUT_MS: String(timeoutMs), AUDIT_FLUSH_MS: '100' },
    });
    const c = new Client(instance);
    const agent = await c.activeAgent(['echo']);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    await expect.poll(() => receiver.attempts.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(1);

    // The first delivery hangs right now; requests are served as usual. They are all answered while
    // it still hangs: had they waited for it, they would have been answered only once the sender gave
    // up on it. (An order, not a duration, so a busy machine cannot fail it.)
    for (let i = 0; i < 5; i++) expect((await c.execute(agent, 'echo', { i })).status).toBe(200);
    expect(receiver.hanging()).toBe(1);

    const ids = await allDelivered(receiver, instance.store);
    expect(receiver.accepted).toHaveLength(new Set(receiver.accepted).size);
    expect(new Set(receiver.accepted)).toEqual(new Set(ids));
    const [first, second, third] = receiver.attempts;
    expect(second!.ids).toEqual(first!.ids);
    expect(third!.ids).toEqual(first!.ids);
    // Backoff after failure n is at least half of 1 s × 2^(n-1): 0.5 s after the timeout, then 1 s.
    expect(second!.atMs - first!.atMs).toBeGreaterThanOrEqual(timeoutMs + 500 - 50);
    expect(third!.atMs - second!.atMs).toBeGreaterThanOrEqual(1000 - 50);
    // The receiver records a batch when it receives it; the forwarder counts it once the 2xx came back
    // and the batch is acknowledged, a moment later: the count is waited for, not read at once.
    await expect.poll(() => instance.audit.forwarder!.counters.delivered).toBe(ids.length);
    expect(instance.audit.forwarder!.counters).toMatchObject({ failedAttempts: 2, delivered: ids.length });
  }, 60_000);
});

describe('the audit webhook with several instances on one Redis', () => {
  it('two instances deliver each event once between them', async () => {
    const receiver = await startReceiver(() => 200, 50);
    opened.push(receiver);
    const redisPrefix = uniquePrefix('audit-two');
    const env = { AUDIT_WEBHOOK_URL: receiver.url, AUDIT_WEBHOOK_BATCH_SIZE: '5', AUDIT_FLUSH_MS: '100' };
    const one = await server({ store: 'redis', redisPrefix, env });
    const two = await server({ store: 'redis', redisPrefix, env });
    const agent = await new Client(one).activeAgent(['echo']);
    const clients = [new Client(one), new Client(two)];
    for (let i = 0; i < 30; i++) expect((await clients[i % 2]!.execute(agent, 'echo', { i })).status).toBe(200);

    const ids = await allDelivered(receiver, one.store);
    expect(ids.length).toBeGreaterThan(30);
    expect(receiver.accepted).toHaveLength(new Set(receiver.accepted).size);
    // Counted once each 2xx came back, a moment after the receiver recorded the batch: waited for.
    const delivered = () => one.audit.forwarder!.counters.delivered + two.audit.forwarder!.counters.delivered;
    await expect.poll(delivered).toBe(receiver.accepted.length);
  }, 30_000);

  it('an instance that stops gives back what it held, and the next one delivers it, once', async () => {
    const failing = await startReceiver(() => 503);
    const working = await startReceiver(() => 200);
    opened.push(failing, working);
    const redisPrefix = uniquePrefix('audit-restart');
    const before = await server({ store: 'redis', redisPrefix, env: { AUDIT_WEBHOOK_URL: failing.url, AUDIT_FLUSH_MS: '100' } });
    const c = new Client(before);
    const agent = await c.activeAgent(['echo']);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    await expect.poll(() => failing.attempts.length, { timeout: 5000 }).toBeGreaterThanOrEqual(1);
    const held = failing.attempts[0]!.ids;

    // What a restart does: the stopping instance writes its queue and gives back what it held.
    await before.audit.close();
    const after = await server({ store: 'redis', redisPrefix, env: { AUDIT_WEBHOOK_URL: working.url, AUDIT_FLUSH_MS: '100' } });
    const ids = await allDelivered(working, after.store);
    expect(working.accepted).toHaveLength(new Set(working.accepted).size);
    expect(new Set(working.accepted)).toEqual(new Set(ids));
    expect(working.accepted).toEqual(expect.arrayContaining(held));
    // Given back at once, not after the minute an abandoned event waits.
    expect(working.attempts[0]!.atMs - failing.attempts.at(-1)!.atMs).toBeLessThan(10_000);
  }, 30_000);
});
