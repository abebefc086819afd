// What Node's HTTP layer refuses before any handler runs is answered like every other refusal
// (docs/stances.md): with the status Node would send and an {error, message} JSON body, where Node
// alone sends a bare status line. Oversized headers (431), oversized chunk extensions (413), a
// request target with raw non-ASCII bytes (400) and a header trickle (408), on the real start-up
// path (src/main.ts). fetch cannot send most of these, so raw sockets do.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createHttpServer } from '../../src/http/server.ts';
import { startAgentgate, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { newEd25519, signJwt } from '../support/keys.ts';

const HEADERS_TIMEOUT_MS = 500;
// Node's default, which HTTP_MAX_HEADER_BYTES keeps.
const MAX_HEADER_BYTES = 16_384;

let server: Agentgate | undefined;
let port: number;

beforeAll(async () => {
  server = await startAgentgate({ env: { HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS), HTTP_REQUEST_TIMEOUT_MS: '1000' } });
  port = server.port;
}, WITH_SERVERS_TIMEOUT_MS);

afterAll(async () => {
  await server?.stop('SIGKILL');
});

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Connects, writes `request` and reads everything the server sends until it closes the connection:
 * the answers, in order, and the number of bytes after the last whole one (a well-framed answer
 * leaves none). Then, if given: trickles `trickle` a byte every 100 ms, or writes `afterFirstAnswer`
 * once a whole answer has arrived. A reset or a write after the server closed is the expected end
 * here, not a failure.
 */
function exchange(request: string | Buffer, then: { trickle?: string; afterFirstAnswer?: Buffer } = {}): Promise<{ answers: RawAnswer[]; trailing: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    let timer: NodeJS.Timeout | undefined;
    const deadline = setTimeout(() => (socket.destroy(), reject(new Error('the server did not close the connection within 5 s'))), 5000);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (then.afterFirstAnswer && parseAnswers(Buffer.concat(chunks)).answers.length === 1) {
        socket.write(then.afterFirstAnswer);
        then = {};
      }
    });
    socket.on('error', () => {});
    socket.once('connect', () => {
      socket.write(request);
      const trickle = then.trickle ?? '';
      let i = 0;
      if (trickle) timer = setInterval(() => i < trickle.length && !socket.destroyed && socket.write(trickle[i++]!), 100);
    });
    socket.once('close', () => {
      clearTimeout(deadline);
      clearInterval(timer);
      resolve(parseAnswers(Buffer.concat(chunks)));
    });
  });
}

/** Splits received bytes into whole HTTP/1.1 answers framed by Content-Length. */
function parseAnswers(received: Buffer): { answers: RawAnswer[]; trailing: number } {
  const answers: RawAnswer[] = [];
  let rest = received;
  for (;;) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd < 0) break;
    const [statusLine, ...lines] = rest.subarray(0, headEnd).toString('latin1').split('\r\n');
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    const length = Number(headers['content-length']);
    if (!Number.isInteger(length) || rest.length < headEnd + 4 + length) break;
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine ?? '')?.[1]);
    answers.push({ status, headers, body: rest.subarray(headEnd + 4, headEnd + 4 + length).toString('utf8') });
    rest = rest.subarray(headEnd + 4 + length);
  }
  return { answers, trailing: rest.length };
}

/** The exchange got exactly one answer: a whole, well-framed JSON refusal that closed the connection. */
function expectJsonRefusal(received: { answers: RawAnswer[]; trailing: number }, status: number, error: string): { error: string; message: string } {
  expect(received.trailing).toBe(0);
  expect(received.answers.map((a) => a.status)).toEqual([status]);
  const answer = received.answers[0]!;
  expect(answer.headers['content-type']).toMatch(/^application\/json/);
  expect(answer.headers['connection']).toBe('close');
  const body = JSON.parse(answer.body) as { error: string; message: string };
  expect(body).toEqual({ error, message: expect.any(String) });
  expect(body.message.length).toBeGreaterThan(0);
  return body;
}

const get = (path: string, headers: Record<string, string> = {}) =>
  `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n`;

