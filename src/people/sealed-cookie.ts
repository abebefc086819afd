// Values kept in the visitor's own browser instead of the store, sealed so that nobody can read or
// change them: AES-256-GCM (authenticated encryption) under a server key. Before a sign-in
// completes, everything the sign-in needs (the sign-in form's CSRF token, the OpenID Connect state,
// nonce and PKCE verifier) rides in one such cookie, so an anonymous visitor costs the server no
// storage at all (DESIGN §8: nothing is stored for an anonymous visitor). Each sealed value names
// its purpose and its expiry inside the ciphertext, so a value sealed for one use cannot be
// replayed for another, and an old cookie is worthless after its expiry whatever the browser keeps.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { checkedKeyMaterial } from '../common/key-material.ts';

const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Sealed values are small (a few hundred bytes); anything longer was not made here. */
const MAX_SEALED_CHARS = 4096;

export class CookieSealer {
  readonly #key: Buffer;

  /** `secret`: key material (MIN_KEY_BYTES at least); the cipher key is derived from it for this use only. */
  constructor(secret: Buffer) {
    this.#key = Buffer.from(hkdfSync('sha256', checkedKeyMaterial(secret, 'sign-in cookie key'), Buffer.alloc(0), 'agentgate sign-in cookie v1', 32));
  }

  /** The value, sealed for `purpose` until `expiresAtMs`, as base64url text fit for a cookie. */
  seal(purpose: string, value: unknown, expiresAtMs: number): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv);
    cipher.setAAD(Buffer.from(purpose));
    const body = Buffer.concat([cipher.update(JSON.stringify({ e: expiresAtMs, v: value }), 'utf8'), cipher.final()]);
    return Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64url');
  }

  /**
   * The value sealed for `purpose`, or undefined when the text was not sealed by this key for this
   * purpose, was changed, or has expired at `nowMs`. Never throws on what a browser sends.
   */
  open(purpose: string, sealed: string | undefined, nowMs: number): unknown {
    if (sealed === undefined || sealed.length > MAX_SEALED_CHARS || !/^[A-Za-z0-9_-]+$/.test(sealed)) return undefined;
    const bytes = Buffer.from(sealed, 'base64url');
    if (bytes.length <= IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(purpose));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      const text = Buffer.concat([decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)), decipher.final()]).toString('utf8');
      const parsed = JSON.parse(text) as { e?: unknown; v?: unknown };
      if (typeof parsed.e !== 'number' || parsed.e <= nowMs) return undefined;
      return parsed.v;
    } catch {
      return undefined;
    }
  }
}
