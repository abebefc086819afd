// Fail closed on storage failures: any rejection from a store call (Redis unreachable, timeout,
// a malformed record) becomes 503 service_unavailable, never an authorization and never a hang.
// The cause goes to the log; the client sees only that storage is unavailable.
import { ApiError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { Store } from './store.ts';

export function guardStore(store: Store, logger: Logger): Store {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || property === 'onAgentInvalidation') return value;
      let fn = wrapped.get(property);
      if (!fn) {
        fn = async (...args: unknown[]) => {
          try {
            return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          } catch (err) {
            if (err instanceof ApiError) throw err;
            logger.error('storage call failed', { call: String(property), err });
            throw new ApiError('service_unavailable', 'storage is unavailable; retry later');
          }
        };
        wrapped.set(property, fn);
      }
      return fn;
    },
  });
}
