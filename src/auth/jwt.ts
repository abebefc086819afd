// Compact JWT handling shared by host and agent verification: decoding without trust, the time
// and identity claim rules of DESIGN §4, and signature verification with a key we chose.
import { compactVerify } from 'jose';
import { ApiError } from '../errors.ts';
import type { Ed25519PublicKey } from './ed25519-verify.ts';
import type { VerifyKey } from './keys.ts';

const MAX_TOKEN_CHARS = 8192;
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export interface DecodedJwt {
  token: string;
  header: Record<string, unknown>;
  claims: Record<string, unknown>;
}

interface TimeRules {
  nowSeconds: number;
  maxLifetimeSeconds: number;
  skewSeconds: number;
}

const invalid = (message: string) => new ApiError('invalid_jwt', message);

function decodeSegment(segment: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
  } catch {
    throw invalid(`JWT ${what} is not base64url JSON`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalid(`JWT ${what} is not a JSON object`);
  return value as Record<string, unknown>;
}

/** Extracts the bearer token from an Authorization header value. */
export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match?.[1] ?? null;
}

/** Decodes header and claims without trusting them, and checks `typ` first (DESIGN §2 step 2). */
export function decodeJwt(token: string, expectedTyp: 'host+jwt' | 'agent+jwt'): DecodedJwt {
  if (token.length > MAX_TOKEN_CHARS || !COMPACT_JWS.test(token)) throw invalid('bearer token is not a compact JWT');
  // COMPACT_JWS made sure there are exactly two dots; the segments are sliced out rather than split,
  // which would also copy the signature.
  const firstDot = token.indexOf('.');
  const header = decodeSegment(token.slice(0, firstDot), 'header');
  if (header.typ !== expectedTyp) throw invalid(`JWT typ must be ${expectedTyp}`);
  if (header.crit !== undefined) throw invalid('JWT crit headers are not supported');
  return { token, header, claims: decodeSegment(token.slice(firstDot + 1, token.indexOf('.', firstDot + 1)), 'payload') };
}

/**
 * exp and iat are required numbers; the token lifetime is capped; 30 s skew by default on exp;
 * an iat or nbf more than the skew in the future is refused; jti is required.
 */
export function checkTimeAndJti(claims: Record<string, unknown>, rules: TimeRules): { jti: string; exp: number; iat: number } {
  const { exp, iat, jti } = claims;
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw invalid('JWT exp claim is required');
  if (typeof iat !== 'number' || !Number.isFinite(iat)) throw invalid('JWT iat claim is required');
  if (typeof jti !== 'string' || jti.length === 0 || jti.length > 256) throw invalid('JWT jti claim is required (at most 256 characters)');
  if (exp - iat > rules.maxLifetimeSeconds) throw invalid(`JWT lifetime (exp - iat) exceeds ${rules.maxLifetimeSeconds} s`);
  if (exp <= iat) throw invalid('JWT exp must be after iat');
  if (iat > rules.nowSeconds + rules.skewSeconds) throw invalid('JWT iat is in the future');
  if (exp + rules.skewSeconds <= rules.nowSeconds) throw invalid('JWT has expired');
  // RFC 7519 §4.1.5: not before `nbf`, with the same skew as `iat`. Optional, but honoured when sent.
  const { nbf } = claims;
  if (nbf !== undefined) {
    if (typeof nbf !== 'number' || !Number.isFinite(nbf)) throw invalid('JWT nbf claim must be a number');
    if (nbf > rules.nowSeconds + rules.skewSeconds) throw invalid('JWT is not valid yet (nbf is in the future)');
  }
  return { jti, exp, iat };
}

