// RFC 8628 user codes (protocol §10, DESIGN §8). A code is derived from its approval's id with a
// server key (HMAC-SHA256), so nothing stored is the code: Redis holds the approval id and, for the
// approval page's lookup, a second keyed hash of the code. Without the key neither gives the code
// away, and the same approval always shows the same code (a retried registration or a status poll
// can show it again). Codes use 20 consonants (no vowels, so no words; no look-alikes), shown as
// XXXX-XXXX and compared case-insensitively, with or without the dash.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { checkedKeyMaterial } from '../../common/key-material.ts';

const ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
const CODE_LENGTH = 8;
/** Bytes below this are used (12 × 20), so every letter is equally likely. */
const UNBIASED_BELOW = 240;

export class UserCodes {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    this.#key = checkedKeyMaterial(key, 'user-code key');
  }

  /** The code the approval with this id shows, as XXXX-XXXX. */
  codeFor(approvalId: string): string {
    let letters = '';
    for (let round = 0; letters.length < CODE_LENGTH; round++) {
      const bytes = createHmac('sha256', this.#key).update(`user-code:${round}:${approvalId}`).digest();
      for (const byte of bytes) {
        if (byte < UNBIASED_BELOW && letters.length < CODE_LENGTH) letters += ALPHABET[byte % ALPHABET.length];
      }
    }
    return `${letters.slice(0, 4)}-${letters.slice(4)}`;
  }

  /**
   * The key under which a typed code is looked up, or null when it cannot be a code at all (so no
   * lookup is spent on it). Case and separators do not matter.
   */
  lookupKey(typed: string): string | null {
    const normalized = normalize(typed);
    if (normalized === null) return null;
    return createHmac('sha256', this.#key).update(`lookup:${normalized}`).digest('base64url');
  }

  /** Whether a typed code is the one this approval shows (constant time). */
  matches(typed: string, approvalId: string): boolean {
    const normalized = normalize(typed);
    if (normalized === null) return false;
    const expected = Buffer.from(normalize(this.codeFor(approvalId))!);
    const given = Buffer.from(normalized);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}

/** Upper case without separators, or null when the result is not 8 letters of the alphabet. */
function normalize(typed: string): string | null {
  if (typed.length > 32) return null;
  const compact = typed.replace(/[\s-]/g, '').toUpperCase();
  if (compact.length !== CODE_LENGTH) return null;
  for (const letter of compact) if (!ALPHABET.includes(letter)) return null;
  return compact;
}

/**
 * The server's user codes: from USER_CODE_KEY when set, else from a random key the store keeps for
 * every instance (said in the log, since a reader of the store could then derive codes).
 */
export async function userCodesFor(
  configuredKey: string | undefined, store: { kind: string; sharedSecret(name: string): Promise<string> }, warn: (message: string) => void,
): Promise<UserCodes> {
  if (configuredKey !== undefined) return new UserCodes(Buffer.from(configuredKey, 'utf8'));
  // The memory store lives and dies with this process: its random key is as private as the process.
  if (store.kind === 'redis') warn('USER_CODE_KEY is not set: user codes are keyed by a random key kept in the store; set USER_CODE_KEY so that a reader of the store cannot derive them');
  return new UserCodes(Buffer.from(await store.sharedSecret('user-code-key'), 'base64url'));
}
