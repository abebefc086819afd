// The Redis store's options as the configuration describes them (DESIGN §10: single, Sentinel or
// Cluster, chosen by configuration, not code). main.ts and the test servers both build their store
// from here, so a topology the configuration accepts is one the store is opened with.
import { readFileSync } from 'node:fs';
import type { Config, RedisTopology } from '../../config.ts';
import type { RedisStoreOptions } from './connection.ts';

type StoreSettings = Pick<Config, 'REDIS_KEY_PREFIX' | 'REDIS_COMMAND_TIMEOUT_MS' | 'REDIS_WAIT_REPLICAS' | 'REDIS_WAIT_TIMEOUT_MS'>;

/**
 * Options for createRedisStore. The CA file is read here, once, at start-up: config.ts checked that
 * it can be read, and a file that vanished since is a start-up error naming it.
 */
export function redisStoreOptions(topology: RedisTopology, settings: StoreSettings): RedisStoreOptions {
  let ca: string | undefined;
  if (topology.tlsCaFile !== undefined) {
    try {
      ca = readFileSync(topology.tlsCaFile, 'utf8');
    } catch (error) {
      throw new Error(`REDIS_TLS_CA_FILE: cannot read ${topology.tlsCaFile}: ${(error as Error).message}`, { cause: error });
    }
  }
  const common = {
    keyPrefix: settings.REDIS_KEY_PREFIX,
    commandTimeoutMs: settings.REDIS_COMMAND_TIMEOUT_MS,
    waitReplicas: settings.REDIS_WAIT_REPLICAS,
    waitTimeoutMs: settings.REDIS_WAIT_TIMEOUT_MS,
    username: topology.username,
    password: topology.password,
    sentinelUsername: topology.sentinelUsername,
    sentinelPassword: topology.sentinelPassword,
    tls: topology.tls ? { ca } : undefined,
  };
  switch (topology.kind) {
    case 'single':
      return { ...common, url: topology.url };
    case 'cluster':
      return { ...common, clusterNodes: topology.nodes };
    case 'sentinel':
      return { ...common, sentinels: topology.sentinels, sentinelMasterName: topology.masterName };
  }
}
