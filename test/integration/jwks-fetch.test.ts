// The JWKS fetcher (src/auth/jwks-fetch.ts) against real local servers: an HTTPS server with a
// certificate from a throwaway CA (made with openssl, as store.redis-tls.test.ts does), listening on
// 127.0.0.1 and, on the same port, on 127.0.0.2; a plain HTTP server; and a TCP server that accepts
// connections and never speaks. A fake resolver maps test names (jwks.test, internal.test, ...) to
// those addresses, and every server counts the TCP connections it accepts, so each test can show
// not only that a fetch was refused but that nothing was connected to.
//
// Loopback is forbidden like any private range, so tests that must reach the server opt in the way an
// operator would: allowedPrivateRanges ['127.0.0.1/32']. Where a test needs a "public" address next
// to a forbidden one (DNS rebinding), 127.0.0.2 plays the public address (allowed) and 127.0.0.1
// the internal one (not allowed), since no test may leave the machine.
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, isIP, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchJwks, JwksFetchError, type JwksFetchSettings } from '../../src/auth/jwks-fetch.ts';
import { makeTestCertificates } from '../support/certificates.ts';

/** Names the fake resolver knows, and what each resolves to. */
const NAMES: Record<string, string[]> = {
  'jwks.test': ['127.0.0.1'],
  'other.jwks.test': ['127.0.0.1'],
  // Not in the server certificate's names.
  'wrong.test': ['127.0.0.1'],
  // The "internal" server on 127.0.0.2, which tests never allow.
  'internal.test': ['127.0.0.2'],
  'metadata.test': ['169.254.169.254'],
  'metadata-v6.test': ['fd00:ec2::254'],
  'mapped.test': ['::ffff:127.0.0.1'],
  // One allowed address and one private one: every answer must pass, not just the first.
  'mixed.test': ['127.0.0.1', '10.0.0.7'],
  'empty.test': [],
  'garbage.test': ['not-an-address'],
};

let dir: string;
let ca: string;
let port: number;
let httpPort: number;
let silentPort: number;
const servers: Array<Server | TcpServer> = [];
const silentSockets = new Set<Socket>();
const dribblers = new Set<NodeJS.Timeout>();

/** TCP connections accepted, by listener. */
const connections = { loopback: 0, second: 0, http: 0, silent: 0 };
/** Every request the HTTPS servers saw, in order. */
const seen: Array<{ listener: 'loopback' | 'second'; path: string; headers: IncomingHttpHeaders; servername: string | false | null | undefined }> = [];

const ed25519 = { ...generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }) };
const p256 = { ...generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' }) };
const GOOD_SET = { keys: [{ ...ed25519, kid: 'ed-1', use: 'sig' }, { ...p256, kid: 'p256-1' }] };

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/jwk-set+json' }).end(JSON.stringify(body));
}

function redirect(res: ServerResponse, status: number, location: string): void {
  res.writeHead(status, { location }).end();
}

