// Ed25519 public key validation (SECURITY.md): every small-order and non-canonical encoding is
// refused with its reason, honest keys are accepted. The refused encodings are checked against a
// second, deliberately different computation written here (affine, y-only), so a bug in the module's
// extended-coordinate arithmetic cannot make the test agree with it by construction.
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ed25519PublicKeyProblem } from '../../src/auth/ed25519-point.ts';
import { D, inv, mod, P, pow } from '../support/ed25519-field.ts';

/** The independent check: works on y alone, with affine formulas and Euler's criterion. */
const reference = {
  /** x^2 from the curve equation -x^2 + y^2 = 1 + d x^2 y^2 (never needs a square root). */
  x2(y: bigint) {
    return mod((y * y - 1n) * inv(D * y * y + 1n));
  },
  onCurve(y: bigint) {
    const x2 = reference.x2(y);
    return x2 === 0n || pow(x2, (P - 1n) / 2n) === 1n;
  },
  /** y(2Q) = (y^2 + x^2) / (2 - y^2 + x^2), the affine doubling for a = -1; x enters only as x^2. */
  doubledY(y: bigint) {
    const x2 = reference.x2(y);
    return mod((y * y + x2) * inv(2n - y * y + x2));
  },
  /** The order of the point if it divides 8 (the identity is the only point with y = 1), else null. */
  smallOrder(y: bigint): number | null {
    let current = y;
    for (const order of [1, 2, 4, 8]) {
      if (current === 1n) return order;
      current = reference.doubledY(current);
    }
    return null;
  },
};

function decode(hex: string) {
  const bytes = Buffer.from(hex, 'hex');
  let value = 0n;
  for (let i = 31; i >= 0; i--) value = (value << 8n) | BigInt(bytes[i]!);
  return { y: value & ((1n << 255n) - 1n), sign: value >> 255n };
}

function encode(y: bigint, sign = 0n): string {
  const bytes = Buffer.alloc(32);
  let value = y | (sign << 255n);
  for (let i = 0; i < 32; i++, value >>= 8n) bytes[i] = Number(value & 0xffn);
  return bytes.toString('hex');
}

const problem = (hex: string) => ed25519PublicKeyProblem(Buffer.from(hex, 'hex'));

const REASON = {
  smallOrder: /^small order/,
  encoding: /^non-canonical encoding/,
  sign: /^non-canonical sign/,
  curve: /^not a point on the curve/,
  length: /^wrong length/,
};

// The canonical encodings of the eight points of the torsion subgroup, as listed in libsodium's
// ge25519_has_small_order blocklist (src/libsodium/crypto_core/ed25519/ref10/ed25519_ref10.c) and in
// Table 5 of Chalkias, Garillot and Nikolaenko, "Taming the many EdDSAs" (2020). libsodium lists
// each y once and ignores the sign bit, so y = 0 and the two order-8 y values appear with both signs.
const TORSION = [
  { hex: '0100000000000000000000000000000000000000000000000000000000000000', order: 1, name: 'the identity (0, 1)' },
  { hex: 'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', order: 2, name: '(0, -1), y = p - 1' },
  { hex: '0000000000000000000000000000000000000000000000000000000000000000', order: 4, name: '(sqrt(-1), 0), even x' },
  { hex: '0000000000000000000000000000000000000000000000000000000000000080', order: 4, name: '(-sqrt(-1), 0), odd x' },
  { hex: '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', order: 8, name: 'order 8, even x' },
  { hex: '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85', order: 8, name: 'order 8, odd x' },
  { hex: 'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', order: 8, name: 'order 8 (-y), even x' },
  { hex: 'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa', order: 8, name: 'order 8 (-y), odd x' },
];

// The six non-canonical encodings of small-order points from the same two sources: y = p and
// y = p + 1 (libsodium's last two blocklist rows, which name y = 0 and y = 1 again) with either
// sign, and the identity and its negative with the sign bit set although x = 0.
const NON_CANONICAL_SMALL_ORDER = [
  { hex: 'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', reason: REASON.encoding, name: 'y = p (= 0)' },
  { hex: 'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', reason: REASON.encoding, name: 'y = p (= 0), sign bit set' },
  { hex: 'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', reason: REASON.encoding, name: 'y = p + 1 (= 1, the identity)' },
  { hex: 'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', reason: REASON.encoding, name: 'y = p + 1 (= 1), sign bit set' },
  { hex: '0100000000000000000000000000000000000000000000000000000000000080', reason: REASON.sign, name: 'the identity with the sign bit set' },
  { hex: 'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', reason: REASON.sign, name: 'minus the identity (0, -1) with the sign bit set' },
];

