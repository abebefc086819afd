// Slow and greedy clients cannot hold the server's connections (SECURITY.md): a
// header or body trickle is cut within its timeout, one address cannot take every connection,
// the total is capped, and idle or long-lived keep-alive connections end. The real start-up path
// (src/main.ts) runs with small limits so each attack finishes in a second or two.
//
// Timing: a bound on how soon the server acts is only as tight as it must be to tell the limit under
// test from what would happen without it (a default timeout many times longer, or nothing at all),
// plus SLACK_MS for a busy machine that runs the server's timers late. The connection caps are
// tested on servers whose timeouts are long, so that only the cap can close a connection there.
import { get } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { createHttpServer } from '../../src/http/server.ts';
import { startAgentgate, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { waitFor } from '../support/net.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { within } from '../support/within.ts';

/** The settings of the three HTTP timeouts. */
const httpTimeouts = (headersMs: number, requestMs: number, keepAliveMs: number) => ({
  HTTP_HEADERS_TIMEOUT_MS: String(headersMs),
  HTTP_REQUEST_TIMEOUT_MS: String(requestMs),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: String(keepAliveMs),
});

// The server whose timeouts are under test, and whose sockets serve a few requests each.
const HEADERS_TIMEOUT_MS = 1000;
const REQUEST_TIMEOUT_MS = 2000;
const KEEP_ALIVE_TIMEOUT_MS = 1000;
const MAX_REQUESTS_PER_SOCKET = 3;
const shortTimeouts = { ...httpTimeouts(HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS), HTTP_MAX_REQUESTS_PER_SOCKET: String(MAX_REQUESTS_PER_SOCKET) };

// Node checks the header and request timeouts every min(1000, headers timeout / 2) ms.
const CHECK_INTERVAL_MS = 500;
// Node 24.6 and later keep an idle keep-alive socket this much longer than the timeout.
const KEEP_ALIVE_BUFFER_MS = 1000;
// How late a busy machine may run the server's timers. Each bound below stays under the defaults
// (a 10 s headers timeout, a 30 s request timeout, a 5 s keep-alive timeout) it must be told from.
const SLACK_MS = 3000;

// The capped servers' timeouts: no held connection of a test ends by timing out, however slow it runs.
const LONG_TIMEOUT_MS = 120_000;
const longTimeouts = httpTimeouts(LONG_TIMEOUT_MS, LONG_TIMEOUT_MS, LONG_TIMEOUT_MS);
// The caps under test, each on a server of its own.
const PER_ADDRESS_MAX = 20;
const MAX_CONNECTIONS = 10;
const WORKERS = 2;
const MAX_CONNECTIONS_PER_WORKER = 4;

const opened: Socket[] = [];
const servers: Agentgate[] = [];

/**
 * GET /healthz on a fresh connection that is closed after the answer (no pooled keep-alive socket
 * may linger and count against the limits under test). The status, or the error's code.
 */
function healthz(port: number, localAddress = '127.0.0.1'): Promise<number | string> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, path: '/healthz', localAddress, agent: false, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

interface Opened {
  socket: Socket;
  /** Resolves when the server closes the connection: how long it stayed open, and what it sent. */
  closed: Promise<{ openMs: number; received: string }>;
  isOpen: () => boolean;
  /** Everything received so far. */
  text: () => string;
}

/** A raw TCP connection from `localAddress`, once connected; destroyed after the test at the latest. */
function open(port: number, localAddress = '127.0.0.1'): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    opened.push(socket);
    let received = '';
    let open = true;
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (received += chunk));
    // A reset or a write after the server closed is the expected end here, not a failure.
    socket.on('error', () => {});
    socket.once('connect', () => {
      const connectedAt = performance.now();
      const closed = new Promise<{ openMs: number; received: string }>((done) =>
        socket.once('close', () => {
          open = false;
          done({ openMs: performance.now() - connectedAt, received });
        }),
      );
      resolve({ socket, closed, isOpen: () => open, text: () => received });
    });
    socket.once('close', () => reject(new Error('closed before connecting')));
  });
}

/** Writes `bytes` one character every `everyMs` until the socket closes (or `bytes` runs out). */
function trickle(socket: Socket, bytes: string, everyMs = 200): void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= bytes.length) return clearInterval(timer);
    socket.write(bytes[i++]!);
  }, everyMs);
  socket.once('close', () => clearInterval(timer));
}

