// What the Redis store's role objects share: the one command connection, the Lua scripts defined on
// it, and the key layout. Every role object of one store issues its commands on this connection, so
// commands that different roles issue in one tick still share an auto-pipeline (the hot path's
// executeRoundTrip and appendAuditEvents rely on it: connection.ts, audit-records.ts).
import type { RedisConnection } from './connection.ts';
import type { KeyLayout } from './keys.ts';
import type { ScriptName } from './scripts.ts';

/** The scripts as ioredis exposes them after defineCommand: keys first, then arguments. */
export type ScriptCommands = Record<ScriptName, (...keysThenArgs: string[]) => Promise<unknown>>;

export interface RedisParts {
  connection: RedisConnection;
  /** The same connection, seen through the scripts createRedisStore defined on it. */
  scripts: ScriptCommands;
  keys: KeyLayout;
}

export function redisParts(connection: RedisConnection, keys: KeyLayout): RedisParts {
  return { connection, scripts: connection as unknown as ScriptCommands, keys };
}
