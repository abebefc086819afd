// Real Redis for integration tests (STYLE: integration tests use real Redis with a per-test key
// prefix and clean up after themselves). Finds one (REDIS_URL, then a local server), or starts a
// throwaway redis-server for this test process; and starts extra throwaway servers for tests that
// need to misconfigure or kill one.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { ClusterNodeAddress } from '../../src/store/redis/connection.ts';
import { createRedisStore, type RedisStore } from '../../src/store/redis/redis-store.ts';
import { freePort } from './net.ts';

// Tests that start servers of their own import the port picker from here too.
export { freePort } from './net.ts';

const LOCAL_URL = 'redis://127.0.0.1:6379';
const HOW_TO_GET_REDIS =
  'Integration tests need Redis 7: install redis-server (e.g. `apt-get install redis-server` or `brew install redis`) so the tests can start one, ' +
  'or run one yourself (`docker run -p 6379:6379 redis:7`) and set REDIS_URL=redis://127.0.0.1:6379.';

let cachedUrl: Promise<string> | null = null;

/** A Redis URL for this test process: REDIS_URL, else a local server, else a throwaway one. */
export function redisUrlForTests(): Promise<string> {
  cachedUrl ??= findOrStartRedis();
  return cachedUrl;
}

async function findOrStartRedis(): Promise<string> {
  const fromEnv = process.env['REDIS_URL'];
  if (fromEnv) return fromEnv;
  if (await answersPing(LOCAL_URL, 500)) return LOCAL_URL;
  try {
    return (await startThrowawayRedis()).url;
  } catch (error) {
    throw new Error(`no Redis for the integration tests (${(error as Error).message}). ${HOW_TO_GET_REDIS}`, { cause: error });
  }
}

/** True when the server at url answers PING within timeoutMs. */
export async function answersPing(url: string, timeoutMs: number): Promise<boolean> {
  const { hostname, port, password } = new URL(url);
  const address = { host: hostname, port: Number(port || 6379), ...(password ? { password: decodeURIComponent(password) } : {}) };
  return queryRedis(address, (client) => client.ping(), timeoutMs).then((reply) => reply === 'PONG', () => false);
}

/** A key prefix no other test uses: `agt-test:<label>:<random>:`. */
export function uniquePrefix(label: string): string {
  return `agt-test:${label}:${randomBytes(6).toString('hex')}:`;
}

/**
 * Deletes every key under prefix (SCAN + UNLINK). Bounded: gives up loudly after maxRounds SCAN
 * calls, so a runaway test cannot turn cleanup into an endless loop.
 */
export async function deletePrefix(url: string, prefix: string, maxRounds = 10_000): Promise<number> {
  if (!prefix.startsWith('agt-test:')) throw new Error(`refusing to delete keys outside agt-test:* (got ${prefix})`);
  const client = new Redis(url, { commandTimeout: 5000, maxRetriesPerRequest: 1 });
  // A Redis a test has just stopped refuses connections; the failing command says so already.
  client.on('error', () => {});
  let deleted = 0;
  try {
    let cursor = '0';
    for (let round = 0; round < maxRounds; round++) {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${escapeGlob(prefix)}*`, 'COUNT', 1000);
      // One UNLINK per key: a multi-key UNLINK would be refused across slots on a cluster node.
      if (keys.length > 0) deleted += await unlinkEach(client, keys);
      cursor = next;
      if (cursor === '0') return deleted;
    }
    throw new Error(`deletePrefix(${prefix}) did not finish within ${maxRounds} SCAN rounds`);
  } finally {
    client.disconnect();
  }
}

async function unlinkEach(client: Redis, keys: string[]): Promise<number> {
  const pipeline = client.pipeline();
  for (const key of keys) pipeline.unlink(key);
  const results = (await pipeline.exec()) ?? [];
  return results.reduce((sum, [error, count]) => (error ? sum : sum + Number(count)), 0);
}

function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (char) => `\\${char}`);
}

// ---- stores under test ---------------------------------------------------------------------------

/** Where a store under test connects: one Redis, or the nodes of a Redis Cluster. */
export type RedisTarget = { url: string } | { clusterNodes: ClusterNodeAddress[] };

/**
 * The Redis stores one contract test uses: a store on a fresh key prefix, `peer` to open more on the
 * same prefix (the same state, other connections), and `cleanup`, which closes every one of them and
 * deletes the prefix (on each master of a cluster, since each holds its own slots' keys).
 */
export async function redisStoresUnderTest(
  target: RedisTarget,
  label: string,
): Promise<{ store: RedisStore; peer: () => Promise<RedisStore>; cleanup: () => Promise<void> }> {
  const keyPrefix = uniquePrefix(label);
  const stores: RedisStore[] = [];
  const open = async (): Promise<RedisStore> => {
    const store = await createRedisStore({ ...target, keyPrefix });
    stores.push(store);
    return store;
  };
  const urls = 'url' in target ? [target.url] : target.clusterNodes.map((node) => `redis://${node.host}:${node.port}`);
  return {
    store: await open(),
    peer: open,
    cleanup: async () => {
      await Promise.all(stores.map((store) => store.close()));
      await Promise.all(urls.map((url) => deletePrefix(url, keyPrefix)));
    },
  };
}

// ---- throwaway servers ---------------------------------------------------------------------------

export interface ThrowawayRedis {
  url: string;
  port: number;
  process: ChildProcess;
  /** Kills the server and removes its directory; safe to call twice. */
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Kills every server this process started when it exits, however the tests ended. */
function killAllOnExit(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of running) child.kill('SIGKILL');
  });
}