/** Reads one whole response (head plus Content-Length body) from a raw socket, after `from` characters. */
async function response(conn: Opened, from: number): Promise<{ head: string; end: number }> {
  return within(
    10_000,
    'a whole response',
    (async () => {
      for (;;) {
        const text = conn.text().slice(from);
        const headEnd = text.indexOf('\r\n\r\n');
        if (headEnd >= 0) {
          const head = text.slice(0, headEnd);
          const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (text.length >= headEnd + 4 + length) return { head, end: from + headEnd + 4 + length };
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    })(),
  );
}

const GET_HEALTHZ = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';

let limited: Agentgate;
let perAddress: Agentgate;
let capped: Agentgate;
let cluster: Agentgate;
let redisUrl: string;
const prefix = uniquePrefix('http-limits');

beforeAll(async () => {
  redisUrl = await redisUrlForTests();
  // Started together, each waits for its own start-up line (test/support/agentgate-process.ts).
  const starting = [
    startAgentgate({ env: shortTimeouts }),
    startAgentgate({ env: { ...longTimeouts, HTTP_MAX_CONNECTIONS_PER_ADDRESS: String(PER_ADDRESS_MAX) } }),
    // Per-address limit off, so the total cap is what refuses.
    startAgentgate({ env: { ...longTimeouts, HTTP_MAX_CONNECTIONS: String(MAX_CONNECTIONS), HTTP_MAX_CONNECTIONS_PER_ADDRESS: '0' } }),
    startAgentgate({
      env: {
        ...longTimeouts,
        WORKERS: String(WORKERS),
        REDIS_URL: redisUrl,
        REDIS_KEY_PREFIX: prefix,
        HTTP_MAX_CONNECTIONS: String(MAX_CONNECTIONS_PER_WORKER),
        HTTP_MAX_CONNECTIONS_PER_ADDRESS: '0',
      },
    }),
  ];
  // The ones that did start are stopped after the tests even when another one failed.
  const settled = await Promise.allSettled(starting);
  servers.push(...settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : [])));
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw failed.reason;
  [limited, perAddress, capped, cluster] = servers as [Agentgate, Agentgate, Agentgate, Agentgate];
}, WITH_SERVERS_TIMEOUT_MS);

afterAll(async () => {
  for (const socket of opened) socket.destroy();
  await Promise.all(servers.map((server) => server.stop('SIGKILL')));
  if (redisUrl) await deletePrefix(redisUrl, prefix);
});

describe('slow clients (header and body trickles)', () => {
  it('a header trickle is cut within the headers timeout, with 408', async () => {
    const conn = await open(limited.port);
    conn.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    trickle(conn.socket, 'X-Slow: ' + 'a'.repeat(100));
    const limitMs = HEADERS_TIMEOUT_MS + CHECK_INTERVAL_MS + SLACK_MS;
    const { openMs, received } = await within(limitMs, 'closing a header trickle', conn.closed);
    expect(openMs).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 100);
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
  });

  it('a body trickle is cut within the request timeout, with 408', async () => {
    const conn = await open(limited.port);
    // express.json reads the whole body before routing, so the handler waits for every byte.
    conn.socket.write('POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":"');
    trickle(conn.socket, 'b'.repeat(990));
    const limitMs = REQUEST_TIMEOUT_MS + CHECK_INTERVAL_MS + SLACK_MS;
    const { openMs, received } = await within(limitMs, 'closing a body trickle', conn.closed);
    expect(openMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 100);
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
  });
});

