import { describe, expect, it } from 'vitest';
import { checkAudience, checkTimeAndJti, decodeJwt } from '../../src/auth/jwt.ts';
import { ApiError } from '../../src/errors.ts';

const rules = { nowSeconds: 1_000_000, maxLifetimeSeconds: 60, skewSeconds: 30 };
const claims = (over: Record<string, unknown>) => ({ iat: 1_000_000, exp: 1_000_060, jti: 'j', ...over });
const outcome = (fn: () => unknown) => {
  try {
    fn();
    return 'ok';
  } catch (err) {
    return `${(err as ApiError).code}: ${(err as ApiError).message}`;
  }
};

describe('JWT time rules (DESIGN §4)', () => {
  it('accepts a fresh token and tolerates 30 s of skew on exp', () => {
    expect(outcome(() => checkTimeAndJti(claims({}), rules))).toBe('ok');
    expect(outcome(() => checkTimeAndJti(claims({ iat: 999_950, exp: 999_990 }), rules))).toBe('ok');
  });

  it('refuses expired tokens, future iat beyond skew, long lifetimes and missing claims', () => {
    expect(outcome(() => checkTimeAndJti(claims({ iat: 999_880, exp: 999_940 }), rules))).toMatch(/^invalid_jwt: .*expired/);
    expect(outcome(() => checkTimeAndJti(claims({ iat: 1_000_031, exp: 1_000_061 }), rules))).toMatch(/future/);
    expect(outcome(() => checkTimeAndJti(claims({ exp: 1_000_061 }), rules))).toMatch(/lifetime/);
    expect(outcome(() => checkTimeAndJti(claims({ exp: undefined }), rules))).toMatch(/exp/);
    expect(outcome(() => checkTimeAndJti(claims({ jti: undefined }), rules))).toMatch(/jti/);
  });

  it('accepts an audience only when it names this server', () => {
    expect(outcome(() => checkAudience({ aud: 'http://x/' }, ['http://x']))).toBe('ok');
    expect(outcome(() => checkAudience({ aud: ['other', 'http://x'] }, ['http://x']))).toBe('ok');
    expect(outcome(() => checkAudience({ aud: 'http://evil' }, ['http://x']))).toMatch(/^invalid_jwt/);
    expect(outcome(() => checkAudience({}, ['http://x']))).toMatch(/^invalid_jwt/);
  });

  it('checks typ before anything else and refuses non-JWT bearers', () => {
    const token = (header: object) => `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from('{}').toString('base64url')}.sig`;
    expect(outcome(() => decodeJwt(token({ alg: 'EdDSA', typ: 'JWT' }), 'agent+jwt'))).toMatch(/typ/);
    expect(outcome(() => decodeJwt(token({ alg: 'EdDSA', typ: 'agent+jwt' }), 'agent+jwt'))).toBe('ok');
    expect(outcome(() => decodeJwt('not-a-jwt', 'agent+jwt'))).toMatch(/^invalid_jwt/);
  });
});