/** The routes every case needs. The path decides; the query is ignored (it may hold a test secret). */
function handle(listener: 'loopback' | 'second', req: IncomingMessage, res: ServerResponse): void {
  const path = new URL(req.url ?? '/', 'https://jwks.test').pathname;
  seen.push({ listener, path, headers: req.headers, servername: (req.socket as TLSSocket).servername });
  const [, route = '', arg = ''] = path.split('/');
  switch (route) {
    case 'good':
    case 'echo':
      return sendJson(res, 200, GOOD_SET);
    case 'chain': {
      // /chain/N redirects N times before the set, alternating the redirect statuses and relative
      // and absolute Locations (the absolute ones to another name for the same server).
      const left = Number(arg);
      if (left <= 0) return sendJson(res, 200, GOOD_SET);
      const status = [301, 302, 307, 308][left % 4]!;
      return redirect(res, status, left % 2 === 0 ? `${left - 1}` : `https://other.jwks.test:${port}/chain/${left - 1}`);
    }
    case 'loop':
      return redirect(res, 302, '/loop');
    case 'to-self':
      return redirect(res, 302, '/good');
    case 'to-http':
      return redirect(res, 302, `http://jwks.test:${httpPort}/good`);
    case 'to-file':
      return redirect(res, 302, 'file:///etc/passwd');
    case 'to-internal':
      return redirect(res, 302, `https://internal.test:${port}/good?token=S3CRET-IN-LOCATION`);
    case 'to-metadata':
      return redirect(res, 302, 'https://169.254.169.254/latest/meta-data/iam/security-credentials/');
    case 'to-credentials':
      return redirect(res, 302, `https://user:password@jwks.test:${port}/good`);
    case 'no-location':
      return void res.writeHead(302).end();
    case 'status':
      // A valid set in the body, to show that only the status decides.
      return sendJson(res, Number(arg), GOOD_SET);
    case 'not-json':
      return void res.writeHead(200, { 'content-type': 'application/json' }).end('this is not json');
    case 'html':
      return void res.writeHead(200, { 'content-type': 'application/json' }).end('<html><body>Service Unavailable</body></html>');
    case 'bad-utf8':
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(Buffer.from([0x22, 0xff, 0xfe, 0x22]));
    case 'keys': {
      const count = Number(arg);
      return sendJson(res, 200, { keys: Array.from({ length: count }, (_, i) => ({ ...ed25519, kid: `k${i}` })) });
    }
    case 'oct':
      return sendJson(res, 200, { keys: [{ kty: 'oct', kid: 'hmac', k: 'c2VjcmV0LXNoYXJlZC13aXRoLWV2ZXJ5b25l' }] });
    case 'private':
      return sendJson(res, 200, { keys: [{ ...generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }), kid: 'oops' }] });
    case 'empty-object':
      return sendJson(res, 200, {});
    case 'padded': {
      // The good set padded with spaces to exactly `arg` bytes; streamed without a Content-Length
      // when ?chunked, so only counting the bytes as they arrive can enforce the cap.
      const json = JSON.stringify(GOOD_SET);
      const body = json + ' '.repeat(Math.max(0, Number(arg) - json.length));
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.url?.includes('chunked')) {
        res.write(body.slice(0, 100));
        return void res.end(body.slice(100));
      }
      return void res.end(body);
    }
    case 'endless': {
      // A body that would go on for 64 MiB (bounded, so a broken client cannot make the test run
      // forever), written as fast as the client reads it, with no Content-Length.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"keys":[');
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let sent = 0;
      const pump = (): void => {
        while (sent < 1024 && !res.destroyed) {
          sent++;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        if (!res.destroyed) res.end(']}');
      };
      return pump();
    }
    case 'huge-length':
      // Declares 10 GiB and then sends nothing: a client that waited for the body would time out.
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(10 * 1024 ** 3) });
      return void res.flushHeaders();
    case 'never':
      // Accepts the request and never answers; the connection is closed by the client or afterAll.
      return;
    case 'slowloris': {
      // A 200 and then one byte every 50 ms, for at most 2,000 bytes (100 s), so the body never
      // completes within any reasonable deadline but the server never looks idle either.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"keys":[');
      let dribbled = 0;
      const timer = setInterval(() => {
        if (res.destroyed || dribbled >= 2000) {
          clearInterval(timer);
          dribblers.delete(timer);
          return;
        }
        dribbled++;
        res.write(' ');
      }, 50);
      dribblers.add(timer);
      res.on('close', () => {
        clearInterval(timer);
        dribblers.delete(timer);
      });
      return;
    }
    default:
      return sendJson(res, 404, { error: 'no such route' });
  }
}

