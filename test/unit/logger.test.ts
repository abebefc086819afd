// The log format every line follows (JSON, ISO time, level label, msg), errors written whole, and
// the redaction that keeps a token out of a line even if a future call site puts one there.
import { describe, expect, it } from 'vitest';
import { createLogger, debugEnabled, isoTime, REDACTED, withSerialisedErrors } from '../../src/logger.ts';

function capture(level: Parameters<typeof createLogger>[0]) {
  const lines: string[] = [];
  const logger = createLogger(level, (line) => lines.push(line));
  return { logger, lines, entries: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe('the logger', () => {
  it('writes one JSON line per event with an ISO time, the level as a label and msg', () => {
    const { logger, lines, entries } = capture('info');
    logger.info('hello', { count: 2 });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.endsWith('\n')).toBe(true);
    const [entry] = entries();
    expect(entry).toMatchObject({ level: 'info', msg: 'hello', count: 2 });
    expect(entry!.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('writes nothing below its level, and says whether debug is on', () => {
    const info = capture('info');
    info.logger.debug('quiet');
    expect(info.lines).toEqual([]);
    expect(debugEnabled(info.logger)).toBe(false);
    const debug = capture('debug');
    debug.logger.debug('loud');
    expect(debug.entries()[0]).toMatchObject({ level: 'debug', msg: 'loud' });
    expect(debugEnabled(debug.logger)).toBe(true);
    const silent = capture('silent');
    silent.logger.error('nothing');
    expect(silent.lines).toEqual([]);
  });

  it('writes errors at any key as name, message, stack and cause', () => {
    const { logger, entries } = capture('info');
    const cause = new TypeError('inner');
    logger.error('failed', { err: new RangeError('outer', { cause }), nested: { error: new Error('deep') } });
    const [entry] = entries() as Array<{ err: Record<string, unknown>; nested: { error: Record<string, unknown> } }>;
    expect(entry!.err).toMatchObject({ name: 'RangeError', message: 'outer', stack: expect.stringContaining('RangeError: outer') });
    expect(entry!.err.cause).toMatchObject({ name: 'TypeError', message: 'inner' });
    expect(entry!.nested.error).toMatchObject({ name: 'Error', message: 'deep' });
  });

  it("does not change the caller's fields when it serialises an error", () => {
    const error = new Error('x');
    const fields = { a: { error } };
    withSerialisedErrors(fields);
    expect(fields.a.error).toBe(error);
  });

  it('a bearer token logged by mistake under a known field name is redacted', () => {
    const { logger, lines } = capture('debug');
    logger.info('oops', {
      authorization: 'Bearer eyJsecret', headers: { authorization: 'Bearer eyJsecret2', cookie: 'agentgate_session=abc' },
      token: 'eyJsecret3', user_code: 'ABCD-EFGH', body: { token: 'eyJsecret4' }, kept: 'visible',
    });
    expect(lines[0]).not.toMatch(/eyJsecret|ABCD-EFGH|agentgate_session=abc/);
    expect(lines[0]).toContain(REDACTED);
    expect(lines[0]).toContain('visible');
  });
});

describe('isoTime', () => {
  it('is Date#toISOString, with the seconds part made once per second', () => {
    for (const ms of [0, 7, 99, 999, 1000, 1_700_000_000_123, 1_700_000_000_999, 1_700_000_001_000, 1_700_000_000_050, Date.now()]) {
      expect(isoTime(ms)).toBe(new Date(ms).toISOString());
    }
  });
});
