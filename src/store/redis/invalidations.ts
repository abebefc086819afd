// The receiving side of key-cache invalidation for the Redis store: one subscriber connection per
// store, opened when the first listener registers, delivering each message to every listener.
import { closeConnection, openConnection, type RedisConnection, type RedisStoreOptions } from './connection.ts';

export class InvalidationSubscriber {
  readonly #options: RedisStoreOptions;
  readonly #channel: string;
  readonly #listeners: ((agentId: string) => void)[] = [];
  #subscriber: RedisConnection | null = null;

  constructor(options: RedisStoreOptions, channel: string) {
    this.#options = options;
    this.#channel = channel;
  }

  /**
   * Registers a listener. The subscriber connection (a connection in subscribe mode cannot send
   * other commands) is opened on the first registration; SUBSCRIBE completes asynchronously, so
   * a message published in the first milliseconds may not reach it. That is acceptable: the key
   * cache also has a short TTL and the hot path checks the key version in Redis.
   */
  add(listener: (agentId: string) => void): void {
    this.#listeners.push(listener);
    if (this.#subscriber) return;
    const subscriber = openConnection(this.#options, 'subscriber');
    this.#subscriber = subscriber;
    subscriber.on('message', (channel: string, agentId: string) => {
      if (channel === this.#channel) this.#deliver(agentId);
    });
    subscriber.subscribe(this.#channel).catch((error: unknown) => {
      this.#options.onConnectionError?.(error as Error);
    });
  }

  /** Every listener gets the message even when an earlier one throws. */
  #deliver(agentId: string): void {
    for (const listener of this.#listeners) {
      try {
        listener(agentId);
      } catch (error) {
        this.#options.onConnectionError?.(error as Error);
      }
    }
  }

  /** Forgets the listeners and closes the subscriber connection, if one was opened, within `ms`. */
  async close(ms: number): Promise<void> {
    this.#listeners.length = 0;
    const subscriber = this.#subscriber;
    this.#subscriber = null;
    if (subscriber) await closeConnection(subscriber, ms);
  }
}
