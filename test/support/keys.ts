// Real key material and real signed JWTs for tests (no mocks of the crypto).
import { randomUUID } from 'node:crypto';
import { SignJWT, calculateJwkThumbprint, exportJWK, generateKeyPair, type JWK } from 'jose';

export interface TestKey {
  privateKey: Parameters<SignJWT['sign']>[0];
  publicJwk: JWK;
  thumbprint: string;
  alg: 'EdDSA' | 'ES256' | 'RS256';
}

async function describe(pair: { privateKey: unknown; publicKey: unknown }, alg: TestKey['alg']): Promise<TestKey> {
  const full = await exportJWK(pair.publicKey as Parameters<typeof exportJWK>[0]);
  const { kty, crv, x, y, n, e } = full;
  const publicJwk = Object.fromEntries(Object.entries({ kty, crv, x, y, n, e }).filter(([, v]) => v !== undefined)) as JWK;
  return { privateKey: pair.privateKey as TestKey['privateKey'], publicJwk, thumbprint: await calculateJwkThumbprint(publicJwk, 'sha256'), alg };
}

export const newEd25519 = async () => describe(await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true }), 'EdDSA');
export const newP256 = async () => describe(await generateKeyPair('ES256', { extractable: true }), 'ES256');
export const newRsa = async () => describe(await generateKeyPair('RS256', { extractable: true, modulusLength: 2048 }), 'RS256');

export const nowSeconds = () => Math.floor(Date.now() / 1000);

export interface JwtOptions {
  claims?: Record<string, unknown>;
  typ?: string | null;
  iat?: number;
  exp?: number;
  jti?: string;
  omit?: string[];
  signWith?: TestKey;
  /** Seconds since epoch used for default iat (tests with a manual clock pass its time). */
  now?: number;
  /** The header's kid (keys published in a JWKS are named by it). */
  kid?: string;
}

export async function signJwt(key: TestKey, baseClaims: Record<string, unknown>, options: JwtOptions = {}): Promise<string> {
  const iat = options.iat ?? options.now ?? nowSeconds();
  const claims: Record<string, unknown> = { ...baseClaims, iat, exp: options.exp ?? iat + 60, jti: options.jti ?? randomUUID(), ...(options.claims ?? {}) };
  for (const name of options.omit ?? []) delete claims[name];
  for (const [k, v] of Object.entries(claims)) if (v === undefined) delete claims[k];
  const signer = options.signWith ?? key;
  const header: Record<string, unknown> = { alg: signer.alg };
  if (options.typ !== null) header.typ = options.typ;
  if (options.kid !== undefined) header.kid = options.kid;
  return new SignJWT(claims).setProtectedHeader(header as { alg: string }).sign(signer.privateKey);
}

export function hostJwt(host: TestKey, aud: string, options: JwtOptions & { agentKey?: TestKey } = {}): Promise<string> {
  return signJwt(host, {
    iss: host.thumbprint,
    aud,
    host_public_key: host.publicJwk,
    ...(options.agentKey ? { agent_public_key: options.agentKey.publicJwk } : {}),
  }, { typ: 'host+jwt', ...options });
}

export function agentJwt(agent: { key: TestKey; id: string; host: TestKey }, aud: string, options: JwtOptions & { capabilities?: string[] } = {}): Promise<string> {
  return signJwt(agent.key, {
    iss: agent.host.thumbprint,
    sub: agent.id,
    aud,
    ...(options.capabilities ? { capabilities: options.capabilities } : {}),
  }, { typ: 'agent+jwt', ...options });
}

/** A token whose header says alg none and whose signature is empty. */
export function unsignedJwt(header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${b64({ ...header, alg: 'none' })}.${b64(claims)}.`;
}

/** HS256 keyed with `secret` (algorithm-confusion attacks use the public key as the secret). */
export async function hs256Jwt(header: Record<string, unknown>, claims: Record<string, unknown>, secret: Uint8Array): Promise<string> {
  const { createHmac } = await import('node:crypto');
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const input = `${b64({ ...header, alg: 'HS256' })}.${b64(claims)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}
