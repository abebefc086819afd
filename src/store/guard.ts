// Makes every store call fail closed and bounded (docs/stances.md):
// - A backend that is unreachable, slow or not serving becomes 503 service_unavailable (the client
//   retries later), never an authorization and never a hang. The cause goes to the log.
// - A call has a deadline of its own. ioredis times out a command only once it is written, and
//   auto-pipelined commands wait for the batch ahead of them, so under a Redis freeze a request
//   could wait two or more command timeouts; the deadline makes every refusal come within one.
// - Anything else (a bug, a corrupt record) is not dressed up as an outage: it propagates and is
//   answered 500 internal_error, logged with the request id by the error handler.
// Every call passes here, so this is also where store calls are timed: a latency histogram by
// store method when metrics are on, and a debug line for a call slower than SLOW_CALL_MS.
import { performance } from 'node:perf_hooks';
import { ApiError } from '../errors.ts';
import { within } from '../common/deadline.ts';
import { debugEnabled, type Logger } from '../logger.ts';
import { noMetrics, type Metrics } from '../metrics/metrics.ts';
import type { Store } from './store.ts';

/** Methods that are not calls to the backend. */
const NOT_CALLS: ReadonlySet<PropertyKey> = new Set(['onAgentInvalidation', 'isUnavailable', 'decisionStreamAddress']);

/**
 * A store call slower than this gets a debug line. A healthy Redis on the same network answers
 * the hot path's one round trip in about a millisecond; twenty is a queue, a slow script or a
 * struggling server, worth seeing while debugging and too common under load to log at info.
 */
export const SLOW_CALL_MS = 20;

interface GuardOptions {
  deadlineMs?: number | undefined;
  /** Calls that may take longer than others by design, and by how much (e.g. waiting for a replica). */
  extraMs?: Partial<Record<keyof Store, number>> | undefined;
  metrics?: Metrics | undefined;
}

export function failClosedStore(store: Store, logger: Logger, options: GuardOptions = {}): Store {
  const wrapped = new Map<PropertyKey, unknown>();
  const { deadlineMs } = options;
  const metrics = options.metrics ?? noMetrics;
  // Decided once: timing costs two clock reads per call, paid only when something reads them.
  const timed = metrics.enabled || debugEnabled(logger);
  return new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || NOT_CALLS.has(property)) return value;
      let fn = wrapped.get(property);
      if (!fn) {
        const call = String(property);
        const callDeadlineMs = deadlineMs === undefined ? undefined : deadlineMs + (options.extraMs?.[property as keyof Store] ?? 0);
        fn = async (...args: unknown[]) => {
          const startedAt = timed ? performance.now() : 0;
          try {
            const pending = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            return await (callDeadlineMs === undefined ? pending : within(pending, callDeadlineMs, `storage call ${call}`));
          } catch (err) {
            if (err instanceof ApiError) throw err;
            if (!target.isUnavailable(err)) {
              metrics.storeCallFailure(call, 'error');
              throw err;
            }
            metrics.storeCallFailure(call, 'unavailable');
            logger.error('storage unavailable; refusing', { call, err });
            throw new ApiError('service_unavailable', `the ${target.kind} store cannot be reached; retry later`);
          } finally {
            if (timed) {
              const durationMs = performance.now() - startedAt;
              metrics.storeCall(call, durationMs / 1000);
              if (durationMs > SLOW_CALL_MS) logger.debug('slow storage call', { call, durationMs: Math.round(durationMs * 10) / 10 });
            }
          }
        };
        wrapped.set(property, fn);
      }
      return fn;
    },
  });
}
