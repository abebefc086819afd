// Ed25519 public key point validation (SECURITY.md). A 32-byte string is not
// necessarily a usable public key: it may not decode to a curve point at all, it may be a
// non-canonical encoding of a point that has a shorter one, or it may be one of the eight points
// of small order, against which signatures prove nothing about who made them. We refuse all of
// these when a key is registered or rotated, so they never reach the store. This runs only there,
// never on the verification hot path; it is pure BigInt arithmetic with no I/O.

/** The field prime p = 2^255 - 19 (RFC 8032 §5.1). */
const P = 2n ** 255n - 19n;

/** Reduces into [0, p): BigInt `%` keeps the sign of the dividend, so negatives need lifting. */
function mod(a: bigint): bigint {
  const r = a % P;
  return r >= 0n ? r : r + P;
}

/** a^e mod p by square-and-multiply; e is always one of our own constants, never caller input. */
function pow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return result;
}

/**
 * a^(2^252 - 3) mod p, the exponent (p - 5) / 8 of the RFC 8032 square root. That exponent is 250
 * one bits followed by 01, so plain square-and-multiply would spend about 250 multiplications on
 * it; this addition chain (the one ref10 and libsodium use) needs 11, which roughly halves the
 * cost of decoding a key.
 */
function powP58(a: bigint): bigint {
  const sq = (x: bigint, times: number) => {
    let r = x;
    for (let i = 0; i < times; i++) r = (r * r) % P;
    return r;
  };
  const a2 = (a * a) % P;
  const a9 = (sq(a2, 2) * a) % P;
  const a11 = (a9 * a2) % P;
  const e5 = (((a11 * a11) % P) * a9) % P; // a^(2^5 - 1)
  const e10 = (sq(e5, 5) * e5) % P;
  const e20 = (sq(e10, 10) * e10) % P;
  const e40 = (sq(e20, 20) * e20) % P;
  const e50 = (sq(e40, 10) * e10) % P;
  const e100 = (sq(e50, 50) * e50) % P;
  const e200 = (sq(e100, 100) * e100) % P;
  const e250 = (sq(e200, 50) * e50) % P; // a^(2^250 - 1)
  return (sq(e250, 2) * a) % P; // a^(2^252 - 4 + 1) = a^(2^252 - 3)
}

/** The curve constant d = -121665 / 121666 mod p (RFC 8032 §5.1); inversion by Fermat, a^(p-2). */
const D = mod(-121665n * pow(121666n, P - 2n));

/** sqrt(-1) = 2^((p - 1) / 4) mod p, the fix-up factor of the RFC 8032 §5.1.3 square root. */
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

/** A point in extended twisted Edwards coordinates: x = X/Z, y = Y/Z, x*y = T/Z (RFC 8032 §5.1.4). */
interface ExtendedPoint {
  X: bigint;
  Y: bigint;
  Z: bigint;
  T: bigint;
}

/**
 * Doubling in extended coordinates, RFC 8032 §5.1.4 (Hisil, Wong, Carter and Dawson, 2008).
 * The formula is complete for Ed25519 (a = -1 is a square and d is not), so it is correct for
 * every point including the small-order ones we are looking for; no case needs special handling.
 */
function double({ X, Y, Z }: ExtendedPoint): ExtendedPoint {
  const A = (X * X) % P;
  const B = (Y * Y) % P;
  const C = (2n * Z * Z) % P;
  const H = A + B;
  const E = mod(H - (X + Y) * (X + Y));
  const G = mod(A - B);
  const F = C + G;
  return { X: (E * F) % P, Y: (G * H) % P, Z: (F * G) % P, T: (E * H) % P };
}

/** The identity (0, 1) compared projectively: X = 0 and Y = Z, so no inversion is needed. */
function isIdentity({ X, Y, Z }: ExtendedPoint): boolean {
  return mod(X) === 0n && mod(Y - Z) === 0n;
}

/**
 * Why these bytes are not an acceptable Ed25519 public key, or null when they are. Decoding
 * follows RFC 8032 §5.1.3 step by step; each step that can fail names its own reason.
 */
export function ed25519PublicKeyProblem(bytes: Uint8Array): string | null {
  if (bytes.length !== 32) return `wrong length: ${bytes.length} bytes, must be 32`;

  // Step 1: the encoding is y in little-endian with the sign of x in the top bit of the last byte.
  // A y of p or more would name the same point as y - p, so two strings would denote one key.
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(bytes[i]!);
  const xSign = y >> 255n;
  y &= (1n << 255n) - 1n;
  if (y >= P) return 'non-canonical encoding: the y coordinate is not below p = 2^255 - 19';

  // Steps 2 and 3: the curve equation -x^2 + y^2 = 1 + d x^2 y^2 gives x^2 = u / v with
  // u = y^2 - 1 and v = d y^2 + 1. The candidate root x = (u / v)^((p + 3) / 8) is computed as
  // u v^3 (u v^7)^((p - 5) / 8), which needs no separate inversion. Because p = 5 mod 8, the
  // candidate is either a root, or a root times sqrt(-1), or there is no root and no such point.
  const y2 = (y * y) % P;
  const u = mod(y2 - 1n);
  const v = (D * y2 + 1n) % P;
  const v3 = (((v * v) % P) * v) % P;
  const v7 = (((v3 * v3) % P) * v) % P;
  let x = (((u * v3) % P) * powP58((u * v7) % P)) % P;
  const vx2 = (((x * x) % P) * v) % P;
  if (vx2 === u) {
    // x is a square root of u / v already.
  } else if (vx2 === mod(-u)) {
    x = (x * SQRT_M1) % P;
  } else {
    return 'not a point on the curve: x^2 = (y^2 - 1) / (d y^2 + 1) has no square root mod p';
  }

  // Step 4: x = 0 has no negative, so a set sign bit would be a second encoding of the same point.
  if (x === 0n && xSign === 1n) return 'non-canonical sign: x is 0 but the sign bit is set';
  if ((x & 1n) !== xSign) x = P - x;

  // The curve group has order 8 * L for a large prime L. A point whose order divides 8 lies in the
  // small torsion subgroup; multiplying it by the cofactor 8 (three doublings) gives the identity.
  // An honest key a * B has order L, so it never becomes the identity this way. A key with a
  // torsion component added (order 2L, 4L or 8L) also survives, as it does in libsodium: its
  // signatures still need the discrete log of the large part, so it cannot be forged against.
  let point: ExtendedPoint = { X: x, Y: y, Z: 1n, T: (x * y) % P };
  for (let i = 0; i < 3; i++) point = double(point);
  if (isIdentity(point)) return 'small order: the point times 8 is the identity';
  return null;
}
