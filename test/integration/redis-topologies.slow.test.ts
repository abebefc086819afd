// Smoke test of the throwaway Redis topologies that failover tests run on (test/support/
// redis-cluster.ts, test/support/redis-sentinel.ts): each one starts, serves ioredis, and breaks and
// recovers the way the helpers promise, with ioredis finding the new master by itself. Slow (real
// processes, real failure detection): listed in vitest.config.ts's SLOW.
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { startThrowawayCluster } from '../support/redis-cluster.ts';
import { startThrowawaySentinel } from '../support/redis-sentinel.ts';
import { queryRedis, uniquePrefix } from '../support/redis.ts';
import { within } from '../support/within.ts';

describe('a Redis Cluster of three masters with a replica each', () => {
  it('serves a Cluster client, and serves a lost master’s keys again once its replica is promoted', async () => {
    const cluster = await startThrowawayCluster(3, { replicasPerMaster: 1 });
    const client = new Cluster(cluster.nodes, { redisOptions: { connectTimeout: 1000 } });
    // The client reports the dead master through the commands it retries; its error events repeat that.
    client.on('error', () => {});
    try {
      const topology = await cluster.topology();
      const masters = topology.filter((node) => node.role === 'master');
      expect(masters).toHaveLength(3);
      for (const master of masters) expect(await cluster.replicasOf(master.port)).toHaveLength(1);

      const key = `${uniquePrefix('topologies')}cluster`;
      await client.set(key, 'before the failover');
      expect(await client.get(key)).toBe('before the failover');

      const lostMaster = await cluster.masterPortForKey(key);
      const [replica] = await cluster.replicasOf(lostMaster);
      if (replica === undefined) throw new Error(`master ${lostMaster} has no replica`);
      await cluster.waitForReplicasInSync(lostMaster);

      // Frozen while its master dies, the replica cannot elect itself, so the takeover below is
      // what promotes it, at the moment the test chooses.
      cluster.pause(replica);
      await cluster.kill(lostMaster);
      // Once the others agree the master is down, its slots are uncovered and (with
      // cluster-require-full-coverage yes) every node refuses every key: the outage clients see.
      await cluster.waitForFail(lostMaster);
      const survivor = masters.find((master) => master.port !== lostMaster)!.port;
      await expect(queryRedis({ host: '127.0.0.1', port: survivor }, (direct) => direct.get(key))).rejects.toThrow(/CLUSTERDOWN/);
      cluster.resume(replica);
      await cluster.promote(replica);

      expect(await cluster.masterPortForKey(key)).toBe(replica);
      expect(await within(10_000, 'a GET through the Cluster client after the promotion', client.get(key))).toBe('before the failover');
      await within(10_000, 'a SET through the Cluster client after the promotion', client.set(key, 'after the failover'));
      expect(await client.get(key)).toBe('after the failover');
    } finally {
      client.disconnect();
      await cluster.stop();
    }
  }, 45_000);
});

describe('a Redis Sentinel set (master, replica, three sentinels)', () => {
  it('serves a sentinel client, and after the master is killed the client writes to the promoted replica', async () => {
    const password = `pw-${uniquePrefix('sentinel')}`;
    const set = await startThrowawaySentinel({ password });
    const client = new Redis({ sentinels: set.sentinels, name: set.masterName, password, connectTimeout: 1000 });
    // The client reports the dead master through the commands it retries; its error events repeat that.
    client.on('error', () => {});
    try {
      // The password reached the data nodes, not only the sentinels' auth-pass: a client without it is refused.
      const anonymous = new Redis({ port: set.master.port, lazyConnect: true, enableReadyCheck: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
      anonymous.on('error', () => {});
      await expect(anonymous.connect().then(() => anonymous.ping())).rejects.toThrow(/NOAUTH/);
      anonymous.disconnect();

      const key = `${uniquePrefix('topologies')}sentinel`;
      await client.set(key, 'before the failover');
      await set.waitForReplicaInSync();

      await set.kill(set.master.port);
      const { newMasterPort } = await set.waitForFailover();
      expect(newMasterPort).toBe(set.replica.port);

      await within(10_000, 'a SET through the sentinel client after the failover', client.set(`${key}:after`, 'after the failover'));
      expect(await client.get(key)).toBe('before the failover');
      expect(await client.get(`${key}:after`)).toBe('after the failover');
      expect(/^tcp_port:(\d+)/m.exec(await client.info('server'))?.[1]).toBe(String(newMasterPort));
    } finally {
      client.disconnect();
      await set.stop();
    }
  }, 45_000);

});