// RFC 8032 §7.1 TEST 1-3: secret keys and the public keys the RFC derives from them.
const RFC8032 = [
  { secret: '9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60', public: 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a' },
  { secret: '4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb', public: '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c' },
  { secret: 'c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7', public: 'fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025' },
];

const rawPublicKey = (key: ReturnType<typeof createPublicKey>) => Buffer.from(key.export({ format: 'jwk' }).x!, 'base64url');

describe('honest Ed25519 public keys are accepted', () => {
  it('the public keys of RFC 8032 §7.1 tests 1-3 (node:crypto derives the same ones)', () => {
    for (const vector of RFC8032) {
      const d = Buffer.from(vector.secret, 'hex').toString('base64url');
      const x = Buffer.from(vector.public, 'hex').toString('base64url');
      const derived = rawPublicKey(createPublicKey(createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', d, x }, format: 'jwk' })));
      expect(derived.toString('hex')).toBe(vector.public);
      expect(problem(vector.public), vector.public).toBeNull();
      expect(reference.smallOrder(decode(vector.public).y), 'the reference check is not vacuous').toBeNull();
    }
  });

  it('freshly generated keys', () => {
    for (let i = 0; i < 50; i++) {
      const bytes = rawPublicKey(generateKeyPairSync('ed25519').publicKey);
      expect(ed25519PublicKeyProblem(bytes), bytes.toString('hex')).toBeNull();
    }
  });
});

describe('small-order keys are refused (signatures under them prove nothing)', () => {
  it('the listed torsion points really are the eight points of order dividing 8 (reference check)', () => {
    const orders = TORSION.map(({ hex }) => {
      const { y } = decode(hex);
      expect(y < P && reference.onCurve(y), hex).toBe(true);
      return reference.smallOrder(y);
    });
    expect(orders).toEqual(TORSION.map((t) => t.order));
    expect(new Set(TORSION.map((t) => t.hex)).size).toBe(8);
    // A cyclic group of order 8 has one element of order 1, one of order 2, two of order 4 and four
    // of order 8: the list is the whole torsion subgroup, not a sample of it.
  });

  it.each(TORSION)('$name is refused as small order', ({ hex }) => {
    expect(problem(hex)).toMatch(REASON.smallOrder);
  });

  it.each(NON_CANONICAL_SMALL_ORDER)('$name is refused as non-canonical', ({ hex, reason }) => {
    const { y, sign } = decode(hex);
    expect(reference.smallOrder(mod(y)), 'the point it names is small order').not.toBeNull();
    expect(y >= P || (sign === 1n && reference.x2(y) === 0n), 'the encoding is not canonical').toBe(true);
    expect(problem(hex)).toMatch(reason);
  });

  it('all-zero bytes are y = 0, the order-4 point (sqrt(-1), 0), refused as small order', () => {
    const zero = '00'.repeat(32);
    expect(reference.x2(0n)).toBe(P - 1n); // x^2 = -1
    expect(reference.smallOrder(0n)).toBe(4);
    expect(problem(zero)).toMatch(REASON.smallOrder);
  });
});

describe('non-canonical and malformed encodings are refused', () => {
  it('y = p + 1, an unreduced encoding of the identity', () => {
    expect(problem(encode(P + 1n))).toMatch(REASON.encoding);
  });

  it('y = 2^255 - 1, the largest value the 255 bits can hold', () => {
    expect(problem(encode(2n ** 255n - 1n))).toMatch(REASON.encoding);
    expect(problem(encode(2n ** 255n - 1n, 1n))).toMatch(REASON.encoding);
  });

  it('y = p + 3, an unreduced encoding of an otherwise acceptable point (y = 3)', () => {
    expect(reference.onCurve(3n) && reference.smallOrder(3n) === null).toBe(true);
    expect(problem(encode(3n))).toBeNull();
    expect(problem(encode(P + 3n))).toMatch(REASON.encoding);
  });

  it('y = 2 is not on the curve', () => {
    expect(reference.onCurve(2n)).toBe(false);
    expect(problem(encode(2n))).toMatch(REASON.curve);
    expect(problem(encode(2n, 1n))).toMatch(REASON.curve);
  });

  it('31 and 33 bytes (and none) are the wrong length', () => {
    for (const length of [0, 31, 33]) expect(ed25519PublicKeyProblem(new Uint8Array(length)), String(length)).toMatch(REASON.length);
  });

  it('agrees with the reference check on 256 arbitrary 32-byte strings', () => {
    for (let i = 0; i < 256; i++) {
      const hex = createHash('sha256').update(`ed25519-point-${i}`).digest('hex');
      const { y, sign } = decode(hex);
      let expected: RegExp | null = null;
      if (y >= P) expected = REASON.encoding;
      else if (!reference.onCurve(y)) expected = REASON.curve;
      else if (sign === 1n && reference.x2(y) === 0n) expected = REASON.sign;
      else if (reference.smallOrder(y) !== null) expected = REASON.smallOrder;
      if (expected) expect(problem(hex), hex).toMatch(expected);
      else expect(problem(hex), hex).toBeNull();
    }
  });
});