function listen(server: Server | TcpServer, host: string, onPort = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(onPort, host, () => resolve((server.address() as AddressInfo).port));
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentgate-jwks-'));
  // A CA and a server certificate for the test names, signed by it.
  makeTestCertificates(dir, {
    commonName: 'jwks.test', caName: 'agentgate JWKS test CA',
    altNames: ['DNS:jwks.test', 'DNS:other.jwks.test', 'DNS:internal.test', 'DNS:rebind.test', 'DNS:localhost', 'IP:127.0.0.1'],
  });
  ca = readFileSync(join(dir, 'ca.crt'), 'utf8');
  const tls = { key: readFileSync(join(dir, 'server.key')), cert: readFileSync(join(dir, 'server.crt')) };

  const loopback = createHttpsServer(tls, (req, res) => handle('loopback', req, res));
  loopback.on('connection', () => connections.loopback++);
  servers.push(loopback);
  port = await listen(loopback, '127.0.0.1');
  // The same application on 127.0.0.2 and the same port, so one URL reaches either address
  // depending only on what the name resolved to.
  const second = createHttpsServer(tls, (req, res) => handle('second', req, res));
  second.on('connection', () => connections.second++);
  servers.push(second);
  await listen(second, '127.0.0.2', port);

  const http = createHttpServer((_req, res) => sendJson(res, 200, GOOD_SET));
  http.on('connection', () => connections.http++);
  servers.push(http);
  httpPort = await listen(http, '127.0.0.1');

  // Accepts TCP connections and never says a word, so a TLS handshake never completes.
  const silent = createTcpServer((socket) => {
    connections.silent++;
    silentSockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => silentSockets.delete(socket));
  });
  servers.push(silent);
  silentPort = await listen(silent, '127.0.0.1');
});

afterAll(async () => {
  for (const timer of dribblers) clearInterval(timer);
  for (const socket of silentSockets) socket.destroy();
  await Promise.all(
    servers.map(
      (server) =>
        new Promise<void>((resolve) => {
          if ('closeAllConnections' in server) server.closeAllConnections();
          server.close(() => resolve());
        }),
    ),
  );
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A fake resolver over NAMES (or a given table) that records what it was asked. */
function fakeResolver(names: Record<string, string[]> = NAMES) {
  const calls: string[] = [];
  const lookup = async (hostname: string) => {
    calls.push(hostname);
    const addresses = names[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: (isIP(address) === 6 ? 6 : 4) as 4 | 6 }));
  };
  return { lookup, calls };
}

/** Settings that reach the local server: loopback allowed, names from NAMES, the test CA trusted. */
function settings(overrides: Partial<JwksFetchSettings> = {}): JwksFetchSettings {
  return {
    timeoutMs: 5_000,
    connectTimeoutMs: 2_000,
    maxBytes: 1024 * 1024,
    maxRedirects: 3,
    allowedPrivateRanges: ['127.0.0.1/32'],
    lookup: fakeResolver().lookup,
    ca,
    ...overrides,
  };
}

/** The JwksFetchError a fetch fails with; the test fails if it succeeds or throws anything else. */
async function failure(url: string, with_: JwksFetchSettings): Promise<JwksFetchError> {
  try {
    await fetchJwks(url, with_);
  } catch (error) {
    expect(error).toBeInstanceOf(JwksFetchError);
    return error as JwksFetchError;
  }
  throw new Error(`expected fetching ${url} to fail`);
}

/** Counts connections during `run`. */
async function counting<T>(run: () => Promise<T>): Promise<{ result: T; made: typeof connections }> {
  const before = { ...connections };
  const result = await run();
  return {
    result,
    made: {
      loopback: connections.loopback - before.loopback,
      second: connections.second - before.second,
      http: connections.http - before.http,
      silent: connections.silent - before.silent,
    },
  };
}

const NONE = { loopback: 0, second: 0, http: 0, silent: 0 };

