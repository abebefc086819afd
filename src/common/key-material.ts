// The server's own keys (the user-code key, the sign-in cookie key) are at least 32 bytes: 256 bits,
// the strength of the HMAC-SHA256 and AES-256 they key. Shorter material is a deployment mistake
// that must stop start-up, not a weaker key that silently works.

/** The fewest bytes of key material a server key may have. */
export const MIN_KEY_BYTES = 32;

/** `key` itself, once it is long enough; else throws naming the key. */
export function checkedKeyMaterial(key: Buffer, name: string): Buffer {
  if (key.length < MIN_KEY_BYTES) throw new Error(`the ${name} must be at least ${MIN_KEY_BYTES} bytes`);
  return key;
}
