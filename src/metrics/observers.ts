// Small adapters from the events of one part (a cache lookup, a connection error) to what is
// recorded about them, so the composition root only wires them.
import { debugEnabled, type Logger } from '../logger.ts';
import type { Metrics } from './metrics.ts';

/**
 * The key cache's lookup hook: hits and misses counted, misses logged at debug (a miss costs a
 * store read and a key import, so a run of them explains a slow execute). Undefined, so the cache
 * calls nothing at all, when neither would be kept.
 */
export function keyCacheObserver(metrics: Metrics, logger: Logger): ((agentId: string, result: 'hit' | 'absent' | 'expired') => void) | undefined {
  const logMisses = debugEnabled(logger);
  if (!metrics.enabled && !logMisses) return undefined;
  return (agentId, result) => {
    metrics.keyCacheLookup(result === 'hit');
    if (result !== 'hit' && logMisses) logger.debug('agent key cache miss', { agentId, reason: result });
  };
}
