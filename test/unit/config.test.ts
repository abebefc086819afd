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

describe('TRUST_PROXY', () => {
  it.each([['false', false], ['0', false], ['1', 1], ['2', 2], ['loopback', ['loopback']], ['10.0.0.0/8, 192.0.2.1', ['10.0.0.0/8', '192.0.2.1']], ['::1, fd00::/8', ['::1', 'fd00::/8']]])(
    'reads %s as %j',
    (text, value) => {
      expect(loadConfig({ TRUST_PROXY: text }).TRUST_PROXY).toEqual(value);
    },
  );

  it('refuses true, which would believe whatever a client writes first in X-Forwarded-For', () => {
    expect(() => loadConfig({ TRUST_PROXY: 'true' })).toThrow(/TRUST_PROXY: true would trust whatever a client writes/);
  });

  it.each(['10.0.0.0/33', 'proxy.example', '10.0.0.1/8/1', 'loopback, nonsense'])('refuses the entry %s', (text) => {
    expect(() => loadConfig({ TRUST_PROXY: text })).toThrow(/TRUST_PROXY: must be false, a number of proxies/);
  });
});

describe('ISSUER', () => {
  it('defaults to a host name (localhost), which WebAuthn accepts as relying-party id, on PORT', () => {
    expect(loadConfig({ PORT: '4100' }).issuer).toBe('http://localhost:4100');
  });
});
