// Recorded policy decisions read back from a store (src/policy/decision-records.ts): the parser
// refuses anything malformed or out of bounds, so a preview never trusts a record it did not check;
// and a recorded decision re-runs only on the operator answers it recorded, so a call it did not
// make is a distinct failure the preview can count, never a silent `false`.
import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  decisionRecordProblem,
  MAX_OPERATOR_ANSWERS,
  MAX_RECORD_PART_BYTES,
  operatorFromAnswers,
  parseDecisionRecord,
  UnrecordedOperatorCall,
  type DecisionRecord,
} from '../../src/policy/decision-records.ts';

const SHA = 'a'.repeat(64);

const executeRecord = (extra: Partial<DecisionRecord> = {}): DecisionRecord => ({
  id: '1767225600000-0',
  at: '2026-01-01T00:00:00.000Z',
  entrypoint: 'agentgate/execute',
  sha256: SHA,
  input: { capability: 'transfer_money', arguments: { amount: 5 } },
  output: { allow: false, reason: 'constraint violated', violations: [{ field: 'amount', constraint: { max: 1 }, actual: 5 }] },
  operatorAnswers: [['starts_with', '/tmp', '/tmp/a', true]],
  ...extra,
});

const grantsRecord = (extra: Partial<DecisionRecord> = {}): DecisionRecord => ({
  at: '2026-01-01T00:00:00Z',
  entrypoint: 'agentgate/grants',
  sha256: SHA,
  input: { host: { id: 'hst_1' }, requests: [{ capability: 'read_file' }] },
  output: { decisions: [{ capability: 'read_file', decision: 'approval', reason: 'user approval required' }] },
  ...extra,
});

/** A JSON value nested `levels` arrays deep. */
function nested(levels: number): unknown {
  let value: unknown = 0;
  for (let i = 0; i < levels; i++) value = [value];
  return value;
}

describe('parseDecisionRecord accepts well-formed records as they are', () => {
  it('keeps every member of an execute record and of a grants record, and nothing else', () => {
    expect(parseDecisionRecord(executeRecord())).toStrictEqual(executeRecord());
    expect(parseDecisionRecord(grantsRecord())).toStrictEqual(grantsRecord());
    expect(parseDecisionRecord({ ...grantsRecord(), extra: 'ignored' })).toStrictEqual(grantsRecord());
  });

  it('accepts a timestamp with an offset, and input and answers exactly at their bounds', () => {
    expect(parseDecisionRecord(executeRecord({ at: '2026-01-01T01:00:00+01:00' }))).not.toBeNull();
    // {"pad":"xxx..."} is 10 bytes of JSON around the string.
    const atLimit = { pad: 'x'.repeat(MAX_RECORD_PART_BYTES - 10) };
    expect(Buffer.byteLength(JSON.stringify(atLimit))).toBe(MAX_RECORD_PART_BYTES);
    expect(parseDecisionRecord(executeRecord({ input: atLimit }))).not.toBeNull();
    const answers = Array.from({ length: MAX_OPERATOR_ANSWERS }, (_, i): [string, unknown, unknown, boolean] => ['op', i, null, i % 2 === 0]);
    expect(parseDecisionRecord(executeRecord({ operatorAnswers: answers }))?.operatorAnswers).toHaveLength(MAX_OPERATOR_ANSWERS);
  });
});

