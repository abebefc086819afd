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

/** Every problem loadConfig reports for `env`, one per line; empty when it loads. */
const problemsOf = (env: Record<string, string>): string => {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems.join('\n');
    throw error;
  }
  return '';
};

describe('Redis topology (DESIGN §10: single, Sentinel or Cluster, chosen by configuration)', () => {
  it('no Redis variable means the memory store', () => {
    expect(loadConfig({}).redis).toBeNull();
  });

  it('REDIS_URL is one Redis; rediss:// turns TLS on', () => {
    expect(loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379' }).redis).toEqual({ kind: 'single', url: 'redis://127.0.0.1:6379', tls: false });
    expect(loadConfig({ REDIS_URL: 'rediss://u:p@redis.example:6380' }).redis).toMatchObject({ kind: 'single', tls: true });
  });

  it('REDIS_CLUSTER_NODES is a cluster, with credentials and TLS for its nodes', () => {
    const config = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002', REDIS_USERNAME: 'agentgate', REDIS_PASSWORD: 'pw', REDIS_TLS: 'true' });
    expect(config.redis).toEqual({
      kind: 'cluster',
      nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '10.0.0.2', port: 7001 }, { host: '::1', port: 7002 }],
      username: 'agentgate', password: 'pw', tls: true,
    });
  });

  it('REDIS_SENTINELS and REDIS_SENTINEL_MASTER are a Sentinel set, with the sentinels\' own credentials', () => {
    const config = loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_MASTER: 'agentgate', REDIS_PASSWORD: 'pw', REDIS_SENTINEL_PASSWORD: 'spw' });
    expect(config.redis).toEqual({
      kind: 'sentinel', sentinels: [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }], masterName: 'agentgate',
      password: 'pw', sentinelPassword: 'spw', tls: false,
    });
  });

  it.each([
    [{ REDIS_URL: 'redis://a:1', REDIS_CLUSTER_NODES: 'b:2' }, /REDIS_CLUSTER_NODES: give one Redis topology, not REDIS_URL and REDIS_CLUSTER_NODES/],
    [{ REDIS_SENTINELS: 's:26379' }, /REDIS_SENTINEL_MASTER: REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together/],
    [{ REDIS_SENTINEL_MASTER: 'mymaster' }, /REDIS_SENTINELS: REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together/],
    [{ REDIS_CLUSTER_NODES: 'a:1,b' }, /REDIS_CLUSTER_NODES: "b" is not host:port/],
    [{ REDIS_CLUSTER_NODES: 'a:70000' }, /REDIS_CLUSTER_NODES: "a:70000" is not host:port/],
    [{ REDIS_CLUSTER_NODES: ' , ' }, /REDIS_CLUSTER_NODES: must list from 1 to 32 host:port addresses/],
    [{ REDIS_SENTINELS: 's:1', REDIS_SENTINEL_MASTER: 'my master' }, /REDIS_SENTINEL_MASTER: must be the master set's name/],
    [{ REDIS_URL: 'redis://a:1', REDIS_PASSWORD: 'pw' }, /REDIS_PASSWORD: with REDIS_URL the credentials go in the URL/],
    [{ REDIS_URL: 'redis://a:1', REDIS_TLS: 'true' }, /REDIS_TLS: with REDIS_URL, TLS is chosen by the scheme: rediss:/],
    [{ REDIS_PASSWORD: 'pw' }, /REDIS_PASSWORD: applies to a Redis, and none is configured/],
    [{ REDIS_CLUSTER_NODES: 'a:1', REDIS_USERNAME: 'u' }, /REDIS_PASSWORD: REDIS_USERNAME needs REDIS_PASSWORD/],
    [{ REDIS_CLUSTER_NODES: 'a:1', REDIS_SENTINEL_PASSWORD: 'x' }, /REDIS_SENTINEL_PASSWORD: applies only with REDIS_SENTINELS/],
    [{ REDIS_CLUSTER_NODES: 'a:1', REDIS_TLS: 'true', REDIS_TLS_CA_FILE: '/nonexistent/ca.pem' }, /REDIS_TLS_CA_FILE: cannot read "\/nonexistent\/ca.pem"/],
    [{ REDIS_CLUSTER_NODES: 'a:1', REDIS_TLS_CA_FILE: 'package.json' }, /REDIS_TLS_CA_FILE: applies with TLS only/],
    [{ REDIS_WAIT_REPLICAS: 'some' }, /REDIS_WAIT_REPLICAS/],
    [{ REDIS_WAIT_REPLICAS: '9' }, /REDIS_WAIT_REPLICAS/],
    [{ REDIS_WAIT_TIMEOUT_MS: '5' }, /REDIS_WAIT_TIMEOUT_MS: must be a whole number from 10 to 10000/],
    [{ WORKERS: '2' }, /WORKERS: more than one worker needs a Redis: REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS/],
  ])('refuses %j, naming the variable and what it must be', (env, message) => {
    expect(problemsOf(env)).toMatch(message);
  });

  it('never repeats a Redis password in a message', () => {
    expect(problemsOf({ REDIS_PASSWORD: 'hunter2-secret' })).not.toContain('hunter2-secret');
  });

  it('waits for a replica by default (auto), for at most 500 ms', () => {
    const config = loadConfig({ REDIS_URL: 'redis://a:1' });
    expect([config.REDIS_WAIT_REPLICAS, config.REDIS_WAIT_TIMEOUT_MS]).toEqual(['auto', 500]);
    expect(loadConfig({ REDIS_URL: 'redis://a:1', REDIS_WAIT_REPLICAS: '0' }).REDIS_WAIT_REPLICAS).toBe(0);
  });
});