describe('connection caps', () => {
  it('sockets beyond the per-address cap are closed at once and /healthz still answers other addresses', async () => {
    // Loopback is all of 127.0.0.0/8 on Linux, so one test can be several clients.
    const flood = await Promise.all(Array.from({ length: PER_ADDRESS_MAX }, () => open(perAddress.port, '127.0.0.3')));
    for (const conn of flood) conn.socket.write('GET /healthz HTTP/1.1\r\n');
    const extra = await Promise.all(Array.from({ length: 5 }, () => open(perAddress.port, '127.0.0.3')));
    for (const conn of extra) {
      // Closed without a word: only the cap does that here (a timeout would answer 408, and the
      // timeouts of this server are longer than the test).
      const { received } = await within(SLACK_MS, 'refusing a socket beyond the per-address cap', conn.closed);
      expect(received).toBe('');
    }
    expect(flood.every((conn) => conn.isOpen())).toBe(true);
    expect(await healthz(perAddress.port, '127.0.0.2')).toBe(200);
    expect(await healthz(perAddress.port, '127.0.0.3')).not.toBe(200);
    // Slots come back when the flood's sockets close.
    for (const conn of flood) conn.socket.destroy();
    await waitFor(async () => (await healthz(perAddress.port, '127.0.0.3')) === 200);
  });

  it('connections beyond HTTP_MAX_CONNECTIONS are refused at once, and accepted again once some close', async () => {
    const held = await Promise.all(Array.from({ length: MAX_CONNECTIONS }, (_, i) => open(capped.port, `127.0.0.${10 + i}`)));
    for (const conn of held) conn.socket.write('GET /healthz HTTP/1.1\r\n');
    const extra = await open(capped.port, '127.0.0.50');
    const { received } = await within(SLACK_MS, 'refusing a connection beyond HTTP_MAX_CONNECTIONS', extra.closed);
    expect(received).toBe('');
    expect(held.every((conn) => conn.isOpen())).toBe(true);
    expect(await healthz(capped.port, '127.0.0.2')).not.toBe(200);
    held[0]!.socket.destroy();
    await waitFor(async () => (await healthz(capped.port, '127.0.0.2')) === 200);
  });

  it('in cluster mode, connections beyond every worker\'s cap are closed at once, not passed around', async () => {
    // Node's own maxConnections would hand each refused socket back to the primary, which offers it
    // to a worker again at once: nothing is ever closed and the primary spins.
    const total = WORKERS * MAX_CONNECTIONS_PER_WORKER + 6;
    const conns = await Promise.all(Array.from({ length: total }, (_, i) => open(cluster.port, `127.0.1.${10 + i}`)));
    // The timeouts of this server are longer than the test, so only the caps close connections
    // here: at least the 6 beyond them, each without an answer. Were they passed around instead,
    // none would close and the wait would fail.
    const closed = () => conns.filter((conn) => !conn.isOpen());
    await waitFor(async () => closed().length >= total - WORKERS * MAX_CONNECTIONS_PER_WORKER);
    expect(closed().map((conn) => conn.text())).toEqual(closed().map(() => ''));
  });
});

describe('keep-alive limits', () => {
  it('an idle keep-alive connection is closed after the keep-alive timeout', async () => {
    const conn = await open(limited.port);
    conn.socket.write(GET_HEALTHZ);
    const { head } = await response(conn, 0);
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    expect(head).toMatch(/keep-alive: timeout=1/i);
    const idleFrom = performance.now();
    // Under the 5 s default and its buffer, which a server without the setting would keep it open for.
    await within(KEEP_ALIVE_TIMEOUT_MS + KEEP_ALIVE_BUFFER_MS + SLACK_MS, 'closing an idle keep-alive connection', conn.closed);
    expect(performance.now() - idleFrom).toBeGreaterThanOrEqual(KEEP_ALIVE_TIMEOUT_MS - 100);
  });

  it('a connection is closed after HTTP_MAX_REQUESTS_PER_SOCKET requests', async () => {
    const conn = await open(limited.port);
    let from = 0;
    const heads: string[] = [];
    for (let i = 0; i < MAX_REQUESTS_PER_SOCKET; i++) {
      conn.socket.write(GET_HEALTHZ);
      const { head, end } = await response(conn, from);
      heads.push(head);
      from = end;
    }
    expect(heads.every((head) => /^HTTP\/1\.1 200 /.test(head))).toBe(true);
    expect(heads.at(-2)).toMatch(/connection: keep-alive/i);
    expect(heads.at(-1)).toMatch(/connection: close/i);
    await within(SLACK_MS, 'closing the connection after its last allowed request', conn.closed);
  });

  it('HTTP_KEEP_ALIVE_TIMEOUT_MS=0 closes each connection after its response (Node alone would never close it)', async () => {
    const server = createHttpServer(loadConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '0' }), (_req, res) => res.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const address = server.address();
      if (typeof address !== 'object' || !address) throw new Error('no address');
      const conn = await open(address.port);
        conn.socket.write(GET_HEALTHZ);
      const { head } = await response(conn, 0);
      expect(head).toMatch(/connection: close/i);
      await within(SLACK_MS, 'closing the connection after its response', conn.closed);
    } finally {
      server.close();
    }
  });
});

describe('configuration', () => {
  it('refuses a headers timeout longer than the request timeout (the old 66 s / 30 s pair)', () => {
    expect(() => loadConfig({ HTTP_HEADERS_TIMEOUT_MS: '66000', HTTP_REQUEST_TIMEOUT_MS: '30000' })).toThrow(ConfigError);
    expect(() => loadConfig({ HTTP_HEADERS_TIMEOUT_MS: '66000', HTTP_REQUEST_TIMEOUT_MS: '30000' })).toThrow(/HTTP_HEADERS_TIMEOUT_MS: must not exceed HTTP_REQUEST_TIMEOUT_MS/);
    expect(() => loadConfig({ HTTP_HEADERS_TIMEOUT_MS: '30000', HTTP_REQUEST_TIMEOUT_MS: '30000' })).not.toThrow();
  });
});