describe('rule 1: https only, checked before any I/O', () => {
  it('a plain http: JWKS URL (readable and forgeable in transit) is refused before any lookup or connection', async () => {
    const resolver = fakeResolver();
    const { result, made } = await counting(() => failure(`http://jwks.test:${httpPort}/good`, settings({ lookup: resolver.lookup })));
    expect(result.reason).toBe('not_https');
    expect(made).toEqual(NONE);
    expect(resolver.calls).toEqual([]);
  });

  it('file:, ftp:, gopher:, data: and javascript: URLs (local files and other protocols) are refused before any I/O', async () => {
    const resolver = fakeResolver();
    for (const url of ['file:///etc/passwd', 'ftp://jwks.test/jwks.json', 'gopher://jwks.test:70/_GET', 'data:application/json,{"keys":[]}', 'javascript:alert(1)']) {
      expect((await failure(url, settings({ lookup: resolver.lookup }))).reason, url).toBe('not_https');
    }
    expect(resolver.calls).toEqual([]);
  });

  it('a URL carrying a user name and password (credentials we would hand to whoever answers) is refused', async () => {
    const { result, made } = await counting(() => failure(`https://user:password@jwks.test:${port}/good`, settings()));
    expect(result.reason).toBe('not_https');
    expect(result.message).not.toContain('password@');
    expect(made).toEqual(NONE);
  });

  it('something that is not an absolute URL is refused without being repeated', async () => {
    const error = await failure('/relative/S3CRET', settings());
    expect(error.reason).toBe('not_https');
    expect(error.message).not.toContain('S3CRET');
  });
});