/** The `aud` claim (string or array) must contain one of the accepted audiences. */
export function checkAudience(claims: Record<string, unknown>, accepted: readonly string[]): void {
  const aud = claims.aud;
  // Looked through in place (every agent request passes here): no list of the audiences is built.
  if (typeof aud === 'string') {
    if (accepted.includes(withoutTrailingSlashes(aud))) return;
  } else if (Array.isArray(aud)) {
    for (const value of aud as unknown[]) if (typeof value === 'string' && accepted.includes(withoutTrailingSlashes(value))) return;
  }
  throw invalid('JWT aud does not name this server');
}

/** An audience as compared: trailing slashes do not count (the string itself when it has none). */
function withoutTrailingSlashes(audience: string): string {
  return audience.endsWith('/') ? audience.replace(/\/+$/, '') : audience;
}

/** The time rules at `nowMs` for the configured lifetime cap and skew (both authenticators use them). */
export function timeRulesAt(nowMs: number, settings: { maxLifetimeSeconds: number; skewSeconds: number }): TimeRules {
  return { nowSeconds: Math.floor(nowMs / 1000), maxLifetimeSeconds: settings.maxLifetimeSeconds, skewSeconds: settings.skewSeconds };
}

/** How long a jti must be remembered: the longest acceptable lifetime plus skew, in ms. */
export function jtiTtlMs(rules: Pick<TimeRules, 'maxLifetimeSeconds' | 'skewSeconds'>): number {
  return (rules.maxLifetimeSeconds + 2 * rules.skewSeconds) * 1000;
}

/**
 * Verifies the signature with the stored key's algorithm; the header's `alg` must agree (a token
 * cannot choose how it is checked). Ed25519 goes to the strict backend chosen at start-up, P-256 to
 * jose.
 */
export async function verifySignature(decoded: DecodedJwt, key: VerifyKey): Promise<void> {
  if (decoded.header.alg !== key.alg) throw invalid('JWT signature verification failed');
  if (key.alg === 'EdDSA') {
    if (!verifyEd25519(decoded.token, key.ed25519)) throw invalid('JWT signature verification failed');
    return;
  }
  try {
    await compactVerify(decoded.token, key.key, { algorithms: [key.alg] });
  } catch {
    throw invalid('JWT signature verification failed');
  }
}

/**
 * verifySignature's answer for an Ed25519 key, given at once: true when it would resolve, false
 * when it would refuse (invalid_jwt). Ed25519 verification is synchronous, so the execute hot path
 * checks a cached key with this and awaits nothing (agent-auth.ts verifyWithCachedKey).
 */
export function ed25519SignatureVerifies(decoded: DecodedJwt, key: Extract<VerifyKey, { alg: 'EdDSA' }>): boolean {
  return decoded.header.alg === key.alg && verifyEd25519(decoded.token, key.ed25519);
}

/** An Ed25519 signature is 64 bytes: 86 base64url characters without padding. */
const ED25519_SIGNATURE_CHARS = 86;

/**
 * The canonical spelling of a 64-byte value in base64url: 85 characters that carry 6 bits each, then
 * one that carries the last 2 bits and 4 spare bits, which must be zero (A, Q, g or w).
 */
const CANONICAL_ED25519_SIGNATURE = /^[A-Za-z0-9_-]{85}[AQgw]$/;

function verifyEd25519(token: string, key: Ed25519PublicKey): boolean {
  const lastDot = token.lastIndexOf('.');
  const encoded = token.slice(lastDot + 1);
  if (encoded.length !== ED25519_SIGNATURE_CHARS) return false;
  // The last character has spare bits, so one signature has several spellings; only the canonical
  // one is accepted, as for keys (a token has exactly one spelling). Checked on the text: it is
  // what re-encoding the decoded bytes and comparing would answer, without the re-encoded copy.
  if (!CANONICAL_ED25519_SIGNATURE.test(encoded)) return false;
  const signature = Buffer.from(encoded, 'base64url');
  // decodeJwt made sure the token is base64url and dots only, so latin1 is its ASCII signing input.
  return key.verify(Buffer.from(token.slice(0, lastDot), 'latin1'), signature);
}