/**
 * Kills child when this process exits, however the tests ended (SIGKILL, which also ends a process a
 * test has stopped with SIGSTOP). The child is forgotten once it exits, so the set does not grow with
 * every server a long run starts and stops.
 */
export function killOnExit(child: ChildProcess): void {
  running.add(child);
  killAllOnExit();
  child.once('exit', () => running.delete(child));
}

/**
 * Sends a signal to a server a test means to break (SIGSTOP to freeze it, SIGCONT to let it go on).
 * Refuses a process that has already exited: the signal would be lost and the test would go on
 * believing it had frozen or resumed something.
 */
export function signalServer(child: ChildProcess, signal: 'SIGSTOP' | 'SIGCONT', what: string): void {
  if (child.exitCode !== null || child.signalCode !== null) {
    throw new Error(`cannot send ${signal} to ${what}: it has already exited (${child.signalCode ?? `code ${child.exitCode}`})`);
  }
  if (!child.kill(signal)) throw new Error(`cannot send ${signal} to ${what}: kill() refused it`);
}

/**
 * Polls check until it returns null (done), at most timeoutMs. check returns what is still missing,
 * so the error says both what did not happen and how far it got, not just that time ran out.
 */
export async function waitFor(what: string, timeoutMs: number, check: () => Promise<string | null>, pollMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const missing = await check();
    if (missing === null) return;
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms: ${missing}`);
    await sleep(pollMs);
  }
}

/** Where a one-off query goes: a server on the loopback, with its password if it has one. */
export interface RedisAddress {
  host: string;
  port: number;
  password?: string | undefined;
}

/**
 * Opens a connection to one server, runs fn on it, and closes it. Nothing is retried or queued and
 * every command has timeoutMs, so a dead or frozen server fails the query quickly instead of
 * holding up the poll that asked.
 */
export async function queryRedis<T>(address: RedisAddress, fn: (client: Redis) => Promise<T>, timeoutMs = 1000): Promise<T> {
  const client = new Redis({
    host: address.host,
    port: address.port,
    password: address.password,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    // No INFO before the first command: on a frozen server ioredis's ready check takes several
    // times commandTimeout to give up, and fn's own command reports a server that is not ready.
    enableReadyCheck: false,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  // The failing command reports the problem; the connection's own error event would only repeat it.
  client.on('error', () => {});
  try {
    await client.connect();
    return await fn(client);
  } finally {
    client.disconnect();
  }
}

/**
 * Starts `redis-server` on a free port with no persistence, in its own temporary directory, plus
 * any extra arguments (e.g. ['--maxmemory-policy', 'allkeys-lru']), and waits until it answers.
 * With options.password the server requires it (requirepass) and the URL carries it.
 */
export async function startThrowawayRedis(
  extraArgs: string[] = [],
  options: { port?: number; readyTimeoutMs?: number; password?: string } = {},
): Promise<ThrowawayRedis> {
  const port = options.port ?? (await freePort());
  const readyTimeoutMs = options.readyTimeoutMs ?? 5000;
  const dir = mkdtempSync(join(tmpdir(), 'agentgate-redis-'));
  // With a password the server requires AUTH, so the URL carries it: the readiness PING below, and
  // every client a test opens on the URL, would otherwise be refused with NOAUTH.
  const auth = options.password === undefined ? [] : ['--requirepass', options.password];
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...auth, ...extraArgs];
  const child = await spawnServer(args);
  running.add(child);
  killAllOnExit();
  const userInfo = options.password === undefined ? '' : `:${encodeURIComponent(options.password)}@`;
  const url = `redis://${userInfo}127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    running.delete(child);
    await killAndWait(child);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + readyTimeoutMs;
  while (!(await answersPing(url, 200))) {
    if (Date.now() > deadline || child.exitCode !== null) {
      await stop();
      throw new Error(`redis-server on port ${port} did not answer PING within ${readyTimeoutMs} ms`);
    }
    await sleep(25);
  }
  return { url, port, process: child, stop };
}

/** Spawns redis-server, turning "not installed" into a rejected promise rather than a crash. */
export function spawnServer(args: string[]): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-server', args, { stdio: 'ignore' });
    child.once('error', (error) => reject(new Error(`cannot start redis-server: ${error.message}`)));
    child.once('spawn', () => resolve(child));
  });
}

/** SIGKILL (a stopped process ignores SIGTERM) and wait until the process is gone. */
export async function killAndWait(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