describe('rule 2: every resolved address is checked', () => {
  it('a JWKS URL that resolves to 169.254.169.254 (cloud metadata) is refused before any connection', async () => {
    const error = await failure(`https://metadata.test:${port}/latest/meta-data/`, settings());
    expect(error.reason).toBe('forbidden_address');
    expect(error.message).toContain('169.254.169.254');
  });

  it('a JWKS URL naming the metadata service as an IP literal is refused without even a DNS lookup', async () => {
    const resolver = fakeResolver();
    const error = await failure('https://169.254.169.254/latest/meta-data/iam/security-credentials/', settings({ lookup: resolver.lookup }));
    expect(error.reason).toBe('forbidden_address');
    expect(resolver.calls).toEqual([]);
  });

  it('a JWKS URL that resolves to unique-local fd00:ec2::254 (IPv6 cloud metadata) is refused', async () => {
    expect((await failure(`https://metadata-v6.test:${port}/`, settings())).reason).toBe('forbidden_address');
  });

  it('a JWKS URL that resolves to loopback (the server itself) is refused with no connection, unless the operator allowed that range', async () => {
    const refused = await counting(() => failure(`https://jwks.test:${port}/good`, settings({ allowedPrivateRanges: [] })));
    expect(refused.result.reason).toBe('forbidden_address');
    expect(refused.made).toEqual(NONE);
    // The same fetch with the operator's explicit opt-in reaches the server.
    const allowed = await counting(() => fetchJwks(`https://jwks.test:${port}/good`, settings()));
    expect(allowed.result.keys.map((k) => k.kid)).toEqual(['ed-1', 'p256-1']);
    expect(allowed.made.loopback).toBe(1);
  });

  it('a JWKS URL naming localhost is refused through the real system resolver too', async () => {
    const { result, made } = await counting(() => failure(`https://localhost:${port}/good`, settings({ lookup: undefined, allowedPrivateRanges: [] })));
    expect(result.reason).toBe('forbidden_address');
    expect(made).toEqual(NONE);
  });

  it('a name that answers an allowed address and a private one (the private one used on some connections) is refused', async () => {
    const { result, made } = await counting(() => failure(`https://mixed.test:${port}/good`, settings()));
    expect(result.reason).toBe('forbidden_address');
    expect(result.message).toContain('10.0.0.7');
    expect(made).toEqual(NONE);
  });

  it('a name that answers an IPv4-mapped IPv6 loopback address (::ffff:127.0.0.1) is refused', async () => {
    const { result, made } = await counting(() => failure(`https://mapped.test:${port}/good`, settings({ allowedPrivateRanges: [] })));
    expect(result.reason).toBe('forbidden_address');
    expect(made).toEqual(NONE);
  });

  it('decimal, octal and hex spellings of 127.0.0.1 in the URL (filter bypasses) are refused', async () => {
    const resolver = fakeResolver();
    for (const host of ['2130706433', '0177.0.0.1', '0x7f.0.0.1', '0x7f000001', '127.1', '017700000001']) {
      const { result, made } = await counting(() => failure(`https://${host}:${port}/good`, settings({ lookup: resolver.lookup, allowedPrivateRanges: [] })));
      expect(result.reason, host).toBe('forbidden_address');
      expect(made, host).toEqual(NONE);
      // The same spellings over plain http are refused even earlier.
      expect((await failure(`http://${host}:${httpPort}/good`, settings({ lookup: resolver.lookup }))).reason, host).toBe('not_https');
    }
    // WHATWG URL parsing turned each into the dotted address, so no name was ever looked up.
    expect(resolver.calls).toEqual([]);
  });

  it('bracketed IPv6 literals for loopback, IPv4-mapped loopback, unique-local and NAT64 metadata are refused', async () => {
    for (const host of ['[::1]', '[0:0:0:0:0:0:0:1]', '[::ffff:127.0.0.1]', '[::ffff:7f00:1]', '[fd00:ec2::254]', '[fe80::1]', '[64:ff9b::a9fe:a9fe]', '[::]', '[::127.0.0.1]']) {
      const { result, made } = await counting(() => failure(`https://${host}:${port}/good`, settings({ allowedPrivateRanges: [] })));
      expect(result.reason, host).toBe('forbidden_address');
      expect(made, host).toEqual(NONE);
    }
  });

  it('an IP literal the operator allowed is fetched without a DNS lookup, its certificate checked against the IP', async () => {
    const resolver = fakeResolver();
    const set = await fetchJwks(`https://127.0.0.1:${port}/good`, settings({ lookup: resolver.lookup }));
    expect(set.keys).toHaveLength(2);
    expect(resolver.calls).toEqual([]);
  });

  it('a name that does not resolve, or resolves to nothing, fails as dns', async () => {
    expect((await failure(`https://nowhere.test:${port}/good`, settings())).reason).toBe('dns');
    expect((await failure(`https://empty.test:${port}/good`, settings())).reason).toBe('dns');
  });

  it('a resolver answer that is not an IP address is refused rather than passed to connect', async () => {
    expect((await failure(`https://garbage.test:${port}/good`, settings())).reason).toBe('forbidden_address');
  });
});

