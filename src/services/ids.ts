// Opaque identifiers and user codes. 128 bits of randomness make ids unguessable.
import { randomBytes, randomInt } from 'node:crypto';

const newId = (prefix: string) => `${prefix}_${randomBytes(16).toString('base64url')}`;

export const newAgentId = () => newId('agt');
export const newHostId = () => newId('hst');
export const newGrantId = () => newId('grt');
export const newApprovalId = () => newId('apr');

/** RFC 8628 §6.1: consonants only (no vowels, no look-alikes), shown as XXXX-XXXX. */
const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';

export function newUserCode(): string {
  let code = '';
  for (let i = 0; i < 8; i++) code += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}
