// TRUST_PROXY says which proxies' X-Forwarded-For entries are believed: a hop count or their
// addresses. The client address is the rightmost entry no trusted proxy wrote, so whatever a client
// puts in front of the header (an appending proxy forwards it as "<spoofed>, <real>") changes
// nothing: it can neither escape its own budgets nor spend someone else's.
import { describe, expect, it } from 'vitest';
import { code, http } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const REAL_CLIENT = '203.0.113.7';
const VICTIM = '198.51.100.20';

async function withServer(trustProxy: string, fn: (server: TestServer) => Promise<void>) {
  const server = await startTestServer({ env: { TRUST_PROXY: trustProxy, RATE_LIMIT_IP_PER_MINUTE: '3' } });
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

/** Discovery spends one point of the caller's per-address budget. */
const discover = (server: TestServer, forwardedFor: string) =>
  http('GET', `${server.baseUrl}/.well-known/agent-configuration`, { headers: { 'x-forwarded-for': forwardedFor } });

describe.each([
  ['a hop count', '1'],
  ['the proxy addresses', 'loopback'],
  ['a network', '127.0.0.0/8'],
])('TRUST_PROXY as %s', (_label, trustProxy) => {
  it('a spoofed leftmost X-Forwarded-For entry cannot escape the per-address budget', () =>
    withServer(trustProxy, async (server) => {
      for (let i = 0; i < 3; i++) expect((await discover(server, `10.9.9.${i}, ${REAL_CLIENT}`)).status).toBe(200);
      const refused = await discover(server, `10.9.9.99, ${REAL_CLIENT}`);
      expect(code(refused)).toBe('429 rate_limited');
    }));

  it("naming a victim's address in X-Forwarded-For does not spend the victim's budget", () =>
    withServer(trustProxy, async (server) => {
      for (let i = 0; i < 5; i++) await discover(server, `${VICTIM}, ${REAL_CLIENT}`);
      // The victim's own requests, forwarded by the same proxy, still have their whole budget.
      for (let i = 0; i < 3; i++) expect((await discover(server, VICTIM)).status).toBe(200);
    }));
});

describe('TRUST_PROXY=false', () => {
  it('ignores X-Forwarded-For altogether: the socket address is the client', () =>
    withServer('false', async (server) => {
      for (let i = 0; i < 3; i++) expect((await discover(server, `10.9.9.${i}`)).status).toBe(200);
      expect(code(await discover(server, '10.9.9.50'))).toBe('429 rate_limited');
    }));
});
