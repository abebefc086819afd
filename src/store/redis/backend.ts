// The Redis store's backend role (StoreBackend in store.ts): shared secrets (one key each, set once
// with SET NX), key-cache invalidations (PUBLISH here, the subscriber in invalidations.ts), waiting
// for replicas (durability.ts, on a connection of its own), and the health and closing of every
// connection the store opened.
import { randomBytes } from 'node:crypto';
import { isTaggable } from '../checks.ts';
import type { Durability, DurabilityAnchors, StoreBackend } from '../store.ts';
import { closeConnection, DEFAULT_COMMAND_TIMEOUT_MS, isRedisUnavailable, type RedisConnection, type RedisStoreOptions } from './connection.ts';
import type { ReplicaWait } from './durability.ts';
import { InvalidationSubscriber } from './invalidations.ts';
import type { RedisParts } from './parts.ts';

export class RedisBackend implements StoreBackend {
  readonly kind = 'redis' as const;
  readonly #redis: RedisParts;
  readonly #options: RedisStoreOptions;
  readonly #invalidations: InvalidationSubscriber;
  readonly #durability: { connection: RedisConnection; wait: ReplicaWait };

  constructor(redis: RedisParts, options: RedisStoreOptions, durability: { connection: RedisConnection; wait: ReplicaWait }) {
    this.#redis = redis;
    this.#options = options;
    this.#durability = durability;
    this.#invalidations = new InvalidationSubscriber(options, redis.keys.invalidationChannel);
  }

  async sharedSecret(name: string): Promise<string> {
    const key = this.#redis.keys.sharedSecret(name);
    await this.#redis.connection.set(key, randomBytes(32).toString('base64url'), 'NX');
    const secret = await this.#redis.connection.get(key);
    if (secret === null) throw new Error(`shared secret ${name} vanished right after it was set`);
    return secret;
  }

  // ---- key-cache invalidation ----------------------------------------------------------------

  async publishAgentInvalidation(agentId: string): Promise<void> {
    await this.#redis.connection.publish(this.#redis.keys.invalidationChannel, agentId);
  }

  /** Registers a listener; see InvalidationSubscriber for when it starts receiving. */
  onAgentInvalidation(listener: (agentId: string) => void): void {
    this.#invalidations.add(listener);
  }

  // ---- durability ----------------------------------------------------------------------------

  /** The agents' and hosts' own hash keys anchor the rounds: each lives in its record's slot. */
  confirmDurable(anchors: DurabilityAnchors): Promise<Durability> {
    const k = this.#redis.keys;
    const keys = [...(anchors.agentIds ?? []).filter(isTaggable).map(k.agent), ...(anchors.hostIds ?? []).filter(isTaggable).map(k.host)];
    return this.#durability.wait.confirm(keys);
  }

  /** What withdrawals wait for, in words (RedisStore#durability, for the start-up line). */
  describeDurability(): string {
    return this.#durability.wait.describe();
  }

  // ---- lifecycle -----------------------------------------------------------------------------

  isUnavailable(error: unknown): boolean {
    return isRedisUnavailable(error);
  }

  async ping(): Promise<void> {
    const reply = await this.#redis.connection.ping();
    if (reply !== 'PONG') throw new Error(`Redis answered PING with ${String(reply)}`);
  }

  async close(): Promise<void> {
    const ms = this.#options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    await Promise.all([
      closeConnection(this.#redis.connection, ms),
      closeConnection(this.#durability.connection, ms),
      this.#invalidations.close(ms),
      this.#redis.executeConnection?.close(ms),
    ]);
  }
}
