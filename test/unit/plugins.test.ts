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
    const audit = '^a{0,99}a{0,99}a{0,99}a{0,99}a{0,99}b$';
    expect(regex.operand.safeParse(audit).success).toBe(true);
    expect(regex.evaluate(audit, 'a'.repeat(256))).toBe(false);
    expect(regex.evaluate(audit, `${'a'.repeat(200)}b`)).toBe(true);
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

  it('refuses over-long arguments rather than scanning them', () => {
    expect(regex.evaluate('^a+$', 'a'.repeat(1024))).toBe(true);
    expect(regex.evaluate('^a+$', 'a'.repeat(1025))).toBe(false);
  });
});
