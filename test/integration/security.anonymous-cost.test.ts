// Anonymous visitors cost nothing stored (DESIGN §8: nothing is stored for an anonymous visitor
// before a sign-in completes). 10,000 sign-in starts by visitors without cookies, on the sign-in
// page (GET /signin) and towards a real OpenID Connect provider (GET /signin/start), with a short
// and with a 2 KB return_to, add less than 1 MB to Redis. Measured honestly: on a Redis of its own,
// every key under the server's prefix is listed (SCAN) with its MEMORY USAGE before and after, and
// the difference is every byte the visitors added, in new keys or in keys that grew (the audit
// trail, rate limits, anything). The number of keys in the whole Redis (DBSIZE) and its
// used_memory are reported beside it.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const VISITORS = 10_000;
const IN_FLIGHT = 32;
const ONE_MB = 1_000_000;
/** A 2 KB return path, as a visitor may send (the server keeps none longer than 512 characters). */
const LONG_RETURN_TO = `/device?user_code=${'B'.repeat(2048)}`;

let redis: ThrowawayRedis;
let client: Redis;
let provider: TestOidcProvider;
let server: TestServer;

beforeAll(async () => {
  redis = await startThrowawayRedis();
  client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  server = await startTestServer({
    store: 'redis',
    redisUrl: redis.url,
    oidc: async (redirectUri) => {
      provider = await startOidcProvider({ redirectUris: [redirectUri] });
      return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
    },
  });
});
afterAll(async () => {
  await server?.close();
  await provider?.close();
  client?.disconnect();
  await redis?.stop();
});

interface StoreSize {
  keys: Map<string, number>;
  bytes: number;
  dbsize: number;
  usedMemory: number;
}

/** Every key under the server's prefix with its MEMORY USAGE, the whole Redis's key count and used_memory. */
async function storeSize(): Promise<StoreSize> {
  // The audit trail is written off the request path: what the visitors caused is in Redis first.
  await server.app.deps.audit.flush();
  const prefix = server.config.REDIS_KEY_PREFIX;
  const keys = new Map<string, number>();
  let cursor = '0';
  for (let round = 0; round < 100_000; round++) {
    const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    for (const key of batch) keys.set(key, Number((await client.memory('USAGE', key, 'SAMPLES', '0')) ?? 0));
    cursor = next;
    if (cursor === '0') break;
  }
  const info = await client.info('memory');
  const usedMemory = Number(/used_memory:(\d+)/.exec(info)![1]);
  return { keys, bytes: [...keys.values()].reduce((a, b) => a + b, 0), dbsize: await client.dbsize(), usedMemory };
}

/** `count` requests by visitors without cookies, IN_FLIGHT at a time; each answer is checked. */
async function visitors(count: number, path: string, check: (res: Response) => void): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next++;
      const res = await fetch(new URL(path, server.baseUrl), { redirect: 'manual', signal: AbortSignal.timeout(10_000) });
      check(res);
      await res.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
}

/** What `count` visitors added: new keys, and the bytes under the prefix that were not there before. */
async function addedBy(run: () => Promise<void>) {
  const before = await storeSize();
  await run();
  const after = await storeSize();
  const newKeys = [...after.keys.keys()].filter((key) => !before.keys.has(key));
  return { newKeys, bytes: after.bytes - before.bytes, dbsize: after.dbsize - before.dbsize, usedMemory: after.usedMemory - before.usedMemory };
}

function signInPageAnswered(res: Response): void {
  expect(res.status).toBe(200);
  // The visitor's state rides in its own sealed cookie.
  expect(res.headers.getSetCookie().some((cookie) => cookie.startsWith('agentgate_signin='))).toBe(true);
}

function sentToProvider(res: Response): void {
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toMatch(new RegExp(`^${provider.issuer}/`));
  expect(res.headers.getSetCookie().some((cookie) => cookie.startsWith('agentgate_signin='))).toBe(true);
}

describe('anonymous visitors cost nothing stored', () => {
  it.each([
    ['GET /signin', '/signin?return_to=%2Fdevice', signInPageAnswered],
    ['GET /signin with a 2 KB return_to', `/signin?return_to=${encodeURIComponent(LONG_RETURN_TO)}`, signInPageAnswered],
    ['GET /signin/start (OpenID Connect)', '/signin/start?return_to=%2Fdevice', sentToProvider],
    ['GET /signin/start (OpenID Connect) with a 2 KB return_to', `/signin/start?return_to=${encodeURIComponent(LONG_RETURN_TO)}`, sentToProvider],
  ] as const)(`${VISITORS} anonymous starts of %s add less than 1 MB to Redis`, async (what, path, check) => {
    const added = await addedBy(() => visitors(VISITORS, path, check));
    console.info(`${VISITORS} × ${what}: ${added.newKeys.length} new keys under the prefix (${added.newKeys.map((k) => k.slice(server.config.REDIS_KEY_PREFIX.length)).join(', ') || 'none'}), `
      + `${added.bytes} bytes by MEMORY USAGE, DBSIZE ${added.dbsize >= 0 ? '+' : ''}${added.dbsize}, used_memory ${added.usedMemory >= 0 ? '+' : ''}${added.usedMemory} bytes`);
    expect(added.bytes).toBeLessThan(ONE_MB);
    // Nothing per visitor: at most the one secret every instance shares to seal sign-in cookies,
    // made by the first visitor of all.
    expect(added.newKeys.filter((key) => !key.endsWith('secret:sign-in-cookie-key'))).toEqual([]);
  }, 120_000);
});
