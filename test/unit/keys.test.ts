import { describe, expect, it } from 'vitest';
import { jwkThumbprint, parsePublicJwk } from '../../src/auth/keys.ts';
import { ApiError } from '../../src/errors.ts';

const ED25519 = { kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' };

describe('RFC 7638 thumbprints', () => {
  it('matches the RFC 8037 appendix A.3 vector for an Ed25519 key', () => {
    expect(jwkThumbprint(ED25519)).toBe('kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k');
  });

  it('ignores kid and other members, so a kid-less JWK names the same host', () => {
    const { jwk } = parsePublicJwk({ ...ED25519, kid: 'anything', use: 'sig' }, ['Ed25519'], 'k');
    expect(jwkThumbprint(jwk)).toBe(jwkThumbprint(ED25519));
  });
});

describe('parsePublicJwk', () => {
  const refusal = (value: unknown, supported = ['Ed25519']) => {
    try {
      parsePublicJwk(value, supported, 'agent_public_key');
      return 'accepted';
    } catch (err) {
      return (err as ApiError).code;
    }
  };

  it('refuses key types outside the supported set with unsupported_algorithm', () => {
    expect(refusal({ kty: 'EC', crv: 'P-256', x: 'a', y: 'b' })).toBe('unsupported_algorithm');
    expect(refusal({ kty: 'RSA', n: 'abc', e: 'AQAB' })).toBe('unsupported_algorithm');
    expect(refusal({ kty: 'oct', k: 'c2VjcmV0' })).toBe('unsupported_algorithm');
  });

  it('refuses malformed and private keys with invalid_request', () => {
    expect(refusal('not a key')).toBe('invalid_request');
    expect(refusal({ kty: 'OKP', crv: 'Ed25519', x: 'tooshort' })).toBe('invalid_request');
    expect(refusal({ ...ED25519, d: 'private' })).toBe('invalid_request');
  });

  it('keeps only the public members of an accepted key', () => {
    expect(parsePublicJwk({ ...ED25519, kid: 'k1', alg: 'EdDSA' }, ['Ed25519'], 'k').jwk).toEqual(ED25519);
  });
});
