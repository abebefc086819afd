// The Redis implementation of Store (DESIGN §3): key layout in keys.ts, Lua in scripts.ts, record
// encoding in codec.ts, connections in connection.ts, the invalidation subscriber in
// invalidations.ts. Every read-then-write transition is one script in one hash slot, so it is
// atomic on a single Redis and on Redis Cluster alike.
//
// The store is made of one object per role of store.ts, assembled by compose.ts, all over the same
// parts (parts.ts: one command connection, its scripts, the key layout), so commands that different
// roles issue in one tick share an auto-pipeline as they did when one class issued them all:
//   hosts      RedisHostRecords     (host-records.ts, with host-rotation.ts)
//   agents     RedisAgentRecords    (agent-records.ts; executeRoundTrip, the hot path)
//   replay     RedisReplayRecords   (replay-records.ts)
//   pending    RedisPendingIndex    (pending-index.ts)
//   people     RedisPersonRecords   (person-records.ts)
//   enrollments RedisHostEnrollments (host-enrollments.ts)
//   audit      RedisAuditRecords    (audit-records.ts)
//   decisions  RedisDecisionRecords (decision-records.ts)
//   backend    RedisBackend         (backend.ts; also the durability connection and the subscriber)
import { Redis } from 'ioredis';
import { composeStore } from '../compose.ts';
import type { Store } from '../store.ts';
import { RedisAgentRecords } from './agent-records.ts';
import { RedisAuditRecords } from './audit-records.ts';
import { RedisBackend } from './backend.ts';
import { RedisDecisionRecords } from './decision-records.ts';
import {
  connectAndCheck, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_WAIT_TIMEOUT_MS, describeTarget, openConnection, reconnectDelayMs,
  RedisConnectionError, type RedisConnection, type RedisStoreOptions,
} from './connection.ts';
import { ReplicaWait } from './durability.ts';
import { RedisHostEnrollments } from './host-enrollments.ts';
import { RedisHostRecords } from './host-records.ts';
import { keyLayout, type KeyLayout } from './keys.ts';
import { redisParts } from './parts.ts';
import { RedisPendingIndex } from './pending-index.ts';
import { RedisPersonRecords } from './person-records.ts';
import { RedisReplayRecords } from './replay-records.ts';
import { ScriptConnection, scriptConnectionAddress } from './script-connection.ts';
import { SCRIPTS } from './scripts.ts';

export type { RedisStoreOptions } from './connection.ts';

/**
 * Connects to Redis (or a Redis Cluster), checks it is usable for agentgate, and returns the store.
 * Throws with a message that says what is wrong and how to fix it.
 */
export async function createRedisStore(options: RedisStoreOptions): Promise<RedisStore> {
  const keys = keyLayout(options.keyPrefix ?? 'ag:');
  const connection = openConnection(options, 'commands');
  for (const [name, script] of Object.entries(SCRIPTS)) connection.defineCommand(name, script);
  await connectAndCheck(connection, options);
  // Withdrawals wait for replicas on a connection of their own (durability.ts says why).
  const durabilityConnection = openConnection(options, 'durability');
  let executeConnection: ScriptConnection | null = null;
  try {
    await connectAndCheck(durabilityConnection, options);
    const replicaWait = new ReplicaWait(durabilityConnection, {
      replicas: options.waitReplicas ?? 'auto',
      timeoutMs: options.waitTimeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS,
      markerKey: (anchorKey) => keys.durabilityMarker(anchorKey),
      onRoundError: options.onConnectionError,
    });
    await replicaWait.start();
    executeConnection = openExecuteConnection(options, connection);
    // Not a condition of starting: until it connects, execute's script goes on the command connection.
    await executeConnection?.firstAttempt();
    return new RedisStore(connection, keys, options, { connection: durabilityConnection, wait: replicaWait }, executeConnection);
  } catch (error) {
    connection.disconnect();
    durabilityConnection.disconnect();
    void executeConnection?.close(0);
    throw error;
  }
}

/**
 * The execute script's own connection (script-connection.ts), for a single Redis given by a URL,
 * at the address, user and database ioredis parsed from it for the command connection.
 */
function openExecuteConnection(options: RedisStoreOptions, connection: RedisConnection): ScriptConnection | null {
  if (options.url === undefined || !(connection instanceof Redis)) return null;
  const address = scriptConnectionAddress(connection.options);
  if (address === null) return null;
  const target = describeTarget(options);
  return new ScriptConnection(address, {
    script: SCRIPTS.agentgateExecute,
    connectTimeoutMs: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    commandTimeoutMs: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
    reconnectDelayMs,
    // Said apart from the command connection's errors: while this one is down, execute goes on that one.
    onConnectionError: (error) => options.onConnectionError?.(new RedisConnectionError(`${target}, on execute's connection of its own (execute uses the command connection until it is back),`, error)),
  });
}

/** Every member of Store, put on each instance by composeStore (compose.ts) in the constructor. */
export interface RedisStore extends Store {}

/**
 * A class whose constructor has composeStore fill the instance with the roles' methods, so that
 * `instanceof RedisStore` tells a Redis store from another, and so it can add what only a Redis
 * store has: its command connection, its target, and what its withdrawals wait for.
 */
export class RedisStore {
  readonly #connection: RedisConnection;
  readonly #executeConnection: ScriptConnection | null;
  readonly #backend: RedisBackend;
  /** Where the store connects, in words (no password). */
  readonly target: string;

  /** Use createRedisStore, which connects and checks the server first. */
  constructor(
    connection: RedisConnection,
    keys: KeyLayout,
    options: RedisStoreOptions,
    durability: { connection: RedisConnection; wait: ReplicaWait },
    executeConnection: ScriptConnection | null = null,
  ) {
    const parts = redisParts(connection, keys, executeConnection);
    this.target = describeTarget(options);
    this.#connection = connection;
    this.#executeConnection = executeConnection;
    this.#backend = new RedisBackend(parts, options, durability);
    // The agent records append, on a Redis Cluster, the events and decision records the hot path's
    // round trip carries through this trail and these records (each stream is in a slot of its own there).
    const audit = new RedisAuditRecords(parts);
    const { onConnectionError: _onConnectionError, ...connectTo } = options;
    const decisions = new RedisDecisionRecords(parts, connectTo);
    composeStore(this, {
      hosts: new RedisHostRecords(parts),
      agents: new RedisAgentRecords(parts, audit, decisions),
      replay: new RedisReplayRecords(parts),
      pending: new RedisPendingIndex(parts),
      people: new RedisPersonRecords(parts),
      enrollments: new RedisHostEnrollments(parts),
      audit,
      decisions,
      backend: this.#backend,
    });
  }

  /**
   * The command connection, for the rate limiter only: its commands then ride in the same
   * auto-pipeline as the hot path's script (DESIGN §2 step 6). Do not issue store writes on it.
   */
  get connection(): RedisConnection {
    return this.#connection;
  }

  /** Whether execute's script has a connection of its own now; null where this topology has none (script-connection.ts). */
  get executeConnectionReady(): boolean | null {
    return this.#executeConnection === null ? null : this.#executeConnection.ready;
  }

  /** What withdrawals wait for, in words, for the start-up line. */
  durability(): string {
    return this.#backend.describeDurability();
  }
}
