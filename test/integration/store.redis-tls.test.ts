// TLS and ACL credentials to Redis (DESIGN §10: each topology with TLS and credentials), on a real
// redis-server that speaks only TLS and knows one ACL user, through the same path `npm start` takes:
// the environment, loadConfig, redisStoreOptions, createRedisStore.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { redisStoreOptions } from '../../src/store/redis/from-config.ts';
import { createRedisStore } from '../../src/store/redis/redis-store.ts';
import { activeAgentSnapshot } from '../support/agent-snapshot.ts';
import { makeTestCertificates } from '../support/certificates.ts';
import { freePort, killAndWait, killOnExit, spawnServer, waitFor } from '../support/redis.ts';

let dir: string;
let port: number;
let server: ChildProcess;
const PASSWORD = 'tls-test-password-0123';

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentgate-tls-'));
  // A CA and a server certificate for localhost and 127.0.0.1, and a CA nobody used (to show a wrong one is refused).
  makeTestCertificates(dir, { commonName: 'localhost', altNames: ['DNS:localhost', 'IP:127.0.0.1'], otherCa: true });
  port = await freePort();
  server = await spawnServer([
    '--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no',
    '--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', join(dir, 'server.key'), '--tls-ca-cert-file', join(dir, 'ca.crt'), '--tls-auth-clients', 'no',
    // One ACL user, and no default user: a connection without these credentials can do nothing.
    '--user', 'default', 'off', '--user', 'agentgate', 'on', `>${PASSWORD}`, '~*', '&*', '+@all',
  ]);
  killOnExit(server);
  await waitFor('redis-server to accept TLS connections', 10_000, async () => {
    try {
      const store = await open({ REDIS_URL: `rediss://agentgate:${PASSWORD}@localhost:${port}`, REDIS_TLS_CA_FILE: join(dir, 'ca.crt') });
      await store.close();
      return null;
    } catch (error) {
      return (error as Error).message;
    }
  });
});

afterAll(async () => {
  if (server) await killAndWait(server);
  rmSync(dir, { recursive: true, force: true });
});

/** The store `npm start` would open with this environment. */
async function open(env: Record<string, string>) {
  const config = loadConfig(env);
  return createRedisStore(redisStoreOptions(config.redis!, config));
}

describe('Redis over TLS with an ACL user (REDIS_URL rediss://, REDIS_TLS_CA_FILE)', () => {
  it('connects with the CA file and the user\'s credentials, and serves', async () => {
    const store = await open({ REDIS_URL: `rediss://agentgate:${PASSWORD}@localhost:${port}`, REDIS_TLS_CA_FILE: join(dir, 'ca.crt'), REDIS_KEY_PREFIX: 'tls:' });
    try {
      await store.ping();
      expect(store.target).toBe(`Redis rediss://agentgate:***@localhost:${port}`);
      expect(await store.recordAgentJti('agt_tls', 'jti-1', 60_000)).toBe(true);
      expect(await store.recordAgentJti('agt_tls', 'jti-1', 60_000)).toBe(false);
      // Execute's script goes over TLS too, as the same user, on its connection of its own.
      expect(store.executeConnectionReady).toBe(true);
      const snapshot = activeAgentSnapshot('hst_tls');
      await store.createAgent(snapshot);
      const request = { agentId: snapshot.agent.id, keyVersion: 1, jti: 'jti-2', jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000 };
      expect((await store.executeRoundTrip(request)).kind).toBe('ok');
      expect((await store.executeRoundTrip(request)).kind).toBe('replay');
    } finally {
      await store.close();
    }
  });

  it('refuses a server whose certificate no given CA signed, saying to give its CA in REDIS_TLS_CA_FILE', async () => {
    for (const env of [{}, { REDIS_TLS_CA_FILE: join(dir, 'other.crt') }] as Record<string, string>[]) {
      await expect(open({ REDIS_URL: `rediss://agentgate:${PASSWORD}@localhost:${port}`, ...env })).rejects.toThrow(
        /presented a TLS certificate this process does not trust .*give the CA that signed it in REDIS_TLS_CA_FILE/,
      );
    }
  });

  it('refuses wrong credentials, naming where they are set, and never repeats the password', async () => {
    const attempt = open({ REDIS_URL: `rediss://agentgate:not-the-password@localhost:${port}`, REDIS_TLS_CA_FILE: join(dir, 'ca.crt') });
    await expect(attempt).rejects.toThrow(/refused the credentials: check the user and password \(in REDIS_URL, or REDIS_USERNAME and REDIS_PASSWORD\) \(WRONGPASS\)/);
    await expect(attempt).rejects.not.toThrow(/not-the-password/);
  });

  it('a plaintext redis:// URL to the TLS port is refused, not served', async () => {
    await expect(open({ REDIS_URL: `redis://agentgate:${PASSWORD}@localhost:${port}` })).rejects.toThrow(/^cannot connect to Redis redis:\/\/agentgate:\*\*\*@localhost/);
  });
});