describe('rule 3: the connection goes to the address that was checked', () => {
  it('DNS rebinding: a name that answers an allowed address when checked and 127.0.0.1 the next time is never connected on 127.0.0.1', async () => {
    const answers = [['127.0.0.2'], ['127.0.0.1'], ['127.0.0.1']];
    let asked = 0;
    const lookup = async (hostname: string) => {
      expect(hostname).toBe('rebind.test');
      const addresses = answers[Math.min(asked++, answers.length - 1)]!;
      return addresses.map((address) => ({ address, family: 4 as const }));
    };
    const { result, made } = await counting(() => fetchJwks(`https://rebind.test:${port}/good`, settings({ lookup, allowedPrivateRanges: ['127.0.0.2/32'] })));
    expect(result.keys).toHaveLength(2);
    // Resolved once, connected once, to the checked address; nothing reached 127.0.0.1.
    expect(asked).toBe(1);
    expect(made).toEqual({ ...NONE, second: 1 });
  });

  it('DNS rebinding between redirect hops: a redirect back to the same name is resolved and checked again, and 127.0.0.1 is refused', async () => {
    const answers = [['127.0.0.2'], ['127.0.0.1']];
    let asked = 0;
    const lookup = async () => answers[Math.min(asked++, answers.length - 1)]!.map((address) => ({ address, family: 4 as const }));
    const { result, made } = await counting(() => failure(`https://rebind.test:${port}/to-self`, settings({ lookup, allowedPrivateRanges: ['127.0.0.2/32'] })));
    expect(result.reason).toBe('forbidden_address');
    expect(asked).toBe(2);
    expect(made).toEqual({ ...NONE, second: 1 });
  });

  it('a name whose first address refuses connections is fetched from its next checked address, never an unchecked one', async () => {
    // Nothing listens on 127.0.0.3, so that connection is refused before any TCP connection exists
    // and the next answer is tried; both answers were checked (and allowed) before the first attempt.
    const resolver = fakeResolver({ 'other.jwks.test': ['127.0.0.3', '127.0.0.1'] });
    const { result, made } = await counting(() => fetchJwks(`https://other.jwks.test:${port}/good`, settings({ lookup: resolver.lookup, allowedPrivateRanges: ['127.0.0.0/24'] })));
    expect(result.keys).toHaveLength(2);
    expect(made).toEqual({ ...NONE, loopback: 1 });
    expect(resolver.calls).toEqual(['other.jwks.test']);
  });

  it('a certificate for another name is refused even though the connection goes to a checked IP (no trust in the IP alone)', async () => {
    const error = await failure(`https://wrong.test:${port}/good`, settings());
    expect(error.reason).toBe('network');
    expect(error.message).toContain('ERR_TLS_CERT_ALTNAME_INVALID');
  });

  it('a server whose certificate no trusted CA signed (a machine-in-the-middle) is refused', async () => {
    const error = await failure(`https://jwks.test:${port}/good`, settings({ ca: undefined }));
    expect(error.reason).toBe('network');
  });

  it('the TLS server name and the Host header carry the URL\'s host name, not the pinned IP', async () => {
    await fetchJwks(`https://jwks.test:${port}/echo`, settings());
    const request = seen.filter((r) => r.path === '/echo').at(-1)!;
    expect(request.servername).toBe('jwks.test');
    expect(request.headers.host).toBe(`jwks.test:${port}`);
  });
});

describe('rule 4: redirects, each target checked afresh', () => {
  it('a chain of 3 redirects (relative and absolute, 301/302/307/308) is followed to the set', async () => {
    const before = seen.length;
    const set = await fetchJwks(`https://jwks.test:${port}/chain/3`, settings());
    expect(set.keys).toHaveLength(2);
    expect(seen.slice(before).map((r) => r.path)).toEqual(['/chain/3', '/chain/2', '/chain/1', '/chain/0']);
  });

  it('a 4th redirect (a long chain or a redirect loop to tie us up) is refused as too_many_redirects without following it', async () => {
    const before = seen.length;
    const error = await failure(`https://jwks.test:${port}/chain/4`, settings());
    expect(error.reason).toBe('too_many_redirects');
    expect(seen.slice(before).map((r) => r.path)).toEqual(['/chain/4', '/chain/3', '/chain/2', '/chain/1']);

    const loopStart = seen.length;
    expect((await failure(`https://jwks.test:${port}/loop`, settings())).reason).toBe('too_many_redirects');
    expect(seen.length - loopStart).toBe(4);
    expect((await failure(`https://jwks.test:${port}/chain/1`, settings({ maxRedirects: 0 }))).reason).toBe('too_many_redirects');
  });

  it('a redirect to plain http (a downgrade) is refused with no connection to it', async () => {
    const { result, made } = await counting(() => failure(`https://jwks.test:${port}/to-http`, settings()));
    expect(result.reason).toBe('not_https');
    expect(made).toEqual({ ...NONE, loopback: 1 });
  });

  it('a redirect to file: (reading local files) or to a URL with credentials is refused', async () => {
    expect((await failure(`https://jwks.test:${port}/to-file`, settings())).reason).toBe('not_https');
    expect((await failure(`https://jwks.test:${port}/to-credentials`, settings())).reason).toBe('not_https');
  });

  it('a redirect to a name that resolves to a private address (SSRF through a public redirector) is refused with no connection to it', async () => {
    const { result, made } = await counting(() => failure(`https://jwks.test:${port}/to-internal`, settings()));
    expect(result.reason).toBe('forbidden_address');
    expect(result.message).toContain('internal.test');
    expect(made).toEqual({ ...NONE, loopback: 1 });
  });

  it('a redirect to the cloud metadata IP literal is refused', async () => {
    expect((await failure(`https://jwks.test:${port}/to-metadata`, settings())).reason).toBe('forbidden_address');
  });

  it('a redirect status without a Location is refused as http_status', async () => {
    expect((await failure(`https://jwks.test:${port}/no-location`, settings())).reason).toBe('http_status');
  });
});

