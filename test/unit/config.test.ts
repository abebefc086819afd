// The one configuration schema: every problem at once, booleans read the usual ways.
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('configuration', () => {
  it.each([['true', true], ['1', true], ['yes', true], ['on', true], ['FALSE', false], ['0', false], ['no', false], ['off', false]])(
    'reads the boolean %s as %s',
    (text, value) => {
      expect(loadConfig({ POLICY_WATCH: text }).POLICY_WATCH).toBe(value);
    },
  );

  it('refuses a boolean it cannot read, and reports every problem at once', () => {
    let error: unknown;
    try {
      loadConfig({ POLICY_WATCH: 'maybe', PORT: 'eighty', HTTP_HEADERS_TIMEOUT_MS: '40000', HTTP_REQUEST_TIMEOUT_MS: '30000' });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems.join('\n');
    expect(problems).toMatch(/POLICY_WATCH/);
    expect(problems).toMatch(/PORT/);
  });
});
