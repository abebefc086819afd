// A WebAuthn authenticator in software (ES256, attestation "none"), for tests that drive the passkey
// ceremonies over plain HTTP: what an attacker holding only a person's browser session could mint,
// and, with user verification claimed, what a test needs to play the person without a browser.
// It answers the options a page gives (its JSON data blocks) with the JSON @simplewebauthn/browser
// would post.
import { createHash, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { isoCBOR } from '@simplewebauthn/server/helpers';

const b64url = (bytes: Uint8Array | Buffer) => Buffer.from(bytes).toString('base64url');

export interface SoftwarePasskeyOptions {
  /** Whether the authenticator claims user verification (the UV flag); a person's real one does. */
  userVerified?: boolean;
}

export class SoftwarePasskey {
  readonly id: string;
  readonly #privateKey: KeyObject;
  readonly #cose: Uint8Array;
  readonly #userVerified: boolean;
  #counter = 0;

  constructor(options: SoftwarePasskeyOptions = {}) {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.#privateKey = privateKey;
    this.#userVerified = options.userVerified ?? true;
    this.id = b64url(createHash('sha256').update(publicKey.export({ format: 'der', type: 'spki' })).digest().subarray(0, 16));
    const jwk = publicKey.export({ format: 'jwk' });
    // COSE_Key for ES256: kty EC2 (2), alg -7, crv P-256 (1), x, y.
    this.#cose = isoCBOR.encode(new Map<number, number | Uint8Array>([
      [1, 2], [3, -7], [-1, 1], [-2, Buffer.from(jwk.x!, 'base64url')], [-3, Buffer.from(jwk.y!, 'base64url')],
    ]));
  }

  /** The response to registration options (`passkey-registration-options`), as the browser posts it. */
  register(options: { challenge: string; rp: { id?: string } }, origin: string) {
    const rpId = options.rp.id ?? new URL(origin).hostname;
    const clientData = this.#clientData('webauthn.create', options.challenge, origin);
    const credentialId = Buffer.from(this.id, 'base64url');
    const attestedData = Buffer.concat([Buffer.alloc(16), u16(credentialId.length), credentialId, Buffer.from(this.#cose)]);
    // Flags: user present, user verified (when claimed), attested credential data included.
    const authData = Buffer.concat([this.#rpIdHash(rpId), Buffer.from([0x01 | (this.#userVerified ? 0x04 : 0) | 0x40]), u32(this.#counter), attestedData]);
    const attestationObject = isoCBOR.encode(new Map<string, unknown>([['fmt', 'none'], ['attStmt', new Map()], ['authData', authData]]) as never);
    return {
      id: this.id, rawId: this.id, type: 'public-key',
      response: { clientDataJSON: b64url(clientData), attestationObject: b64url(attestationObject), transports: ['internal'] },
      clientExtensionResults: {},
    };
  }

  /** The response to authentication options (`presence-options`, `passkey-proof-options`). */
  assert(options: { challenge: string; rpId?: string }, origin: string) {
    const rpId = options.rpId ?? new URL(origin).hostname;
    const clientData = this.#clientData('webauthn.get', options.challenge, origin);
    this.#counter++;
    const authData = Buffer.concat([this.#rpIdHash(rpId), Buffer.from([0x01 | (this.#userVerified ? 0x04 : 0)]), u32(this.#counter)]);
    const signature = sign('sha256', Buffer.concat([authData, createHash('sha256').update(clientData).digest()]), this.#privateKey);
    return {
      id: this.id, rawId: this.id, type: 'public-key',
      response: { clientDataJSON: b64url(clientData), authenticatorData: b64url(authData), signature: b64url(signature) },
      clientExtensionResults: {},
    };
  }

  #clientData(type: string, challenge: string, origin: string): Buffer {
    return Buffer.from(JSON.stringify({ type, challenge, origin, crossOrigin: false }));
  }

  #rpIdHash(rpId: string): Buffer {
    return createHash('sha256').update(rpId).digest();
  }
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** The JSON a page put in one of its data blocks (`<script type="application/json" id=...>`), or null. */
export function dataBlock<T = any>(pageText: string, id: string): T | null {
  const match = new RegExp(`<script type="application/json" id="${id}">([^<]*)</script>`).exec(pageText);
  return match ? (JSON.parse(match[1]!) as T) : null;
}
