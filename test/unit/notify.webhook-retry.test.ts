// The two pure decisions of the notification webhook (src/notify/webhook.ts): which answers are
// retried, and how long the sender waits before the next attempt.
import { describe, expect, it } from 'vitest';
import { outcomeOfStatus, retryDelayMs } from '../../src/notify/webhook.ts';

describe('outcomeOfStatus', () => {
  it('a 2xx is delivered', () => {
    for (const status of [200, 201, 202, 204, 299]) expect(outcomeOfStatus(status)).toBe('delivered');
  });

  it('408, 429 and 5xx are retried', () => {
    for (const status of [408, 429, 500, 502, 503, 504, 599]) expect(outcomeOfStatus(status)).toBe('retry');
  });

  it('a redirect is refused rather than followed or retried, so a signed notification never goes elsewhere', () => {
    for (const status of [301, 302, 303, 307, 308]) expect(outcomeOfStatus(status)).toBe('refused');
  });

  it('other 4xx are refused', () => {
    for (const status of [400, 401, 403, 404, 410, 413, 422]) expect(outcomeOfStatus(status)).toBe('refused');
  });
});

describe('retryDelayMs', () => {
  const backoff = { baseMs: 100, maxMs: 1000 };

  it('draws below a ceiling that starts at the base and doubles with each failure', () => {
    expect(retryDelayMs(1, 0.999, backoff, null)).toBe(99);
    expect(retryDelayMs(2, 0.999, backoff, null)).toBe(199);
    expect(retryDelayMs(3, 0.5, backoff, null)).toBe(200);
  });

  it('full jitter: a draw of 0 waits not at all', () => {
    expect(retryDelayMs(4, 0, backoff, null)).toBe(0);
  });

  it('never exceeds the cap, however many failures (the doubling cannot overflow)', () => {
    expect(retryDelayMs(10, 0.999, backoff, null)).toBe(999);
    expect(retryDelayMs(10_000, 0.999, backoff, null)).toBe(999);
  });

  it('honours Retry-After seconds, but a receiver asking for an hour waits only backoffMaxMs', () => {
    expect(retryDelayMs(1, 0, backoff, '0')).toBe(0);
    expect(retryDelayMs(1, 0, { baseMs: 100, maxMs: 5000 }, '2')).toBe(2000);
    expect(retryDelayMs(1, 0, backoff, '3600')).toBe(1000);
  });

  it('ignores a Retry-After that is a date, negative, or garbage', () => {
    for (const header of ['Wed, 21 Oct 2015 07:28:00 GMT', '-5', '1.5', 'soon', '', '9'.repeat(100)]) {
      expect(retryDelayMs(1, 0, backoff, header)).toBe(0);
    }
  });
});
