// The memory store's backend role (StoreBackend in store.ts): the shared secrets, key-cache
// invalidations delivered within the process, durability (nothing to wait for), and the store's
// health and close, which closes the gate every role object checks (shared-state.ts).
import { randomBytes } from 'node:crypto';
import type { Durability, StoreBackend } from '../store.ts';
import { MemoryStoreClosedError, ReplayCacheFullError, type MemoryGate } from './shared-state.ts';

export class MemoryBackend implements StoreBackend {
  readonly kind = 'memory' as const;
  readonly #gate: MemoryGate;
  readonly #secrets = new Map<string, string>();
  readonly #listeners: ((agentId: string) => void)[] = [];
  readonly #onListenerError: ((error: Error) => void) | undefined;

  constructor(gate: MemoryGate, onListenerError: ((error: Error) => void) | undefined) {
    this.#gate = gate;
    this.#onListenerError = onListenerError;
  }

  async sharedSecret(name: string): Promise<string> {
    this.#gate.assertOpen();
    let secret = this.#secrets.get(name);
    if (secret === undefined) {
      secret = randomBytes(32).toString('base64url');
      this.#secrets.set(name, secret);
    }
    return secret;
  }

  // ---- key-cache invalidation ----------------------------------------------------------------

  /** Delivered asynchronously, as Redis pub/sub would be, and each listener on its own. */
  async publishAgentInvalidation(agentId: string): Promise<void> {
    this.#gate.assertOpen();
    for (const listener of [...this.#listeners]) {
      queueMicrotask(() => {
        try {
          listener(agentId);
        } catch (error) {
          // A failing listener must not stop the others, and is reported, as with the Redis store.
          this.#onListenerError?.(error instanceof Error ? error : new Error(String(error)));
        }
      });
    }
  }

  onAgentInvalidation(listener: (agentId: string) => void): void {
    this.#listeners.push(listener);
  }

  // ---- durability ----------------------------------------------------------------------------

  /** One process holds the only copy: there is no replica to wait for (and no failover to survive). */
  async confirmDurable(): Promise<Durability> {
    return 'durable';
  }

  // ---- lifecycle -----------------------------------------------------------------------------

  isUnavailable(error: unknown): boolean {
    return error instanceof MemoryStoreClosedError || error instanceof ReplayCacheFullError;
  }

  async ping(): Promise<void> {
    this.#gate.assertOpen();
  }

  async close(): Promise<void> {
    this.#gate.close();
    this.#listeners.length = 0;
  }
}
