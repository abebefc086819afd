// The pure rules of the JWKS fetcher (src/auth/jwks-fetch.ts): which addresses are never fetched
// from, and which documents count as a JWK Set of public signature keys. The network side is
// tested against local servers in test/integration/jwks-fetch.test.ts.
import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isAllowedAddress, isForbiddenAddress, JwksFetchError, parseCidr, validateJwkSet, type Cidr } from '../../src/auth/jwks-fetch.ts';

describe('isForbiddenAddress', () => {
  // [address, forbidden?, why]. Each row names the attack or the edge it pins down.
  const table: Array<[string, boolean, string]> = [
    // IPv4, forbidden.
    ['0.0.0.0', true, '"this host": connecting to it reaches the local machine'],
    ['0.1.2.3', true, '0.0.0.0/8'],
    ['127.0.0.1', true, 'loopback: the server itself'],
    ['127.255.255.254', true, 'the rest of 127/8 is loopback too'],
    ['10.0.0.1', true, 'RFC 1918 private'],
    ['10.255.255.255', true, 'RFC 1918 private, last address'],
    ['172.16.0.1', true, 'RFC 1918 private, first of 172.16/12'],
    ['172.31.255.255', true, 'RFC 1918 private, last of 172.16/12'],
    ['192.168.1.1', true, 'RFC 1918 private'],
    ['100.64.0.1', true, 'CGNAT shared address space'],
    ['100.127.255.255', true, 'CGNAT shared address space, last address'],
    ['169.254.169.254', true, 'cloud metadata service (link-local)'],
    ['169.254.0.1', true, 'link-local'],
    ['192.0.0.8', true, 'IETF protocol assignments'],
    ['192.0.2.1', true, 'TEST-NET-1 documentation'],
    ['198.18.0.1', true, 'benchmarking'],
    ['198.19.255.255', true, 'benchmarking, last of 198.18/15'],
    ['198.51.100.7', true, 'TEST-NET-2 documentation'],
    ['203.0.113.9', true, 'TEST-NET-3 documentation'],
    ['224.0.0.1', true, 'multicast'],
    ['239.255.255.250', true, 'multicast (SSDP)'],
    ['240.0.0.1', true, 'reserved'],
    ['255.255.255.255', true, 'limited broadcast'],
    // IPv4, allowed: public addresses, and the neighbours just outside each forbidden range.
    ['8.8.8.8', false, 'public'],
    ['1.1.1.1', false, 'public'],
    ['93.184.216.34', false, 'public'],
    ['11.0.0.1', false, 'just after 10/8'],
    ['126.255.255.255', false, 'just before 127/8'],
    ['172.15.255.255', false, 'just before 172.16/12'],
    ['172.32.0.1', false, 'just after 172.16/12'],
    ['100.63.255.255', false, 'just before 100.64/10'],
    ['100.128.0.1', false, 'just after 100.64/10'],
    ['169.253.255.255', false, 'just before 169.254/16'],
    ['192.0.1.1', false, 'between 192.0.0/24 and 192.0.2/24'],
    ['192.169.0.1', false, 'just after 192.168/16'],
    ['198.17.255.255', false, 'just before 198.18/15'],
    ['198.20.0.1', false, 'just after 198.18/15'],
    ['223.255.255.255', false, 'just before multicast'],
    // IPv6, forbidden.
    ['::', true, 'unspecified'],
    ['::1', true, 'loopback'],
    ['0:0:0:0:0:0:0:1', true, 'loopback, written in full'],
    ['fe80::1', true, 'link-local'],
    ['fe80::1%eth0', true, 'link-local with a zone'],
    ['febf::1', true, 'link-local, last of fe80::/10'],
    ['fec0::1', true, 'deprecated site-local'],
    ['fc00::1', true, 'unique local'],
    ['fd00:ec2::254', true, 'cloud metadata service (unique local)'],
    ['fdff:ffff::1', true, 'unique local'],
    ['ff02::1', true, 'multicast'],
    ['ff00::', true, 'multicast'],
    ['::ffff:127.0.0.1', true, 'IPv4-mapped loopback'],
    ['::ffff:7f00:1', true, 'IPv4-mapped loopback, hex spelling (what WHATWG URL gives)'],
    ['::ffff:169.254.169.254', true, 'IPv4-mapped metadata service'],
    ['::ffff:10.0.0.1', true, 'IPv4-mapped private'],
    ['::ffff:0:7f00:1', true, 'IPv4-translated (::ffff:0:0:0/96), outside global unicast'],
    ['::127.0.0.1', true, 'IPv4-compatible loopback'],
    ['::8.8.8.8', true, 'IPv4-compatible (deprecated) even for a public address'],
    ['64:ff9b::7f00:1', true, 'NAT64 of loopback'],
    ['64:ff9b::169.254.169.254', true, 'NAT64 of the metadata service'],
    ['64:ff9b::a00:1', true, 'NAT64 of a private address'],
    ['64:ff9b:1::808:808', true, 'local-use NAT64 prefix'],
    ['2001:db8::1', true, 'documentation'],
    ['2001:0db8:85a3::8a2e:370:7334', true, 'documentation, written with leading zeros'],
    ['3fff::1', true, 'documentation (RFC 9637)'],
    ['2002:7f00:1::1', true, '6to4 of loopback'],
    ['2002:a9fe:a9fe::1', true, '6to4 of the metadata service'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', true, 'Teredo tunnel'],
    // IPv6, allowed.
    ['2606:4700:4700::1111', false, 'public'],
    ['2001:4860:4860::8888', false, 'public'],
    ['2a00:1450:4001:81c::200e', false, 'public'],
    ['2620:fe::fe', false, 'public'],
    ['2001:db9::1', false, 'just after the documentation prefix'],
    ['::ffff:8.8.8.8', false, 'IPv4-mapped public'],
    ['::ffff:808:808', false, 'IPv4-mapped public, hex spelling'],
    ['64:ff9b::808:808', false, 'NAT64 of a public address'],
    ['2002:808:808::1', false, '6to4 of a public address'],
    // Not an address in a form we read: refused rather than guessed at.
    ['', true, 'empty'],
    ['localhost', true, 'a name, not an address'],
    ['0177.0.0.1', true, 'octal spelling of 127.0.0.1'],
    ['2130706433', true, 'decimal spelling of 127.0.0.1'],
    ['0x7f.0.0.1', true, 'hex spelling of 127.0.0.1'],
    ['127.1', true, 'short spelling of 127.0.0.1'],
    ['8.8.8.08', true, 'a leading zero makes the octet octal to some parsers'],
    ['[::1]', true, 'a bracketed URL host, not an address'],
    ['8.8.8.8/32', true, 'a network, not an address'],
    [' 8.8.8.8', true, 'surrounding space'],
  ];

  it('holds at least 40 addresses of both families', () => {
    expect(table.length).toBeGreaterThanOrEqual(40);
    expect(table.some(([a]) => a.includes(':'))).toBe(true);
  });

  it.each(table)('%s → forbidden: %s (%s)', (address, forbidden) => {
    expect(isForbiddenAddress(address)).toBe(forbidden);
  });
});

describe('an operator\'s allowed private ranges', () => {
  const ranges = (...texts: string[]): Cidr[] => texts.map((t) => parseCidr(t)!);

  it('lets exactly the allowed range through, and nothing next to it', () => {
    const allowed = ranges('127.0.0.1/32', '10.1.0.0/16', 'fd00:1::/32');
    expect(isAllowedAddress('127.0.0.1', allowed)).toBe(true);
    expect(isAllowedAddress('127.0.0.2', allowed)).toBe(false);
    expect(isAllowedAddress('10.1.200.3', allowed)).toBe(true);
    expect(isAllowedAddress('10.2.0.1', allowed)).toBe(false);
    expect(isAllowedAddress('fd00:1:2::3', allowed)).toBe(true);
    expect(isAllowedAddress('fd00:2::3', allowed)).toBe(false);
    expect(isAllowedAddress('169.254.169.254', allowed)).toBe(false);
  });

  it('treats an IPv4-mapped address as the IPv4 address it reaches', () => {
    expect(isAllowedAddress('::ffff:127.0.0.1', ranges('127.0.0.1/32'))).toBe(true);
    expect(isAllowedAddress('::ffff:127.0.0.2', ranges('127.0.0.1/32'))).toBe(false);
  });

  it('always allows public addresses and never anything that is not an address', () => {
    expect(isAllowedAddress('8.8.8.8', [])).toBe(true);
    expect(isAllowedAddress('2606:4700:4700::1111', [])).toBe(true);
    expect(isAllowedAddress('localhost', ranges('0.0.0.0/0', '::/0'))).toBe(false);
  });

  it('parses addresses and networks, and refuses malformed ones', () => {
    expect(parseCidr('10.0.0.0/8')).toMatchObject({ family: 4, prefix: 8 });
    expect(parseCidr('127.0.0.1')).toMatchObject({ family: 4, prefix: 32 });
    expect(parseCidr('fd00::/8')).toMatchObject({ family: 6, prefix: 8 });
    for (const bad of ['10.0.0.0/33', '::/129', 'abc', '10.0.0.0/8/8', '10.0.0.0/-1', '10.0.0.0/', '0177.0.0.1/32', 'fe80::1%eth0/64', '']) {
      expect(parseCidr(bad), bad).toBeNull();
    }
  });
});

describe('validateJwkSet', () => {
  const jwkOf = (type: 'ed25519' | 'ec' | 'rsa', option?: string | number): Record<string, unknown> => {
    const pair =
      type === 'ed25519'
        ? generateKeyPairSync('ed25519')
        : type === 'ec'
          ? generateKeyPairSync('ec', { namedCurve: String(option) })
          : generateKeyPairSync('rsa', { modulusLength: Number(option) });
    return { ...pair.publicKey.export({ format: 'jwk' }) };
  };
  const privateJwkOf = (type: 'ed25519' | 'rsa'): Record<string, unknown> => {
    const pair = type === 'ed25519' ? generateKeyPairSync('ed25519') : generateKeyPairSync('rsa', { modulusLength: 2048 });
    return { ...pair.privateKey.export({ format: 'jwk' }) };
  };
  const ed = jwkOf('ed25519');
  const p256 = jwkOf('ec', 'P-256');
  const p384 = jwkOf('ec', 'P-384');
  const p521 = jwkOf('ec', 'P-521');
  const rsa2048 = jwkOf('rsa', 2048);

  /** The reason validateJwkSet refuses with, with its message, or 'accepted'. */
  const refusal = (json: unknown): string => {
    try {
      validateJwkSet(json);
      return 'accepted';
    } catch (error) {
      expect(error).toBeInstanceOf(JwksFetchError);
      return `${(error as JwksFetchError).reason}: ${(error as Error).message}`;
    }
  };
  const one = (key: Record<string, unknown>) => ({ keys: [{ kid: 'k1', ...key }] });
  const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  /** The same bytes with the lowest spare bit of the last character flipped. */
  const respell = (text: string): string => text.slice(0, -1) + ALPHABET[ALPHABET.indexOf(text.at(-1)!) ^ 1]!;

  it('accepts Ed25519, EC P-256/P-384/P-521 and RSA-2048 keys, returning each kid with only its public members', () => {
    const set = validateJwkSet({
      keys: [
        { ...ed, kid: 'ed', use: 'sig', alg: 'EdDSA', x5c: ['ignored'], custom: { nested: true } },
        { ...p256, kid: 'p256' },
        { ...p384, kid: 'p384' },
        { ...p521, kid: 'p521' },
        { ...rsa2048, kid: 'rsa' },
      ],
      unknown_member: 'ignored',
    });
    expect(set.keys.map((k) => k.kid)).toEqual(['ed', 'p256', 'p384', 'p521', 'rsa']);
    expect(set.keys[0]!.jwk).toEqual({ kty: 'OKP', crv: 'Ed25519', x: ed.x });
    expect(set.keys[1]!.jwk).toEqual({ kty: 'EC', crv: 'P-256', x: p256.x, y: p256.y });
    expect(set.keys[2]!.jwk).toEqual({ kty: 'EC', crv: 'P-384', x: p384.x, y: p384.y });
    expect(set.keys[3]!.jwk).toEqual({ kty: 'EC', crv: 'P-521', x: p521.x, y: p521.y });
    expect(set.keys[4]!.jwk).toEqual({ kty: 'RSA', n: rsa2048.n, e: rsa2048.e });
  });

  it('a document that is not a JWK Set (null, an array, a string, keys not an array) is refused', () => {
    for (const json of [null, [], 'keys', 42, {}, { keys: {} }, { keys: 'x' }, { keys: null }]) {
      expect(refusal(json), JSON.stringify(json)).toMatch(/^invalid_jwks: /);
    }
  });

  it('an empty key set is refused', () => {
    expect(refusal({ keys: [] })).toMatch(/^invalid_jwks: .*no keys/);
  });

  it('a set of 21 keys (made to have every verification try many keys) is refused; 20 are accepted', () => {
    const keys = (count: number) => Array.from({ length: count }, (_, i) => ({ ...ed, kid: `k${i}` }));
    expect(refusal({ keys: keys(20) })).toBe('accepted');
    expect(refusal({ keys: keys(21) })).toMatch(/^invalid_jwks: .*21 keys; at most 20/);
  });

  it('a private key published in the set (d, p, q, dp, dq, qi, oth) is refused', () => {
    expect(refusal({ keys: [{ kid: 'k1', ...privateJwkOf('ed25519') }] })).toMatch(/^invalid_jwks: keys\[0\] holds private .*"d"/);
    expect(refusal({ keys: [{ kid: 'k1', ...privateJwkOf('rsa') }] })).toMatch(/^invalid_jwks: keys\[0\] holds private/);
    for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth']) {
      expect(refusal(one({ ...rsa2048, [member]: 'AQAB' })), member).toMatch(new RegExp(`^invalid_jwks: .*"${member}"`));
    }
    // Present at all is enough: a null private member is still one the publisher meant to send.
    expect(refusal(one({ ...ed, d: null }))).toMatch(/^invalid_jwks: .*"d"/);
  });

  it('a symmetric oct key (an HMAC secret anyone holding the set could sign with) is refused', () => {
    expect(refusal(one({ kty: 'oct', k: 'c2VjcmV0LXNlY3JldC1zZWNyZXQ' }))).toMatch(/^invalid_jwks: .*"k"/);
    expect(refusal(one({ kty: 'oct' }))).toMatch(/^invalid_jwks: .*symmetric \(oct\)/);
  });

  it('two keys under one kid (letting the publisher choose which key a kid means) are refused', () => {
    expect(refusal({ keys: [{ ...ed, kid: 'same' }, { ...p256, kid: 'same' }] })).toMatch(/^invalid_jwks: keys\[1\] repeats the "kid"/);
  });

  it('a key without a usable kid (missing, empty, not a string, over 256 characters) is refused', () => {
    expect(refusal({ keys: [{ ...ed }] })).toMatch(/^invalid_jwks: .*"kid"/);
    for (const kid of ['', 7, null, ['k'], 'k'.repeat(257)]) {
      expect(refusal({ keys: [{ ...ed, kid }] }), JSON.stringify(kid)).toMatch(/^invalid_jwks: .*"kid"/);
    }
    expect(refusal({ keys: [{ ...ed, kid: 'k'.repeat(256) }] })).toBe('accepted');
  });

  it('an encryption key (use other than "sig") is refused', () => {
    expect(refusal(one({ ...p256, use: 'enc' }))).toMatch(/^invalid_jwks: .*"use"/);
    expect(refusal(one({ ...p256, use: null }))).toMatch(/^invalid_jwks: .*"use"/);
    expect(refusal(one({ ...p256, use: 'sig' }))).toBe('accepted');
  });

  it('an unsupported key type or curve (X25519, secp256k1, an unknown kty) is refused', () => {
    expect(refusal(one({ ...ed, crv: 'X25519' }))).toMatch(/^invalid_jwks: .*not Ed25519/);
    expect(refusal(one({ ...p256, crv: 'secp256k1' }))).toMatch(/^invalid_jwks: .*unsupported curve/);
    expect(refusal(one({ kty: 'PQC', x: 'AAAA' }))).toMatch(/^invalid_jwks: .*unsupported "kty"/);
    expect(refusal(one({ x: 'AAAA' }))).toMatch(/^invalid_jwks: .*well-formed/);
  });

  it('an Ed25519 key that is not 32 bytes, or is a small-order point (which any signature matches), is refused', () => {
    expect(refusal(one({ kty: 'OKP', crv: 'Ed25519', x: Buffer.alloc(31, 7).toString('base64url') }))).toMatch(/^invalid_jwks: .*Ed25519/);
    const identity = Buffer.alloc(32);
    identity[0] = 1;
    expect(refusal(one({ kty: 'OKP', crv: 'Ed25519', x: identity.toString('base64url') }))).toMatch(/^invalid_jwks: .*Ed25519/);
  });

  it('an EC key off its curve (invalid-curve attack), of the wrong length, or non-canonically spelled is refused', () => {
    expect(refusal(one({ ...p256, y: Buffer.alloc(32, 1).toString('base64url') }))).toMatch(/^invalid_jwks: .*not a point on the curve/);
    expect(refusal(one({ ...p384, y: Buffer.alloc(48, 1).toString('base64url') }))).toMatch(/^invalid_jwks: .*not a point on the curve/);
    expect(refusal(one({ ...p384, x: Buffer.alloc(32, 1).toString('base64url') }))).toMatch(/^invalid_jwks: .*48 bytes/);
    expect(refusal(one({ ...p521, y: undefined }))).toMatch(/^invalid_jwks: .*66 bytes/);
    // The same bytes spelled with different spare bits in the last character, which would give the
    // same key a second thumbprint. (P-384 and P-521 coordinates fill their last character exactly.)
    const x = String(p256.x);
    expect(Buffer.from(respell(x), 'base64url')).toEqual(Buffer.from(x, 'base64url'));
    expect(refusal(one({ ...p256, x: respell(x) }))).toMatch(/^invalid_jwks: .*canonical/);
  });

  it('a weak RSA key (under 2048 bits, factorable), an even exponent, or a padded or respelled modulus is refused', () => {
    expect(refusal(one(jwkOf('rsa', 1024)))).toMatch(/^invalid_jwks: .*1024 bits; at least 2048/);
    expect(refusal(one({ ...rsa2048, e: 'Ag' }))).toMatch(/^invalid_jwks: .*exponent/);
    expect(refusal(one({ ...rsa2048, e: 'AQ' }))).toMatch(/^invalid_jwks: .*exponent/);
    const padded = Buffer.concat([Buffer.alloc(1), Buffer.from(String(rsa2048.n), 'base64url')]).toString('base64url');
    expect(refusal(one({ ...rsa2048, n: padded }))).toMatch(/^invalid_jwks: .*zero octet/);
    expect(refusal(one({ ...rsa2048, n: undefined }))).toMatch(/^invalid_jwks: .*"n"/);
    expect(refusal(one({ ...rsa2048, n: 'not base64url!' }))).toMatch(/^invalid_jwks: .*"n"/);
    expect(Buffer.from(respell(String(rsa2048.n)), 'base64url')).toEqual(Buffer.from(String(rsa2048.n), 'base64url'));
    expect(refusal(one({ ...rsa2048, n: respell(String(rsa2048.n)) }))).toMatch(/^invalid_jwks: .*"n" must be canonical/);
  });

  it('returns keys without members a caller could mistake for trusted (alg, x5u, key_ops are dropped)', () => {
    const set = validateJwkSet({ keys: [{ ...p256, kid: 'k', alg: 'HS256', x5u: 'https://evil.test/', key_ops: ['sign'] }] });
    expect(Object.keys(set.keys[0]!.jwk).sort()).toEqual(['crv', 'kty', 'x', 'y']);
  });
});