describe('rule 5: status, size and JSON', () => {
  it('a body that never ends (memory exhaustion) is cut off as too_large as soon as it passes maxBytes', async () => {
    // A deadline far beyond what streaming 1 MiB over loopback takes: a client that buffered the
    // whole body would fail with timeout (or not at all) instead of too_large.
    expect((await failure(`https://jwks.test:${port}/endless`, settings({ timeoutMs: 15_000 }))).reason).toBe('too_large');
  });

  it('a Content-Length over the cap (10 GiB declared) is refused before reading any of the body', async () => {
    // The server sends no body at all after its headers, so only refusing on the header can succeed.
    expect((await failure(`https://jwks.test:${port}/huge-length`, settings({ timeoutMs: 15_000 }))).reason).toBe('too_large');
  });

  it('a body of exactly maxBytes is accepted and one byte more is refused, with or without a Content-Length', async () => {
    for (const query of ['', '?chunked']) {
      expect((await fetchJwks(`https://jwks.test:${port}/padded/4096${query}`, settings({ maxBytes: 4096 }))).keys).toHaveLength(2);
      expect((await failure(`https://jwks.test:${port}/padded/4097${query}`, settings({ maxBytes: 4096 }))).reason, query).toBe('too_large');
    }
  });

  it('a non-200 answer (an error page or an empty answer dressed as a JWKS) is refused as http_status', async () => {
    for (const status of [201, 204, 300, 304, 400, 401, 404, 500, 503]) {
      const error = await failure(`https://jwks.test:${port}/status/${status}`, settings());
      expect(error.reason, String(status)).toBe('http_status');
    }
  });

  it('a body that is not JSON (an HTML page or invalid UTF-8 served as application/json) is refused as not_json', async () => {
    for (const route of ['not-json', 'html', 'bad-utf8']) {
      expect((await failure(`https://jwks.test:${port}/${route}`, settings())).reason, route).toBe('not_json');
    }
  });
});

describe('rule 6: time limits', () => {
  it('a server that accepts the TCP connection and never completes the TLS handshake is cut off by the connect timeout', async () => {
    const { result, made } = await counting(() => failure(`https://jwks.test:${silentPort}/good`, settings({ connectTimeoutMs: 300, timeoutMs: 15_000 })));
    expect(result.reason).toBe('timeout');
    expect(result.message).toMatch(/connecting to 127\.0\.0\.1 did not complete/);
    expect(made.silent).toBe(1);
  });

  it('a server that accepts the request and never answers is cut off by the overall deadline', async () => {
    const error = await failure(`https://jwks.test:${port}/never`, settings({ timeoutMs: 500 }));
    expect(error.reason).toBe('timeout');
    expect(error.message).toMatch(/did not finish within 500 ms/);
  });

  it('a server that dribbles its body one byte at a time (slowloris) is cut off by the overall deadline', async () => {
    const error = await failure(`https://jwks.test:${port}/slowloris`, settings({ timeoutMs: 800 }));
    expect(error.reason).toBe('timeout');
  });

  it('a resolver that never answers is cut off by the overall deadline', async () => {
    const lookup = () => new Promise<Array<{ address: string; family: 4 | 6 }>>(() => {});
    expect((await failure(`https://jwks.test:${port}/good`, settings({ lookup, timeoutMs: 300 }))).reason).toBe('timeout');
  });
});

