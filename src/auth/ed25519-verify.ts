// Ed25519 signature verification, strict, on the fastest backend that loads:
// libsodium through sodium-native (~46 µs per verification on our machine class) where its prebuilt
// binary loads, node:crypto (OpenSSL, ~78 µs) where it does not.
//
// The two backends must give the same verdict on every input, or an agent could be accepted by one
// instance and refused by another. libsodium is strict: besides the equation it refuses a
// non-canonical S (S >= L), a small-order R, and a small-order or non-canonical public key.
// node:crypto is not strict everywhere: on Node 20 (OpenSSL 3.0) it checks S but accepts the rest,
// so a forgery under the identity key verifies there; Node 24 refuses those itself. So the checks
// libsodium makes before the equation are made here, in JavaScript, for both backends, whatever
// the runtime, and each backend then only has the equation left to decide.
// test/unit/ed25519-verify.test.ts runs RFC 8032's vectors and malleable and malformed cases
// through both and asserts the same verdict.
import { createPublicKey, verify as opensslVerify, type KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';

type Ed25519Backend = 'libsodium' | 'node:crypto';

/** A public key that passed the strict checks, ready to verify with. */
export interface Ed25519PublicKey {
  /** True only when `signature` is a strict, valid Ed25519 signature of `message` under this key. */
  verify(message: Uint8Array, signature: Uint8Array): boolean;
}

export interface Ed25519Verifier {
  readonly backend: Ed25519Backend;
  /** The key ready for verification, or null when a strict verifier refuses it outright. */
  prepare(publicKey: Uint8Array): Ed25519PublicKey | null;
}

/** What agentgate needs of sodium-native: one function, checked when the module loads. */
interface SodiumBinding {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}

/**
 * The encodings of the eight points of order 1, 2, 4 and 8 (and the non-canonical spellings p and
 * p + 1 of 0 and 1), with the sign bit clear: libsodium's `ge25519_has_small_order` list. A key or
 * an R that is one of these proves nothing about who signed. test/unit/ed25519-verify.test.ts checks
 * each against the curve arithmetic of ed25519-point.ts.
 */
const SMALL_ORDER_ENCODINGS: readonly Uint8Array[] = [
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0100000000000000000000000000000000000000000000000000000000000000',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
].map((hex) => Uint8Array.from(Buffer.from(hex, 'hex')));

/** The group order L = 2^252 + 27742317777372353535851937790883648493, little-endian. */
const GROUP_ORDER = Uint8Array.from(Buffer.from('edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010', 'hex'));

/** The field prime p = 2^255 - 19, little-endian, sign bit clear. */
const FIELD_PRIME = Uint8Array.from(Buffer.from('edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', 'hex'));

/** Whether the 32 bytes at `offset` of `bytes`, with the top bit cleared, are one of the small-order encodings. */
function hasSmallOrder(bytes: Uint8Array, offset: number): boolean {
  outer: for (const encoding of SMALL_ORDER_ENCODINGS) {
    for (let i = 0; i < 31; i++) if (bytes[offset + i] !== encoding[i]) continue outer;
    if ((bytes[offset + 31]! & 0x7f) === encoding[31]) return true;
  }
  return false;
}

/** Whether the little-endian number at `offset` (with `mask` applied to its top byte) is below `bound`. */
function isBelow(bytes: Uint8Array, offset: number, bound: Uint8Array, mask: number): boolean {
  for (let i = 31; i >= 0; i--) {
    const byte = i === 31 ? bytes[offset + i]! & mask : bytes[offset + i]!;
    if (byte !== bound[i]) return byte < bound[i]!;
  }
  return false;
}

/** libsodium's checks on a public key before it is decoded: 32 bytes, y below p, not small order. */
function keyIsStrict(publicKey: Uint8Array): boolean {
  return publicKey.length === 32 && isBelow(publicKey, 0, FIELD_PRIME, 0x7f) && !hasSmallOrder(publicKey, 0);
}

/** libsodium's checks on a signature before the equation: 64 bytes, S below L, R not small order. */
function signatureIsStrict(signature: Uint8Array): boolean {
  return signature.length === 64 && isBelow(signature, 32, GROUP_ORDER, 0xff) && !hasSmallOrder(signature, 0);
}

/** DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the raw 32-byte key follows it. */
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

export function nodeCryptoVerifier(): Ed25519Verifier {
  return {
    backend: 'node:crypto',
    prepare(publicKey) {
      if (!keyIsStrict(publicKey)) return null;
      let key: KeyObject;
      try {
        key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: 'der', type: 'spki' });
      } catch {
        // A key the runtime refuses to import (it accepts most off-curve encodings, whose
        // signatures then simply never verify): no signature can verify under it.
        return null;
      }
      return {
        verify: (message, signature) => signatureIsStrict(signature) && opensslVerify(null, message, key, signature),
      };
    },
  };
}

export function sodiumVerifier(sodium: SodiumBinding): Ed25519Verifier {
  return {
    backend: 'libsodium',
    prepare(publicKey) {
      if (!keyIsStrict(publicKey)) return null;
      const key = Uint8Array.from(publicKey);
      return {
        verify: (message, signature) => signatureIsStrict(signature) && sodium.crypto_sign_verify_detached(signature, message, key),
      };
    },
  };
}

/** Loads sodium-native, or says why it cannot (no prebuilt binary for this platform, a broken install). */
export function loadSodium(): { sodium: SodiumBinding } | { error: string } {
  try {
    const loaded: unknown = createRequire(import.meta.url)('sodium-native');
    const fn = (loaded as { crypto_sign_verify_detached?: unknown } | null)?.crypto_sign_verify_detached;
    if (typeof fn !== 'function') return { error: 'sodium-native has no crypto_sign_verify_detached' };
    return { sodium: loaded as SodiumBinding };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

type VerifierSetting = 'auto' | 'libsodium' | 'node';

/**
 * The verifier for the `ED25519_VERIFIER` setting: `auto` takes libsodium where it loads and falls
 * back to node:crypto with the reason; `libsodium` insists (start-up fails without it); `node`
 * never loads the native module.
 */
export function chooseEd25519Verifier(
  setting: VerifierSetting,
  load: () => ReturnType<typeof loadSodium> = loadSodium,
): { verifier: Ed25519Verifier; fallbackReason?: string } {
  if (setting === 'node') return { verifier: nodeCryptoVerifier() };
  const loaded = load();
  if ('sodium' in loaded) return { verifier: sodiumVerifier(loaded.sodium) };
  if (setting === 'libsodium') throw new Error(`ED25519_VERIFIER=libsodium, but sodium-native cannot load: ${loaded.error}`);
  return { verifier: nodeCryptoVerifier(), fallbackReason: loaded.error };
}
