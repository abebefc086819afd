// The field and curve constants of Ed25519 (RFC 8032 §5.1) written out for the tests, independently
// of src/auth/ed25519-point.ts, so a test that checks that module does not agree with it by
// construction.

/** The field prime, p = 2^255 - 19. */
export const P = 2n ** 255n - 19n;
/** The prime order of the base point, L = 2^252 + 27742317777372353535851937790883648493. */
export const L = 2n ** 252n + 27742317777372353535851937790883648493n;

export const mod = (a: bigint): bigint => ((a % P) + P) % P;

export function pow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  for (let b = mod(base), e = exponent; e > 0n; e >>= 1n, b = (b * b) % P) if (e & 1n) result = (result * b) % P;
  return result;
}

/** The inverse mod p, by Fermat's little theorem. */
export const inv = (a: bigint): bigint => pow(a, P - 2n);
/** The curve constant d = -121665 / 121666. */
export const D = mod(-121665n * inv(121666n));
/** A square root of -1 mod p. */
export const SQRT_M1 = pow(2n, (P - 1n) / 4n);
