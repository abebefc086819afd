// A JWKS publisher for tests: a real HTTPS server on loopback, with a throwaway CA the test's
// agentgate trusts (AssemblyOptions.jwksFetch.ca), serving a JWK Set per path that the test changes
// as a host would (publish a key, withdraw one), and counting each path's fetches so a test can
// show when agentgate fetched and when it answered from its cache. Loopback is a private address,
// so the agentgate under test also needs INSECURE_JWKS_ALLOWED_PRIVATE_RANGES=127.0.0.1/32
// (JWKS_TEST_ENV below), exactly as an operator whose hosts publish inside their network would set.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestCertificates } from './certificates.ts';
import type { TestKey } from './keys.ts';

/** What the agentgate under test needs to fetch from a JwksServer on loopback. */
export const JWKS_TEST_ENV = { INSECURE_JWKS_ALLOWED_PRIVATE_RANGES: '127.0.0.1/32' } as const;

/** What a path answers: a set of keys (each under its kid), or a raw status and body. */
type Document = { keys: Array<{ kid: string; key: TestKey }> } | { status: number; body: string };

export interface JwksServer {
  /** The CA certificate (PEM) that signed the server's certificate. */
  ca: string;
  /** https://127.0.0.1:<port><path> */
  url(path: string): string;
  /** From now on, `path` publishes exactly these keys. */
  publish(path: string, keys: Array<{ kid: string; key: TestKey }>): void;
  /** From now on, `path` answers this status and body (a broken or hostile publisher). */
  answer(path: string, status: number, body: string): void;
  /** How often `path` was fetched so far. */
  fetches(path: string): number;
  close(): Promise<void>;
}

export async function startJwksServer(): Promise<JwksServer> {
  const dir = mkdtempSync(join(tmpdir(), 'agentgate-jwks-'));
  makeTestCertificates(dir, { commonName: '127.0.0.1', altNames: ['IP:127.0.0.1', 'DNS:localhost'] });
  const ca = readFileSync(join(dir, 'ca.crt'), 'utf8');
  const documents = new Map<string, Document>();
  const counts = new Map<string, number>();
  const server: Server = createServer({ key: readFileSync(join(dir, 'server.key')), cert: readFileSync(join(dir, 'server.crt')) }, (req, res) => {
    const path = new URL(req.url ?? '/', 'https://127.0.0.1').pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const document = documents.get(path);
    if (!document) {
      res.writeHead(404).end();
    } else if ('status' in document) {
      res.writeHead(document.status, { 'content-type': 'application/json' }).end(document.body);
    } else {
      const keys = document.keys.map(({ kid, key }) => ({ ...key.publicJwk, kid, use: 'sig' }));
      res.writeHead(200, { 'content-type': 'application/jwk-set+json' }).end(JSON.stringify({ keys }));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    ca,
    url: (path) => `https://127.0.0.1:${port}${path}`,
    publish: (path, keys) => void documents.set(path, { keys }),
    answer: (path, status, body) => void documents.set(path, { status, body }),
    fetches: (path) => counts.get(path) ?? 0,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