describe('rule 7: the document must be a JWK Set of public signature keys', () => {
  it('a set of 21 keys (made to have every verification try many keys) is refused as invalid_jwks', async () => {
    expect((await failure(`https://jwks.test:${port}/keys/21`, settings())).reason).toBe('invalid_jwks');
    expect((await fetchJwks(`https://jwks.test:${port}/keys/20`, settings())).keys).toHaveLength(20);
  });

  it('an oct key (a shared secret anyone reading the set could sign with) is refused as invalid_jwks', async () => {
    expect((await failure(`https://jwks.test:${port}/oct`, settings())).reason).toBe('invalid_jwks');
  });

  it('a private key published in the set is refused as invalid_jwks', async () => {
    const error = await failure(`https://jwks.test:${port}/private`, settings());
    expect(error.reason).toBe('invalid_jwks');
    expect(error.message).toMatch(/private/);
  });

  it('JSON that is not a JWK Set is refused as invalid_jwks', async () => {
    expect((await failure(`https://jwks.test:${port}/empty-object`, settings())).reason).toBe('invalid_jwks');
  });
});

describe('rule 8: what we send', () => {
  it('sends only Host, Accept and the fixed User-Agent: no cookies, credentials or Accept-Encoding reach the JWKS host', async () => {
    await fetchJwks(`https://jwks.test:${port}/echo`, settings());
    const { headers } = seen.filter((r) => r.path === '/echo').at(-1)!;
    expect(headers.accept).toBe('application/jwk-set+json, application/json');
    expect(headers['user-agent']).toBe('agentgate-jwks-fetch');
    expect(Object.keys(headers).sort()).toEqual(['accept', 'connection', 'host', 'user-agent']);
  });
});

describe('rule 9: errors name the origin only', () => {
  it('a secret token in the URL\'s path or query (or in a redirect\'s Location) never appears in an error message', async () => {
    const secret = 'S3CRET';
    const cases: Array<[string, JwksFetchSettings]> = [
      [`http://jwks.test:${httpPort}/good/${secret}?token=${secret}`, settings()],
      [`ftp://jwks.test/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/good?token=${secret}`, settings({ allowedPrivateRanges: [] })],
      [`https://metadata.test/${secret}?token=${secret}`, settings()],
      [`https://nowhere.test:${port}/${secret}?token=${secret}`, settings()],
      [`https://wrong.test:${port}/good?token=${secret}`, settings()],
      [`https://jwks.test:${port}/status/404/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/not-json/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/oct/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/endless/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/never/${secret}?token=${secret}`, settings({ timeoutMs: 300 })],
      [`https://jwks.test:${silentPort}/${secret}?token=${secret}`, settings({ connectTimeoutMs: 200 })],
      [`https://jwks.test:${port}/loop/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/to-internal/${secret}?token=${secret}`, settings()],
      [`https://jwks.test:${port}/to-http/${secret}?token=${secret}`, settings()],
    ];
    const reasons = new Set<string>();
    for (const [url, with_] of cases) {
      const error = await failure(url, with_);
      reasons.add(error.reason);
      expect(error.message, url).not.toContain(secret);
      expect(String(error.stack), url).not.toContain(secret);
      // Every message names where it went: the scheme and host (and port) of the URL it concerns.
      expect(error.message, url).toMatch(/(https?:\/\/[a-z0-9.[\]:-]+|the URL does not use https)/);
    }
    expect([...reasons].sort()).toEqual(['dns', 'forbidden_address', 'http_status', 'invalid_jwks', 'network', 'not_https', 'not_json', 'timeout', 'too_large', 'too_many_redirects']);
  });
});
