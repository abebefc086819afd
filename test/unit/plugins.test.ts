// The shipped operator plugins: operand schemas checked at grant time, evaluation per call.
import { describe, expect, it } from 'vitest';
import * as cidr from '../../plugins/cidr.ts';
import * as maxLength from '../../plugins/max_length.ts';
import * as regex from '../../plugins/regex.ts';
import * as prefix from '../../plugins/prefix.ts';

describe('max_length', () => {
  it('counts code points and refuses non-strings', () => {
    expect(maxLength.evaluate(3, 'abc')).toBe(true);
    expect(maxLength.evaluate(3, 'abcd')).toBe(false);
    expect(maxLength.evaluate(2, '😀😀')).toBe(true);
    expect(maxLength.evaluate(3, 123)).toBe(false);
    expect(maxLength.evaluate(3, null)).toBe(false);
    expect(maxLength.operand.safeParse(-1).success).toBe(false);
    expect(maxLength.operand.safeParse(1.5).success).toBe(false);
  });
});

describe('prefix', () => {
  it('admits strings starting with a listed prefix', () => {
    expect(prefix.evaluate(['/reports/', '/exports/'], '/exports/q3.csv')).toBe(true);
    expect(prefix.evaluate(['/reports/'], '/etc/passwd')).toBe(false);
    expect(prefix.evaluate(['/reports/'], null)).toBe(false);
    expect(prefix.operand.safeParse([]).success).toBe(false);
    expect(prefix.operand.safeParse(['']).success).toBe(false);
  });
});

describe('cidr', () => {
  it('admits addresses inside a listed network, IPv4 and IPv6', () => {
    expect(cidr.evaluate(['10.0.0.0/8'], '10.1.2.3')).toBe(true);
    expect(cidr.evaluate(['10.0.0.0/8'], '11.0.0.1')).toBe(false);
    expect(cidr.evaluate(['2001:db8::/32'], '2001:db8::1')).toBe(true);
    expect(cidr.evaluate(['2001:db8::/32'], '10.0.0.1')).toBe(false);
    expect(cidr.evaluate(['10.0.0.0/8'], 'not an ip')).toBe(false);
    expect(cidr.evaluate(['10.0.0.0/8'], null)).toBe(false);
  });

  it('refuses operands that are not CIDR networks at grant time', () => {
    expect(cidr.operand.safeParse(['10.0.0.0/8', '192.168.0.0/16']).success).toBe(true);
    for (const bad of [['10.0.0.0'], ['10.0.0.0/33'], ['nonsense/8'], ['10.0.0.0/8/1'], []]) {
      expect(cidr.operand.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });
});

describe('regex', () => {
  it('matches RE2 patterns', () => {
    expect(regex.evaluate('^[A-Z]{3}$', 'USD')).toBe(true);
    expect(regex.evaluate('^[A-Z]{3}$', 'usd')).toBe(false);
    expect(regex.evaluate('^[a-z]+@example\\.com$', 'ann@example.com')).toBe(true);
    expect(regex.evaluate('^(ab)+$', 'ababab')).toBe(true);
    expect(regex.evaluate('^\\p{L}+$', 'héllo')).toBe(true);
    expect(regex.evaluate('^a', 42)).toBe(false);
    expect(regex.evaluate('^a', null)).toBe(false);
  });

  // No timing here (speed belongs in benchmarks): a backtracking engine would not finish these
  // within the test's timeout at all, RE2 answers them at once.
  it('patterns that make backtracking engines explode are matched in linear time (ReDoS)', () => {
    // The audit's pattern with smaller counts (the audit's own is now refused for its size, below).
    const nested = '^a{0,20}a{0,20}a{0,20}a{0,20}a{0,20}b$';
    expect(regex.operand.safeParse(nested).success).toBe(true);
    expect(regex.evaluate(nested, 'a'.repeat(256))).toBe(false);
    expect(regex.evaluate(nested, `${'a'.repeat(90)}b`)).toBe(true);
    for (const classic of ['^(a+)+b$', '^(a|a)*c$', '^(\\w+)*x$', '^(a*)*b$', 'a*a*a*a*a*b']) {
      expect(regex.operand.safeParse(classic).success, classic).toBe(true);
      expect(regex.evaluate(classic, 'a'.repeat(1024)), classic).toBe(false);
    }
  });

  it('refuses patterns RE2 cannot run (backreferences, lookaround) and over-long ones at grant time', () => {
    for (const unusable of ['(a)\\1', '(?=a)a', '(?<!a)b', '[', 'x'.repeat(257)]) {
      expect(regex.operand.safeParse(unusable).success, unusable).toBe(false);
      expect(regex.evaluate(unusable, 'aaaa')).toBe(false);
    }
  });

  it("refuses at grant time patterns whose compiled program is too large to match within the budget (the finding's pattern starved other agents)", () => {
    for (const costly of ['(?:\\pL\\pN\\s){200}', '^a{0,99}a{0,99}a{0,99}a{0,99}a{0,99}b$', '(?:(?:[a-c]\\d){25}){15}']) {
      const parsed = regex.operand.safeParse(costly);
      expect(parsed.success, costly).toBe(false);
      expect(parsed.error?.issues[0]?.message, costly).toMatch(/^unusable pattern: too costly to match: it compiles to \d+ RE2 instructions, more than 500/);
      expect(regex.evaluate(costly, 'a'), costly).toBe(false);
    }
  });

  it("refuses patterns whose counted repetitions alone add up past the bound without compiling them (the finding's pattern; compiling runs on the event loop)", () => {
    for (const costly of ['(?i)(?:[a-z]|[0-9]|_){100,1000}@', '[a-z]{1000}', '\\pL{600}', '(?i)[\\pL\\pN_]{1000}'.repeat(12)]) {
      const parsed = regex.operand.safeParse(costly);
      expect(parsed.success, costly).toBe(false);
      expect(parsed.error?.issues[0]?.message, costly).toMatch(/^unusable pattern: too costly to match: its counted repetitions add up to \d+/);
      expect(regex.evaluate(costly, 'a'), costly).toBe(false);
    }
    // An escaped brace is text, not a repetition.
    expect(regex.operand.safeParse('^\\{1000\\}$').success).toBe(true);
  });

  it('accepts ordinary patterns under the size bound', () => {
    // A 200-character allow-list of distinct words compiles to about 200 instructions.
    const words = 'alpha|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliet|kilo|lima|mike|november|oscar|papa|quebec|romeo|sierra|tango|uniform|victor|whiskey|xray|yankee|zulu|apple|banana|cherry|damson|blueberry';
    expect(words).toHaveLength(200);
    for (const ordinary of ['^[A-Z]{3}$', '^[a-z0-9._%+-]+@example\\.com$', `^(?:${words})$`, '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$', '[a-z]{498}']) {
      expect(regex.operand.safeParse(ordinary).success, ordinary).toBe(true);
    }
    expect(regex.evaluate('^[a-z0-9._%+-]+@example\\.com$', 'ann@example.com')).toBe(true);
  });

  it('refuses over-long arguments rather than scanning them', () => {
    expect(regex.evaluate('^a+$', 'a'.repeat(1024))).toBe(true);
    expect(regex.evaluate('^a+$', 'a'.repeat(1025))).toBe(false);
  });
});