describe('oversized headers get 431 with an {error, message} body', () => {
  it('a 64 KiB Authorization header gets 431 request_header_fields_too_large naming the limit', async () => {
    const answer = await exchange(get('/capability/list', { Authorization: `Bearer ${'a'.repeat(64 * 1024)}` }));
    const body = expectJsonRefusal(answer, 431, 'request_header_fields_too_large');
    expect(body.message).toContain(String(MAX_HEADER_BYTES));
  });

  it('a large padding header gets 431 with a JSON body', async () => {
    const answer = await exchange(get('/healthz', { 'X-Padding': 'p'.repeat(20_000) }));
    expectJsonRefusal(answer, 431, 'request_header_fields_too_large');
  });

  it('a signed agent JWT with a huge claim gets 431 before any verification, and fetch reads the JSON body', async () => {
    const key = await newEd25519();
    const token = await signJwt(key, { iss: key.thumbprint, sub: 'agt_x', aud: 'http://127.0.0.1', padding: 'x'.repeat(20_000) }, { typ: 'agent+jwt' });
    const res = await fetch(`http://127.0.0.1:${port}/capability/execute`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ capability: 'echo' }),
    });
    expect(res.status).toBe(431);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({ error: 'request_header_fields_too_large', message: expect.stringContaining(String(MAX_HEADER_BYTES)) });
  });

  it('headers just under the limit are still served', async () => {
    const { answers } = await exchange(get('/healthz', { 'X-Padding': 'p'.repeat(MAX_HEADER_BYTES - 200), Connection: 'close' }));
    expect(answers.map((a) => a.status)).toEqual([200]);
  });
});

describe('oversized chunk extensions get 413 with a body', () => {
  it('chunk extensions over 16 KiB get 413 chunk_extensions_too_large, as from Node, with a body', async () => {
    const request = `POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=${'e'.repeat(20_000)}\r\n{}\r\n0\r\n\r\n`;
    expectJsonRefusal(await exchange(request), 413, 'chunk_extensions_too_large');
  });
});

describe('malformed requests get 400 invalid_request with a body', () => {
  it('raw non-ASCII bytes in the request target get 400 invalid_request', async () => {
    const request = Buffer.concat([Buffer.from('GET /capability/describe?name=caf'), Buffer.from([0xc3, 0xa9, 0xff]), Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n')]);
    expectJsonRefusal(await exchange(request), 400, 'invalid_request');
  });

  it('a control character in a header value gets 400 invalid_request', async () => {
    expectJsonRefusal(await exchange(get('/healthz', { 'X-Bad': 'a\u0001b' })), 400, 'invalid_request');
  });

  it('a malformed request after one served on the same keep-alive connection is still answered', async () => {
    // The first answer has gone out whole, so the refusal can follow it on the connection.
    const { answers, trailing } = await exchange(get('/healthz'), { afterFirstAnswer: Buffer.from('GET /\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n', 'utf8') });
    expect(trailing).toBe(0);
    expect(answers.map((a) => a.status)).toEqual([200, 400]);
    expect(JSON.parse(answers[1]!.body)).toEqual({ error: 'invalid_request', message: expect.any(String) });
  });
});

describe('timeouts', () => {
  it('a header trickle gets 408 request_timeout with a body', async () => {
    const answer = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\n', { trickle: `X-Slow: ${'a'.repeat(100)}` });
    expectJsonRefusal(answer, 408, 'request_timeout');
  });
});

describe('a response already going out', () => {
  it('is never corrupted by a refusal: the connection just closes, as Node does', async () => {
    // agentgate answers in one piece, so a handler that streams shows the case: its headers and
    // half its body are out when a malformed request follows on the same connection.
    const server = createHttpServer(loadConfig({}), (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('half of the answer, ');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const address = server.address();
      if (typeof address !== 'object' || !address) throw new Error('no address');
      const received = await new Promise<string>((resolve) => {
        const socket = connect({ host: '127.0.0.1', port: address.port });
        let text = '';
        socket.setEncoding('utf8');
        socket.on('error', () => {});
        socket.on('data', (chunk: string) => {
          text += chunk;
          if (text.includes('half of the answer')) socket.write('GET /\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n');
        });
        socket.once('connect', () => socket.write(get('/')));
        socket.once('close', () => resolve(text));
      });
      expect(received).toMatch(/^HTTP\/1\.1 200 /);
      expect(received).toContain('half of the answer');
      expect(received).not.toContain('invalid_request');
      expect(received.match(/HTTP\/1\.1/g)).toHaveLength(1);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