describe('parseDecisionRecord refuses anything malformed or out of bounds', () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['not an object', 'record', /not an object/],
    ['an array', [executeRecord()], /not an object/],
    ['an empty id', executeRecord({ id: '' }), /id/],
    ['a numeric id', { ...executeRecord(), id: 7 }, /id/],
    ['a date that is not ISO 8601', executeRecord({ at: 'Thu, 01 Jan 2026 00:00:00 GMT' }), /ISO 8601/],
    ['an impossible date', executeRecord({ at: '2026-13-45T00:00:00Z' }), /ISO 8601/],
    ['another entrypoint', { ...executeRecord(), entrypoint: 'agentgate/other' }, /entrypoint/],
    ['an uppercase sha256', executeRecord({ sha256: 'A'.repeat(64) }), /sha256/],
    ['a short sha256', executeRecord({ sha256: 'a'.repeat(63) }), /sha256/],
    ['an input that is an array', { ...executeRecord(), input: [] }, /input is not an object/],
    ['an input over 64 KiB', executeRecord({ input: { pad: 'x'.repeat(MAX_RECORD_PART_BYTES - 9) } }), /input is 65537 bytes/],
    ['an input over 64 KiB in multi-byte characters', executeRecord({ input: { pad: 'é'.repeat(MAX_RECORD_PART_BYTES / 2) } }), /input is \d+ bytes/],
    ['an input nested too deep', executeRecord({ input: { deep: nested(70) } }), /input nests deeper than 64/],
    ['an input holding a non-finite number', executeRecord({ input: { n: Infinity } }), /number JSON cannot hold/],
    ['an input holding undefined', executeRecord({ input: { u: undefined } }), /undefined/],
    ['an input holding a Date', executeRecord({ input: { d: new Date(0) } }), /not plain JSON/],
    ['an execute output without allow', executeRecord({ output: { violations: [] } }), /output.allow/],
    ['an execute output whose allow is a string', executeRecord({ output: { allow: '[redacted]', violations: [] } }), /output.allow/],
    ['an execute output without violations', executeRecord({ output: { allow: true } }), /output.violations/],
    ['an execute output whose reason is a number', executeRecord({ output: { allow: false, violations: [], reason: 1 } }), /output.reason/],
    ['a grants output without decisions', grantsRecord({ output: {} }), /output.decisions/],
    ['a grants decision with another verdict', grantsRecord({ output: { decisions: [{ capability: 'a', decision: 'maybe' }] } }), /output.decisions holds an item/],
    ['a grants decision without a capability', grantsRecord({ output: { decisions: [{ decision: 'grant' }] } }), /output.decisions holds an item/],
    ['an output over 64 KiB', executeRecord({ output: { allow: true, violations: [], pad: 'x'.repeat(MAX_RECORD_PART_BYTES) } }), /output is \d+ bytes/],
    ['operator answers on a grants record', grantsRecord({ operatorAnswers: [['op', 1, 2, true]] }), /execute decisions only/],
    ['operator answers that are not a list', { ...executeRecord(), operatorAnswers: {} }, /not an array/],
    ['an operator answer of three items', { ...executeRecord(), operatorAnswers: [['op', 1, true]] }, /\[name, operand, actual, answer\]/],
    ['an operator answer that is not a boolean', { ...executeRecord(), operatorAnswers: [['op', 1, 2, 'yes']] }, /not a boolean/],
    ['an operator answer without a name', { ...executeRecord(), operatorAnswers: [['', 1, 2, true]] }, /operator name/],
    ['more than 64 operator answers', executeRecord({ operatorAnswers: Array.from({ length: 65 }, (): [string, unknown, unknown, boolean] => ['op', 1, 2, true]) }), /more than 64/],
    ['operator answers over 64 KiB', executeRecord({ operatorAnswers: [['op', 'x'.repeat(MAX_RECORD_PART_BYTES), null, true]] }), /operatorAnswers is \d+ bytes/],
  ];
  it.each(cases)('refuses %s', (_label, value, problem) => {
    expect(parseDecisionRecord(value)).toBeNull();
    expect(decisionRecordProblem(value)).toMatch(problem);
  });

  it('stops walking a huge input early instead of serialising it', () => {
    const wide = { items: new Array<number>(1_000_000).fill(0) };
    expect(decisionRecordProblem(executeRecord({ input: wide }))).toMatch(/input holds more than 65536 values/);
  });
});

describe('canonicalJson', () => {
  it('is the same for equal values whatever their members order, and different for different values', () => {
    expect(canonicalJson({ b: [1, { d: 2, c: null }], a: 'x' })).toBe(canonicalJson({ a: 'x', b: [1, { c: null, d: 2 }] }));
    expect(canonicalJson({ a: 1 })).not.toBe(canonicalJson({ a: '1' }));
    expect(canonicalJson(500)).toBe(canonicalJson(500.0));
  });

  it('refuses (null) a value too deep to compare or not JSON at all, rather than cutting it', () => {
    expect(canonicalJson(nested(64))).not.toBeNull();
    expect(canonicalJson(nested(65))).toBeNull();
    expect(canonicalJson(1n)).toBeNull();
    expect(canonicalJson(undefined)).toBeNull();
  });
});

describe('operatorFromAnswers answers only the recorded calls', () => {
  const operator = operatorFromAnswers([
    ['starts_with', '/tmp', '/tmp/a', true],
    ['within', { zones: ['a', 'b'], strict: true }, { zone: 'c', n: 1 }, false],
  ]);

  it('answers a recorded call, matching operand and actual as JSON whatever their members order', () => {
    expect(operator('starts_with', '/tmp', '/tmp/a')).toBe(true);
    expect(operator('within', { strict: true, zones: ['a', 'b'] }, { n: 1.0, zone: 'c' })).toBe(false);
  });

  it('throws UnrecordedOperatorCall for a call that differs in name, operand or actual', () => {
    expect(() => operator('ends_with', '/tmp', '/tmp/a')).toThrow(UnrecordedOperatorCall);
    expect(() => operator('starts_with', '/var', '/tmp/a')).toThrow(UnrecordedOperatorCall);
    expect(() => operator('starts_with', '/tmp', '/tmp/b')).toThrow(/did not call operator starts_with/);
    expect(() => operator('within', { zones: ['b', 'a'], strict: true }, { zone: 'c', n: 1 })).toThrow(UnrecordedOperatorCall);
  });

  it('throws for every call when nothing was recorded, and for a value too deep to compare', () => {
    expect(() => operatorFromAnswers([])('starts_with', '/tmp', '/tmp/a')).toThrow(/recorded no operator answers/);
    const deep = operatorFromAnswers([['op', nested(70), 1, true]]);
    expect(() => deep('op', nested(70), 1)).toThrow(UnrecordedOperatorCall);
  });

  it('trusts neither answer when one call was recorded both ways (two values redacted alike)', () => {
    const both = operatorFromAnswers([['op', 1, '[redacted]', true], ['op', 1, '[redacted]', false], ['op', 2, 'x', true], ['op', 2, 'x', true]]);
    expect(() => both('op', 1, '[redacted]')).toThrow(/both ways/);
    expect(both('op', 2, 'x')).toBe(true);
  });

  it('names its error class, so a log line says which failure it was', () => {
    try {
      operator('nope', 1, 2);
      expect.unreachable('the call was not recorded');
    } catch (error) {
      expect((error as Error).name).toBe('UnrecordedOperatorCall');
    }
  });
});
