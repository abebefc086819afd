// One way to bound how long anything may take: a promise raced against a timer (STYLE: every
// external call has a timeout). The timer is cleared when the promise settles first.

/** Thrown when `within` gives up; callers that classify failures can recognise it. */
export class DeadlineError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DeadlineError';
  }
}

/** Rejects with DeadlineError after `ms` with a message naming what took too long. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * How long one call to Redis (a store call, a rate-limit check) may take in all: the command
 * timeout plus a small margin for the client's own bookkeeping, however many commands wait ahead.
 */
export function redisCallDeadlineMs(commandTimeoutMs: number): number {
  return commandTimeoutMs + 100;
}
