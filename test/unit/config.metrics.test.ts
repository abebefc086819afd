// The metrics settings: off unless a token or a port guards them; refused where a scrape would be
// wrong (the main port twice, or one worker's numbers passed off as the whole server's).
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { metricsEnabled } from '../../src/metrics/metrics.ts';

const problemsOf = (env: Record<string, string>): string[] => {
  try {
    loadConfig(env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
};

describe('metrics configuration', () => {
  it('metrics are off with neither METRICS_TOKEN nor METRICS_PORT, and on with either', () => {
    expect(metricsEnabled(loadConfig({}))).toBe(false);
    expect(metricsEnabled(loadConfig({ METRICS_TOKEN: 'a-metrics-token-of-16+' }))).toBe(true);
    expect(metricsEnabled(loadConfig({ METRICS_PORT: '9464' }))).toBe(true);
  });

  it('a guessable metrics token is refused', () => {
    expect(problemsOf({ METRICS_TOKEN: 'short' })).toEqual([expect.stringMatching(/^METRICS_TOKEN: must be at least 16 characters/)]);
  });

  it('METRICS_PORT must be a port other than PORT', () => {
    expect(problemsOf({ METRICS_PORT: '70000' })).toEqual([expect.stringMatching(/^METRICS_PORT/)]);
    expect(problemsOf({ PORT: '3000', METRICS_PORT: '3000' })).toEqual([expect.stringMatching(/^METRICS_PORT: must differ from PORT/)]);
  });

  it('with several workers, metrics behind a token alone are refused: the primary serves them on METRICS_PORT', () => {
    const cluster = { WORKERS: '2', REDIS_URL: 'redis://127.0.0.1:6379' };
    expect(problemsOf({ ...cluster, METRICS_TOKEN: 'a-metrics-token-of-16+' })).toEqual([expect.stringMatching(/^METRICS_PORT: with more than one worker/)]);
    expect(problemsOf({ ...cluster, METRICS_TOKEN: 'a-metrics-token-of-16+', METRICS_PORT: '9464' })).toEqual([]);
  });
});
