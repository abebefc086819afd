// The pure parts behind the messages test/integration/errors.newcomer.test.ts checks where a
// newcomer met them: configuration problems in words (and never a secret's value), Redis failures
// in agentgate's words, the plugin loader's hint for a Node without type stripping, the request id
// on every log line of a request, and the audit families a `type` filter is checked against.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { DeadlineError } from '../../src/common/deadline.ts';
import { AUDIT_EVENT_FAMILIES } from '../../src/audit/events.ts';
import { createLogger } from '../../src/logger.ts';
import { loadFailureText } from '../../src/operators/plugin-loader.ts';
import { newRequestContext, runInRequestContext } from '../../src/request-context.ts';
import { describeRedisFailure, RedisConnectionError } from '../../src/store/redis/connection.ts';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('configuration problems name the variable, what it must be and what it holds', () => {
  it.each([
    [{ PORT: 'abc' }, 'PORT: must be a whole number from 0 to 65535, not "abc"'],
    [{ PORT: '3000.5' }, 'PORT: must be a whole number from 0 to 65535, not "3000.5"'],
    [{ AGENTS_PER_HOST_MAX: '0' }, 'AGENTS_PER_HOST_MAX: must be a whole number from 1 to 10000000, not "0"'],
    [{ MODES: 'delegated,robot' }, 'MODES: "robot" is not one of delegated, autonomous; give a comma-separated list of them'],
    [{ ALGORITHMS: 'RSA' }, 'ALGORITHMS: "RSA" is not one of Ed25519, P-256; give a comma-separated list of them'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL: must be one of debug, info, warn, error, silent, not "loud"'],
    [{ POLICY_WATCH: 'maybe' }, 'POLICY_WATCH: must be true or false (also 1/0, yes/no, on/off), not "maybe"'],
    [{ ISSUER: 'ftp://example.com' }, 'ISSUER: must be a valid http:// or https:// URL, not "ftp://example.com"'],
  ])('%j', (env, problem) => {
    expect(problemsOf(env)).toContain(problem);
  });

  it('never repeats the value of a token, key or URL, and escapes what it repeats', () => {
    const problems = problemsOf({ ADMIN_TOKEN: 'hunter2', REDIS_URL: 'http://user:s3cret@redis', SIGN_IN_COOKIE_KEY: 'short-key', PORT: 'a\u202eb' });
    expect(problems.join('\n')).not.toMatch(/hunter2|s3cret|short-key/);
    expect(problems).toContain('PORT: must be a whole number from 0 to 65535, not "a\\u202eb"');
  });
});

describe('Redis failures in agentgate\'s words', () => {
  const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });
  it.each([
    [withCode('connect ECONNREFUSED 127.0.0.1:6379', 'ECONNREFUSED'), 'refused the connection: nothing listens at that address', 'ECONNREFUSED'],
    [withCode('getaddrinfo ENOTFOUND redis', 'ENOTFOUND'), 'has a host name that does not resolve', 'ENOTFOUND'],
    [new Error('Connection is closed.'), 'closed the connection', 'connection_closed'],
    [Object.assign(new Error('Protocol error, got "H" as reply type byte. Please report this.'), { name: 'ParserError' }), 'sent a reply that is not Redis protocol (is it a Redis server?); the connection is reset', 'ParserError'],
    [new Error('WRONGPASS invalid username-password pair or user is disabled.'), 'refused the credentials: check the user and password (in REDIS_URL, or REDIS_USERNAME and REDIS_PASSWORD)', 'WRONGPASS'],
    [new DeadlineError('connecting did not finish within 2500 ms'), 'did not answer in time', 'timeout'],
  ])('%s', (error, what, code) => {
    expect(describeRedisFailure(error)).toEqual({ what, code });
    const wrapped = new RedisConnectionError('Redis redis://127.0.0.1:6379/', error);
    expect(wrapped.message).toBe(`Redis redis://127.0.0.1:6379/ ${what} (${code})`);
    expect(wrapped.cause).toBe(error);
  });
});

describe('a plugin a Node without type stripping cannot load', () => {
  const unknownExtension = Object.assign(new TypeError('Unknown file extension ".ts" for /srv/agentgate/plugins/cidr.ts'), { code: 'ERR_UNKNOWN_FILE_EXTENSION' });

  it('says this Node cannot load TypeScript, and both ways out (Node 24, or PLUGINS_DIR=dist/plugins)', () => {
    const text = loadFailureText('/srv/agentgate/plugins/cidr.ts', unknownExtension, 'v20.20.2');
    expect(text).toMatch(/^Node v20\.20\.2 cannot load TypeScript files \(ERR_UNKNOWN_FILE_EXTENSION\)\. Run agentgate on Node 24/);
    expect(text).toContain('PLUGINS_DIR=dist/plugins node dist/src/main.js');
  });

  it('leaves any other failure as it was', () => {
    expect(loadFailureText('/srv/agentgate/plugins/x.js', new SyntaxError('Unexpected token'), 'v20.20.2')).toBe('Unexpected token');
  });
});

describe('log lines written while a request is handled', () => {
  it('name its request id, from the request context, unless they name one themselves', () => {
    const lines: string[] = [];
    const logger = createLogger('info', (line) => lines.push(line));
    runInRequestContext(newRequestContext('req-1'), () => {
      logger.error('capability backend failed', { capability: 'flaky_backend' });
      logger.info('request', { requestId: 'own-id' });
      logger.warn('no fields');
    });
    logger.info('outside any request');
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(parsed.map((line) => line.requestId)).toEqual(['req-1', 'own-id', 'req-1', undefined]);
    expect(parsed[0]).toMatchObject({ msg: 'capability backend failed', capability: 'flaky_backend' });
  });
});

describe('the audit trail\'s event families', () => {
  it('hold every event type the code records, so a type filter is never refused for a real type', async () => {
    const files = (await readdir(SRC, { recursive: true })).filter((file) => file.endsWith('.ts'));
    const families = new Set<string>();
    for (const file of files) {
      const text = await readFile(join(SRC, file), 'utf8');
      for (const match of text.matchAll(/\btype: '([a-z_]+)\.[a-z_]+'/g)) families.add(match[1]!);
    }
    expect(families.size).toBeGreaterThan(5);
    expect([...families].filter((family) => !(AUDIT_EVENT_FAMILIES as readonly string[]).includes(family))).toEqual([]);
  });
});
