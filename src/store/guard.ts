// Makes every store call fail closed and bounded (docs/stances.md):
// - A backend that is unreachable, slow or not serving becomes 503 service_unavailable (the client
//   retries later), never an authorization and never a hang. The cause goes to the log.
// - A call has a deadline of its own. ioredis times out a command only once it is written, and
//   auto-pipelined commands wait for the batch ahead of them, so under a Redis freeze a request
//   could wait two or more command timeouts; the deadline makes every refusal come within one.
// - Anything else (a bug, a corrupt record) is not dressed up as an outage: it propagates and is
//   answered 500 internal_error, logged with the request id by the error handler.
import { ApiError } from '../errors.ts';
import { within } from '../deadline.ts';
import type { Logger } from '../logger.ts';
import type { Store } from './store.ts';

/** Methods that are not calls to the backend. */
const NOT_CALLS: ReadonlySet<PropertyKey> = new Set(['onAgentInvalidation', 'isUnavailable']);

export function failClosedStore(store: Store, logger: Logger, options: { deadlineMs?: number | undefined } = {}): Store {
  const wrapped = new Map<PropertyKey, unknown>();
  const { deadlineMs } = options;
  return new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || NOT_CALLS.has(property)) return value;
      let fn = wrapped.get(property);
      if (!fn) {
        const call = String(property);
        fn = async (...args: unknown[]) => {
          try {
            const pending = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            return await (deadlineMs === undefined ? pending : within(pending, deadlineMs, `storage call ${call}`));
          } catch (err) {
            if (err instanceof ApiError || !target.isUnavailable(err)) throw err;
            logger.error('storage unavailable; refusing', { call, err });
            throw new ApiError('service_unavailable', 'storage is unavailable; retry later');
          }
        };
        wrapped.set(property, fn);
      }
      return fn;
    },
  });
}
