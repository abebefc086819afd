// One way to bound how long anything may take (STYLE: every external call has a timeout): a
// promise that rejects with DeadlineError unless the given one settles first.
//
// Every store call and rate-limit check on the hot path gets a deadline, three or four per execute.
// A timer each (a Timeout, a racing promise, Promise.race and a finally) was measurable there, so
// pending deadlines share one interval instead, which runs only while any are pending. A deadline
// therefore fires between `ms` and `ms + SWEEP_INTERVAL_MS` after the call began.
import { NamedError } from './thrown.ts';

/** Thrown when `within` gives up; callers that classify failures can recognise it. */
export class DeadlineError extends NamedError {}

/** How often pending deadlines are checked: the most a deadline may fire late. */
const SWEEP_INTERVAL_MS = 20;

interface Pending {
  deadlineMs: number;
  expire: () => void;
}

const pending = new Set<Pending>();
let sweeper: NodeJS.Timeout | undefined;

function sweep(): void {
  const nowMs = performance.now();
  // Bounded by the calls in flight; each is looked at once per sweep.
  for (const entry of pending) {
    if (entry.deadlineMs <= nowMs) {
      pending.delete(entry);
      entry.expire();
    }
  }
  if (pending.size === 0) {
    clearInterval(sweeper);
    sweeper = undefined;
  }
}

/** Rejects with DeadlineError after `ms` (at most SWEEP_INTERVAL_MS late) with a message naming what took too long. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry: Pending = {
      deadlineMs: performance.now() + ms,
      expire: () => reject(new DeadlineError(`${what} did not finish within ${ms} ms`)),
    };
    pending.add(entry);
    // Not unref'd: like the timer it replaces, a pending deadline keeps the process alive, and the
    // interval stops as soon as nothing is pending.
    sweeper ??= setInterval(sweep, SWEEP_INTERVAL_MS);
    promise.then(
      (value) => {
        pending.delete(entry);
        resolve(value);
      },
      (err: unknown) => {
        pending.delete(entry);
        reject(err);
      },
    );
  });
}

/**
 * How long one call to Redis (a store call, a rate-limit check) may take in all: the command
 * timeout plus a small margin for the client's own bookkeeping, however many commands wait ahead.
 */
export function redisCallDeadlineMs(commandTimeoutMs: number): number {
  return commandTimeoutMs + 100;
}
