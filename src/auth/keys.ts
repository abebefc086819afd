// Public keys: shape validation (Ed25519 points via ed25519-point.ts), the supported-algorithm check,
// RFC 7638 thumbprints and import.
// The verify algorithm always comes from the stored key type, never from a JWT header (DESIGN §4).
import { createHash } from 'node:crypto';
import { importJWK } from 'jose';
import { z } from 'zod';
import { ApiError } from '../errors.ts';
import { ed25519PublicKeyProblem } from './ed25519-point.ts';
import type { Ed25519PublicKey, Ed25519Verifier } from './ed25519-verify.ts';
import type { PublicJwk } from '../domain/types.ts';

/** Key types agentgate can verify, and the JWS `alg` each one signs with. */
const KEY_TYPES = { Ed25519: 'EdDSA', 'P-256': 'ES256' } as const;
type KeyType = keyof typeof KEY_TYPES;
type JwsAlgorithm = (typeof KEY_TYPES)[KeyType];

const b64url = z.string().regex(/^[A-Za-z0-9_-]+$/, 'must be base64url').max(1024);

/**
 * Any JWK-looking object; members are checked per key type by keyTypeOf. Exported so the JWKS
 * fetcher (jwks-fetch.ts) applies the same member bounds to keys it fetches.
 */
export const publicJwkSchema = z
  .object({
    kty: z.string().max(16),
    crv: z.string().max(32).optional(),
    x: b64url.optional(),
    y: b64url.optional(),
    n: z.string().max(2048).optional(),
    e: z.string().max(64).optional(),
    kid: z.string().max(256).optional(),
    d: z.unknown().optional(),
  })
  .loose();

/**
 * Whether a base64url string is the canonical spelling of its bytes. The spare bits of the last
 * character let the same bytes be written several ways; only the one that re-encoding gives is
 * canonical.
 */
export function isCanonicalBase64url(text: string): boolean {
  return Buffer.from(text, 'base64url').toString('base64url') === text;
}

/** The key type of a JWK as named in discovery `algorithms` ("Ed25519", "P-256", "RSA", ...). */
function keyTypeName(jwk: { kty: string; crv?: string | undefined }): string {
  if (jwk.kty === 'OKP' || jwk.kty === 'EC') return jwk.crv ?? jwk.kty;
  return jwk.kty;
}

/**
 * Validates a client-supplied public JWK against the server's supported set and returns only its
 * public members. Unsupported types are 400 unsupported_algorithm; malformed keys 400 invalid_request.
 */
export function parsePublicJwk(value: unknown, supported: readonly string[], label: string): { jwk: PublicJwk; keyType: KeyType } {
  const parsed = publicJwkSchema.safeParse(value);
  if (!parsed.success) throw new ApiError('invalid_request', `${label} must be a JWK object`);
  const raw = parsed.data;
  if (raw.d !== undefined) throw new ApiError('invalid_request', `${label} must not contain private key material`);
  const typeName = keyTypeName(raw);
  if (!supported.includes(typeName) || !(typeName in KEY_TYPES)) {
    throw new ApiError('unsupported_algorithm', `${label} key type ${JSON.stringify(typeName)} is not supported; supported: ${supported.join(', ')}`);
  }
  const keyType = typeName as KeyType;
  // The spare bits of a base64url string's last character let one key be written several ways,
  // each with its own RFC 7638 thumbprint, i.e. its own identity here. Only the canonical spelling
  // (what re-encoding the decoded bytes gives) is accepted.
  for (const coordinate of [raw.x, raw.y]) {
    if (coordinate !== undefined && !isCanonicalBase64url(coordinate)) {
      throw new ApiError('invalid_request', `${label} is not canonical base64url (the same key has exactly one spelling)`);
    }
  }
  if (keyType === 'Ed25519') {
    if (raw.kty !== 'OKP' || !raw.x) throw new ApiError('invalid_request', `${label} is not a valid Ed25519 public key`);
    // Small-order and non-canonical points are refused here, at registration and rotation, so they
    // never become a stored key (SECURITY.md); verification never has to think about them.
    const problem = ed25519PublicKeyProblem(Buffer.from(raw.x, 'base64url'));
    if (problem) throw new ApiError('invalid_request', `${label} is not a valid Ed25519 public key: ${problem}`);
    return { jwk: { kty: 'OKP', crv: 'Ed25519', x: raw.x }, keyType };
  }
  if (raw.kty !== 'EC' || !raw.x || !raw.y || Buffer.from(raw.x, 'base64url').length !== 32 || Buffer.from(raw.y, 'base64url').length !== 32) {
    throw new ApiError('invalid_request', `${label} is not a valid P-256 public key`);
  }
  return { jwk: { kty: 'EC', crv: 'P-256', x: raw.x, y: raw.y }, keyType };
}

/** RFC 7638 SHA-256 thumbprint: the required members in lexicographic order, no whitespace. */
export function jwkThumbprint(jwk: PublicJwk): string {
  let canonical: string;
  if (jwk.kty === 'OKP') canonical = JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x });
  else if (jwk.kty === 'EC') canonical = JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y });
  else if (jwk.kty === 'RSA') canonical = JSON.stringify({ e: jwk.e, kty: jwk.kty, n: jwk.n });
  else throw new ApiError('invalid_request', `cannot compute a thumbprint for key type ${jwk.kty}`);
  return createHash('sha256').update(canonical).digest('base64url');
}

function algorithmFor(jwk: PublicJwk): JwsAlgorithm {
  const typeName = keyTypeName(jwk);
  if (typeName === 'Ed25519' || typeName === 'P-256') return KEY_TYPES[typeName];
  throw new Error(`stored key of unsupported type ${typeName}`);
}

/** What jose verifies P-256 signatures with: a WebCrypto key (never a shared secret). */
type AsymmetricKey = Exclude<Awaited<ReturnType<typeof importJWK>>, Uint8Array>;

/** A stored public key ready to verify with: Ed25519 on the strict backend, P-256 through jose. */
export type VerifyKey =
  | { alg: 'EdDSA'; ed25519: Ed25519PublicKey }
  | { alg: 'ES256'; key: AsymmetricKey };

/**
 * A key no signature verifies under. Stored Ed25519 keys passed the same strict checks at
 * registration, so this only stands in for a record written before those checks existed: its
 * owner is refused (401 invalid_jwt), never let through.
 */
const NEVER_VERIFIES: Ed25519PublicKey = { verify: () => false };

/** Imports stored public keys, Ed25519 ones for the backend chosen at start-up (ed25519-verify.ts). */
export class KeyImporter {
  readonly ed25519: Ed25519Verifier;

  constructor(ed25519: Ed25519Verifier) {
    this.ed25519 = ed25519;
  }

  async import(jwk: PublicJwk): Promise<VerifyKey> {
    const alg = algorithmFor(jwk);
    if (alg === 'EdDSA') return { alg, ed25519: this.ed25519.prepare(Buffer.from(jwk.x ?? '', 'base64url')) ?? NEVER_VERIFIES };
    const key = await importJWK({ ...jwk }, alg);
    if (key instanceof Uint8Array) throw new Error('a symmetric key cannot be a verify key');
    return { alg, key };
  }
}
