// Withdrawals wait for a replica (DESIGN §10), tested on a real master and replica: what the store
// decides to wait for, that a round confirms what the master took before it, that a replica that
// stops acknowledging turns the answer into `not_durable` within the wait's bound, and that rounds
// are shared, so withdrawals queued behind a stuck replica do not wait one timeout each.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Redis } from 'ioredis';
import { createRedisStore, type RedisStore } from '../../src/store/redis/redis-store.ts';
import { keyLayout } from '../../src/store/redis/keys.ts';
import { signalServer, startThrowawayRedis, uniquePrefix, waitFor, type ThrowawayRedis } from '../support/redis.ts';

/** A replica that stopped answering is waited for this long: short, as those tests expect the timeout. */
const WAIT_TIMEOUT_MS = 300;
/**
 * A healthy replica answers WAIT within a millisecond or two; on a 2-core machine running other
 * suites it took over 300 ms once, so the tests that expect `durable` give it this long.
 */
const GENEROUS_WAIT_TIMEOUT_MS = 5000;

const servers: ThrowawayRedis[] = [];
const stores: RedisStore[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close().catch(() => {})));
  for (const server of servers.splice(0)) {
    if (server.process.exitCode === null && server.process.signalCode === null) server.process.kill('SIGCONT');
    await server.stop();
  }
});

/** A master and a replica of it, in sync. */
async function masterAndReplica(): Promise<{ master: ThrowawayRedis; replica: ThrowawayRedis }> {
  // A replica's first sync would otherwise wait five seconds for more replicas to share it.
  const master = await startThrowawayRedis(['--repl-diskless-sync-delay', '0']);
  servers.push(master);
  const replica = await startThrowawayRedis(['--replicaof', '127.0.0.1', String(master.port)]);
  servers.push(replica);
  const client = new Redis(master.url, { lazyConnect: true });
  try {
    await waitFor('the replica to connect to its master', 10_000, async () => {
      const info = await client.info('replication');
      return /connected_slaves:1/.test(info) && /state=online/.test(info) ? null : 'no online replica yet';
    });
  } finally {
    client.disconnect();
  }
  return { master, replica };
}

async function openStore(url: string, waitReplicas: 'auto' | number = 'auto', waitTimeoutMs = GENEROUS_WAIT_TIMEOUT_MS): Promise<RedisStore> {
  const store = await createRedisStore({ url, keyPrefix: uniquePrefix('durability'), waitReplicas, waitTimeoutMs });
  stores.push(store);
  return store;
}

describe('a withdrawal waits for a replica (store/redis/durability.ts)', () => {
  it('with a replica connected at start-up, auto waits for one, and a round confirms what the master took', async () => {
    const { master } = await masterAndReplica();
    const store = await openStore(master.url);
    expect(store.durability()).toBe('1 replica');
    expect(await store.confirmDurable({ agentIds: ['agt_a'], hostIds: ['host_b'] })).toBe('durable');
  });

  it('with no replica, auto waits for nothing and says so; REDIS_WAIT_REPLICAS=1 then never confirms', async () => {
    const lone = await startThrowawayRedis();
    servers.push(lone);
    const auto = await openStore(lone.url);
    expect(auto.durability()).toMatch(/^no replica/);
    expect(await auto.confirmDurable({ agentIds: ['agt_a'] })).toBe('durable');
    const strict = await openStore(lone.url, 1, WAIT_TIMEOUT_MS);
    const startedAt = Date.now();
    expect(await strict.confirmDurable({ agentIds: ['agt_a'] })).toBe('not_durable');
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(WAIT_TIMEOUT_MS - 20);
  });

  it('with no replica, a recount that Redis does not answer in time leaves nothing to wait for: the withdrawal is durable, not refused', async () => {
    const lone = await startThrowawayRedis();
    servers.push(lone);
    const errors: Error[] = [];
    const store = await createRedisStore({
      url: lone.url, keyPrefix: uniquePrefix('durability'), waitReplicas: 'auto', waitTimeoutMs: WAIT_TIMEOUT_MS, commandTimeoutMs: 200,
      onConnectionError: (error) => errors.push(error),
    });
    stores.push(store);
    expect(store.durability()).toMatch(/^no replica/);
    // The count is due again (it is taken every 10 s), and Redis answers nothing meanwhile.
    const realNow = Date.now.bind(Date);
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + 11_000);
    signalServer(lone.process, 'SIGSTOP', 'the lone Redis');
    try {
      expect(await store.confirmDurable({ agentIds: ['agt_a'] })).toBe('durable');
    } finally {
      signalServer(lone.process, 'SIGCONT', 'the lone Redis');
      clock.mockRestore();
    }
    expect(errors.map((e) => e.message).join('; ')).toMatch(/timed out/i);
  });

  it('a replica that stopped acknowledging makes the answer not_durable, and confirms again once it is back', async () => {
    const { master, replica } = await masterAndReplica();
    const store = await openStore(master.url, 'auto', WAIT_TIMEOUT_MS);
    signalServer(replica.process, 'SIGSTOP', 'the replica');
    expect(await store.confirmDurable({ agentIds: ['agt_a'] })).toBe('not_durable');
    signalServer(replica.process, 'SIGCONT', 'the replica');
    await waitFor('the resumed replica to acknowledge again', 10_000, async () =>
      (await store.confirmDurable({ agentIds: ['agt_a'] })) === 'durable' ? null : 'still not durable');
  });

  it('withdrawals queued behind a stuck replica share rounds: twenty take two WAITs, not twenty', async () => {
    const { master, replica } = await masterAndReplica();
    const store = await openStore(master.url, 'auto', WAIT_TIMEOUT_MS);
    const waitCalls = async () => {
      const client = new Redis(master.url);
      try {
        return Number(/^cmdstat_wait:calls=(\d+)/m.exec(await client.info('commandstats'))?.[1] ?? 0);
      } finally {
        client.disconnect();
      }
    };
    const before = await waitCalls();
    signalServer(replica.process, 'SIGSTOP', 'the replica');
    const startedAt = Date.now();
    const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => store.confirmDurable({ agentIds: [`agt_${i}`] })));
    const elapsedMs = Date.now() - startedAt;
    signalServer(replica.process, 'SIGCONT', 'the replica');
    expect(outcomes.every((o) => o === 'not_durable')).toBe(true);
    // One round was running when the others asked; they all joined the next one.
    expect((await waitCalls()) - before).toBe(2);
    // One wait each would take 20 timeouts (6 s); two shared rounds take two.
    expect(elapsedMs).toBeLessThan(10 * WAIT_TIMEOUT_MS);
  });

  it('the marker a round writes lives in the slot of the record it confirms, and expires', async () => {
    const { master } = await masterAndReplica();
    const store = await openStore(master.url);
    const layout = keyLayout('ag:');
    expect(layout.durabilityMarker(layout.agent('agt_x'))).toBe('ag:durable:{agt_x}');
    expect(layout.durabilityMarker(layout.host('host_y'))).toBe('ag:durable:{host_y}');
    expect(await store.confirmDurable({ agentIds: ['agt_x'] })).toBe('durable');
    const client = new Redis(master.url);
    try {
      const markers = await client.keys('*durable:{agt_x}');
      expect(markers).toHaveLength(1);
      const ttlMs = await client.pttl(markers[0]!);
      expect(ttlMs).toBeGreaterThan(0);
      expect(ttlMs).toBeLessThanOrEqual(10_000);
    } finally {
      client.disconnect();
    }
  });
});