describe('numbers are written in decimal digits', () => {
  it.each(['0x10', '0b11', '0o7', '+80', '1e3', '٣٠٠٠'])('PORT=%s is refused, though JavaScript would read it as a number', (text) => {
    expect(() => loadConfig({ PORT: text })).toThrow(/PORT: must be a whole number from 0 to 65535, not/);
  });

  it('surrounding spaces and a minus sign are still read (the range decides about the sign)', () => {
    expect(loadConfig({ PORT: ' 8080 ' }).PORT).toBe(8080);
    expect(() => loadConfig({ PORT: '-1' })).toThrow(/PORT: must be a whole number from 0 to 65535, not "-1"/);
  });
});

describe('CIBA notification channels', () => {
  const secret = 'x'.repeat(32);

  it.each([
    [{ APPROVAL_WEBHOOK_URL: 'https://hooks.example/agentgate' }, /APPROVAL_WEBHOOK_SECRET: APPROVAL_WEBHOOK_URL and APPROVAL_WEBHOOK_SECRET go together/],
    [{ APPROVAL_WEBHOOK_SECRET: secret }, /APPROVAL_WEBHOOK_SECRET: APPROVAL_WEBHOOK_URL and APPROVAL_WEBHOOK_SECRET go together/],
    [{ APPROVAL_WEBHOOK_URL: 'https://hooks.example/x', APPROVAL_WEBHOOK_SECRET: 'short' }, /APPROVAL_WEBHOOK_SECRET: must be at least 32 characters/],
    [{ APPROVAL_WEBHOOK_URL: 'ftp://hooks.example/x', APPROVAL_WEBHOOK_SECRET: secret }, /APPROVAL_WEBHOOK_URL/],
    [{ SMTP_URL: 'smtp://mail.example:587' }, /SMTP_FROM: SMTP_URL and SMTP_FROM go together/],
    [{ SMTP_URL: 'http://mail.example', SMTP_FROM: 'a@b.example' }, /SMTP_URL/],
    [{ SMTP_URL: 'smtp://mail.example', SMTP_FROM: 'a@b.example\r\nBcc: x@evil.example' }, /SMTP_FROM: must be one line/],
  ])('refuses %j, naming the variable and what it must be', (env, message) => {
    expect(problemsOf(env)).toMatch(message);
  });

  it('takes a webhook and an SMTP server together, and never repeats the SMTP password or the webhook secret in a message', () => {
    const config = loadConfig({ APPROVAL_WEBHOOK_URL: 'https://hooks.example/x', APPROVAL_WEBHOOK_SECRET: secret, SMTP_URL: 'smtps://u:pw@mail.example:465', SMTP_FROM: 'Agentgate <a@b.example>' });
    expect([config.APPROVAL_WEBHOOK_URL, config.SMTP_URL, config.RATE_LIMIT_CIBA_PER_PERSON_PER_HOUR, config.RATE_LIMIT_CIBA_PER_HOST_PER_HOUR]).toEqual(['https://hooks.example/x', 'smtps://u:pw@mail.example:465', 10, 60]);
    const problems = problemsOf({ APPROVAL_WEBHOOK_SECRET: 'hunter2-secret', SMTP_URL: 'smtp://u:hunter3@mail.example' });
    expect(problems).not.toContain('hunter2-secret');
    expect(problems).not.toContain('hunter3');
  });
});

describe('keys at JWKS URLs', () => {
  it('allows no private range by default, and reads a list of CIDR networks', () => {
    expect(loadConfig({}).INSECURE_JWKS_ALLOWED_PRIVATE_RANGES).toEqual([]);
    expect(loadConfig({ INSECURE_JWKS_ALLOWED_PRIVATE_RANGES: ' 10.20.0.0/16, fd00::/8 ' }).INSECURE_JWKS_ALLOWED_PRIVATE_RANGES).toEqual(['10.20.0.0/16', 'fd00::/8']);
  });

  it.each(['10.20.0.0/33', 'example.com', '10.0.0.0/8/1', 'fe80::1%eth0/64'])('refuses %s as a private range, naming the variable', (entry) => {
    expect(problemsOf({ INSECURE_JWKS_ALLOWED_PRIVATE_RANGES: entry })).toMatch(/INSECURE_JWKS_ALLOWED_PRIVATE_RANGES.*must be a CIDR network/);
  });

  it('defaults to a 5 minute cache with a 1 minute stale window, and refuses a TTL under 10 s', () => {
    const config = loadConfig({});
    expect([config.JWKS_CACHE_TTL_SECONDS, config.JWKS_CACHE_STALE_SECONDS, config.JWKS_FETCH_TIMEOUT_MS, config.RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR]).toEqual([300, 60, 5000, 60]);
    expect(problemsOf({ JWKS_CACHE_TTL_SECONDS: '5' })).toMatch(/JWKS_CACHE_TTL_SECONDS/);
  });
});
