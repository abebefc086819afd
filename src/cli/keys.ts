// Key files for the command-line tool: Ed25519 key pairs as JWK files (keygen), reading a public or
// private JWK file back, its RFC 7638 thumbprint (a host's identity, DESIGN §4), and the signing
// key. A private key is only ever read from and written to files; it is never printed.
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK } from 'jose';
import { z } from 'zod';
import { UsageError } from './errors.ts';
import type { SigningKey } from './tokens.ts';

/** A JWK file is a few hundred bytes; anything much larger is not one. */
const MAX_KEY_FILE_BYTES = 64 * 1024;

const b64url = z.string().regex(/^[A-Za-z0-9_-]+$/, 'must be base64url').max(1024);
const ed25519Jwk = z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: b64url, d: b64url.optional() });
const p256Jwk = z.object({ kty: z.literal('EC'), crv: z.literal('P-256'), x: b64url, y: b64url, d: b64url.optional() });
const keyFileSchema = z.union([ed25519Jwk, p256Jwk]);

/** Only the public members, in the shape the server stores (src/auth/keys.ts). */
export type PublicJwk = { kty: 'OKP'; crv: 'Ed25519'; x: string } | { kty: 'EC'; crv: 'P-256'; x: string; y: string };
export type SigningAlgorithm = 'EdDSA' | 'ES256';

export interface KeyFile {
  path: string;
  publicJwk: PublicJwk;
  alg: SigningAlgorithm;
  /** The private JWK when the file holds one (kept out of every output). */
  privateJwk: Record<string, string> | null;
  /** True when a private key file can be read by other users (it should be mode 0600). */
  exposed: boolean;
}

/** Reads a JWK file (Ed25519 or P-256, public or private); every problem is a usage error (exit 2). */
export async function readKeyFile(path: string, cwd: string, label: string): Promise<KeyFile> {
  const full = resolve(cwd, path);
  let text: string;
  let mode: number;
  try {
    const info = await stat(full);
    if (!info.isFile()) throw new UsageError(`${label} ${path} is not a file`);
    if (info.size > MAX_KEY_FILE_BYTES) throw new UsageError(`${label} ${path} is too large to be a JWK file`);
    mode = info.mode;
    const handle = await open(full, constants.O_RDONLY);
    try {
      text = await handle.readFile({ encoding: 'utf8' });
    } finally {
      await handle.close();
    }
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`cannot read ${label} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`${label} ${path} is not JSON (expected a JWK)`);
  }
  const parsed = keyFileSchema.safeParse(value);
  if (!parsed.success) throw new UsageError(`${label} ${path} is not an Ed25519 or P-256 JWK`);
  const jwk = parsed.data;
  const publicJwk: PublicJwk = jwk.kty === 'OKP' ? { kty: 'OKP', crv: 'Ed25519', x: jwk.x } : { kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y };
  const privateJwk = jwk.d === undefined ? null : { ...publicJwk, d: jwk.d };
  return { path, publicJwk, alg: jwk.kty === 'OKP' ? 'EdDSA' : 'ES256', privateJwk, exposed: privateJwk !== null && (mode & 0o077) !== 0 };
}

/** The key that signs JWTs; the file must hold the private half. */
export async function signingKeyOf(file: KeyFile, label: string): Promise<SigningKey> {
  if (!file.privateJwk) throw new UsageError(`${label} ${file.path} holds only a public key; signing needs the private JWK file`);
  try {
    const key = await importJWK(file.privateJwk, file.alg);
    if (key instanceof Uint8Array) throw new Error('not an asymmetric key');
    return key;
  } catch {
    throw new UsageError(`${label} ${file.path} is not a usable private key`);
  }
}

/** RFC 7638 SHA-256 thumbprint, base64url: what the server calls the host (`iss`). */
export const thumbprintOf = (publicJwk: PublicJwk): Promise<string> => calculateJwkThumbprint(publicJwk, 'sha256');

interface KeyPair {
  privateJwk: Record<string, string>;
  publicJwk: PublicJwk;
  thumbprint: string;
}

export async function generateEd25519(): Promise<KeyPair> {
  const pair = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const exported = await exportJWK(pair.privateKey);
  if (typeof exported.x !== 'string' || typeof exported.d !== 'string') throw new Error('jose exported an incomplete Ed25519 JWK');
  const publicJwk: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x: exported.x };
  return { privateJwk: { ...publicJwk, d: exported.d }, publicJwk, thumbprint: await thumbprintOf(publicJwk) };
}

/**
 * Writes a new file and never replaces one: a key overwritten by mistake is an identity lost.
 * `mode` applies at creation, so a private key is never readable by others, not even briefly.
 */
export async function writeNewFile(path: string, content: string, mode: number): Promise<void> {
  let handle;
  try {
    handle = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, mode);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new UsageError(`${path} exists already; choose another --name or --out (keys are never overwritten)`);
    throw new UsageError(`cannot create ${path}: ${code ?? (err as Error).message}`);
  }
  try {
    await handle.writeFile(content, 'utf8');
    // The mode at creation is filtered by the umask; make the intended one explicit.
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}
