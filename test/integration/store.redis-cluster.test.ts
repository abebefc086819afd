// The Redis store against the shared store contract on a real three-master Redis Cluster (DESIGN
// §10). Every script must keep to one hash slot: a script whose keys span slots fails here with
// CROSSSLOT, and the keys of one test spread over all three masters.
import { afterAll, beforeAll } from 'vitest';
import { createRedisStore } from '../../src/store/redis/redis-store.ts';
import type { Store } from '../../src/store/store.ts';
import { clusterForTests, type TestCluster } from '../support/redis-cluster.ts';
import { deletePrefix, uniquePrefix } from '../support/redis.ts';
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
  const nodes = cluster.nodes;
  const keyPrefix = uniquePrefix('store-cluster');
  const stores: Store[] = [];
  const open = async (): Promise<Store> => {
    const store = await createRedisStore({ clusterNodes: nodes, keyPrefix });
    stores.push(store);
    return store;
  };
  return {
    store: await open(),
    peer: open,
    cleanup: async () => {
      await Promise.all(stores.map((store) => store.close()));
      // Each master holds its own slots' keys, so each is scanned.
      await Promise.all(nodes.map((node) => deletePrefix(`redis://${node.host}:${node.port}`, keyPrefix)));
    },
  };
});
