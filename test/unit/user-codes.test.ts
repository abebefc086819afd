// RFC 8628 user codes: derived from the approval id with the server key, never stored, compared
// case-insensitively with or without the dash.
import { describe, expect, it } from 'vitest';
import { UserCodes } from '../../src/services/approvals/user-codes.ts';

const codes = new UserCodes(Buffer.alloc(32, 7));
const CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;

describe('user codes', () => {
  it('are XXXX-XXXX in 20 consonants, the same for one approval and different across approvals', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const code = codes.codeFor(`apr_${i}`);
      expect(code).toMatch(CODE);
      seen.add(code);
    }
    expect(seen.size).toBe(2000);
    expect(codes.codeFor('apr_1')).toBe(codes.codeFor('apr_1'));
  });

  it('depend on the key: another server key gives other codes', () => {
    const other = new UserCodes(Buffer.alloc(32, 8));
    expect(other.codeFor('apr_1')).not.toBe(codes.codeFor('apr_1'));
    expect(other.lookupKey(codes.codeFor('apr_1'))).not.toBe(codes.lookupKey(codes.codeFor('apr_1')));
  });

  it('match typed case-insensitively, with or without the dash or spaces, and nothing else', () => {
    const code = codes.codeFor('apr_x');
    for (const typed of [code, code.toLowerCase(), code.replace('-', ''), ` ${code.slice(0, 4)} ${code.slice(5)} `]) {
      expect(codes.matches(typed, 'apr_x'), typed).toBe(true);
      expect(codes.lookupKey(typed)).toBe(codes.lookupKey(code));
    }
    expect(codes.matches(code, 'apr_y')).toBe(false);
    for (const junk of ['', 'AAAA-AAAA', 'BCDF-GHJ', `${code}B`, 'x'.repeat(100)]) {
      expect(codes.matches(junk, 'apr_x'), junk).toBe(false);
      expect(codes.lookupKey(junk), junk).toBeNull();
    }
  });

  it('refuse a key shorter than 32 bytes', () => {
    expect(() => new UserCodes(Buffer.alloc(16))).toThrow(/32 bytes/);
  });
});
