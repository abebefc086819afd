// How long a notifier waits before its next attempt (delivery.ts): exponential backoff with full
// jitter, raised to a receiver's own `Retry-After` but never past the ceiling.

/**
 * How long to wait after the `failures`-th failed attempt (1 for the first): full jitter, a uniform
 * draw (`random` in [0, 1)) below a ceiling that starts at backoffBaseMs and doubles, capped at
 * backoffMaxMs. A receiver's `Retry-After` in seconds (given only for 429 and 503) raises the wait
 * to what it asked for, but never past backoffMaxMs, so a receiver cannot park the queue for a day.
 */
export function retryDelayMs(
  failures: number,
  random: number,
  backoff: { baseMs: number; maxMs: number },
  retryAfter: string | null,
): number {
  // The exponent is capped so the doubling cannot overflow to Infinity for a large attempt count.
  const exponent = Math.min(Math.max(failures, 1) - 1, 30);
  const ceilingMs = Math.min(backoff.maxMs, backoff.baseMs * 2 ** exponent);
  const jitteredMs = Math.floor(ceilingMs * Math.min(Math.max(random, 0), 1));
  const askedMs = retryAfterMs(retryAfter);
  return askedMs === null ? jitteredMs : Math.max(jitteredMs, Math.min(askedMs, backoff.maxMs));
}

/** `Retry-After` as delay seconds, in ms; null for an HTTP date, garbage, or no header. */
function retryAfterMs(value: string | null): number | null {
  if (value === null) return null;
  const trimmed = value.trim();
  // Ten digits is over 300 years; anything longer is not a delay we would honour anyway.
  if (trimmed.length === 0 || trimmed.length > 10 || !/^\d+$/.test(trimmed)) return null;
  return Number(trimmed) * 1000;
}
