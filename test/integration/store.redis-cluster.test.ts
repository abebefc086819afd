// The Redis store against the shared store contract on a real three-master Redis Cluster (DESIGN
// §10). Every script must keep to one hash slot: a script whose keys span slots fails here with
// CROSSSLOT, and the keys of one test spread over all three masters.
import { afterAll, beforeAll } from 'vitest';
import { clusterForTests, type TestCluster } from '../support/redis-cluster.ts';
import { redisStoresUnderTest } from '../support/redis.ts';
import { storeContract } from './store.contract.ts';

let cluster: TestCluster | undefined;

beforeAll(async () => {
  cluster = await clusterForTests();
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

storeContract('redis cluster', async () => {
  if (!cluster) throw new Error('the cluster did not start');
  return redisStoresUnderTest({ clusterNodes: cluster.nodes }, 'store-cluster');
});
