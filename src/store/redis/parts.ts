// What the Redis store's role objects share: the one command connection, the Lua scripts defined on
// it, and the key layout. Every role object of one store issues its commands on this connection, so
// commands that different roles issue in one tick still share an auto-pipeline (the hot path's
// executeRoundTrip and appendAuditEvents rely on it: connection.ts, audit-records.ts).
import { Cluster } from 'ioredis';
import type { RedisConnection } from './connection.ts';
import type { KeyLayout } from './keys.ts';
import type { ScriptConnection } from './script-connection.ts';
import type { ScriptName } from './scripts.ts';

/**
 * The scripts as ioredis exposes them after defineCommand: keys first, then arguments. ioredis
 * flattens a command's arguments, so a list may stand for several of them (the hot path passes its
 * whole argument list as one).
 */
export type ScriptCommands = Record<ScriptName, (...keysThenArgs: Array<string | readonly string[]>) => Promise<unknown>>;

export interface RedisParts {
  connection: RedisConnection;
  /** A Redis Cluster: one script touches the keys of one slot only. */
  cluster: boolean;
  /** The same connection, seen through the scripts createRedisStore defined on it. */
  scripts: ScriptCommands;
  keys: KeyLayout;
  /**
   * The execute script's own connection (script-connection.ts), on a single Redis given by a URL;
   * null elsewhere. Only executeRoundTrip uses it, and only while it is ready.
   */
  executeConnection: ScriptConnection | null;
}

export function redisParts(connection: RedisConnection, keys: KeyLayout, executeConnection: ScriptConnection | null): RedisParts {
  return { connection, cluster: connection instanceof Cluster, scripts: connection as unknown as ScriptCommands, keys, executeConnection };
}

/**
 * What a Redis role object holds: the store's parts. The roles that need nothing else extend it,
 * one level deep; the store itself is composed of the roles by delegation (compose.ts).
 */
export abstract class RedisRole {
  protected readonly redis: RedisParts;

  constructor(redis: RedisParts) {
    this.redis = redis;
  }
}
