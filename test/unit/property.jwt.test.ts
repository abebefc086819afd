// Generated attacks on JWT parsing and verification (DESIGN §4, protocol §5): random bytes, random
// dot-separated segments, random JSON headers and claims, and real signatures over claims with one
// rule broken each, through the functions agentgate verifies agent and host JWTs with
// (AgentAuthenticator, HostAuthenticator, the decode and time rules they share). Every refusal must
// be an ApiError with invalid_jwt or a code the contract gives for what the token carried (a host's
// self-presented key: invalid_request, unsupported_algorithm), never another exception and never
// an acceptance. Controls check that the untouched tokens are accepted, so the refusals are earned.
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import fc from 'fast-check';
import { RateLimiterMemory, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { beforeAll, describe, expect, it } from 'vitest';
import { AgentAuthenticator } from '../../src/auth/agent-auth.ts';
import { chooseEd25519Verifier } from '../../src/auth/ed25519-verify.ts';
import { HostAuthenticator, type AuthSettings } from '../../src/auth/host-auth.ts';
import { checkTimeAndJti, decodeJwt } from '../../src/auth/jwt.ts';
import { JwksKeys } from '../../src/auth/jwks-keys.ts';
import { AgentKeyCache } from '../../src/auth/key-cache.ts';
import { jwkThumbprint, KeyImporter } from '../../src/auth/keys.ts';
import { ManualClock } from '../../src/common/clock.ts';
import type { PublicJwk } from '../../src/domain/types.ts';
import { ApiError } from '../../src/errors.ts';
import { silentLogger } from '../../src/logger.ts';
import { LIMIT_NAMES, RateLimits, type LimitName } from '../../src/ratelimit/limits.ts';
import { callerBudgets } from '../../src/services/budgets.ts';
import { MemoryStore } from '../../src/store/memory/memory-store.ts';

const SEED = 4_242_001;
const RAW_RUNS = 400;
const CLAIM_RUNS = 400;

const NOW_SECONDS = 1_767_225_600;
const ISSUER = 'http://localhost:3000';
const EXECUTE_URL = `${ISSUER}/capability/execute`;
const AGENT_ID = 'agt_property';
const HOST_ID = 'hst_property';
const settings: AuthSettings = { issuer: ISSUER, executeUrl: EXECUTE_URL, maxLifetimeSeconds: 60, skewSeconds: 30, algorithms: ['Ed25519', 'P-256'] };

/** A key pair made with node:crypto, so tokens can be signed over any header and claims we write. */
interface Signer {
  privateKey: KeyObject;
  jwk: PublicJwk;
  thumbprint: string;
}

function newSigner(): Signer {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const { x } = publicKey.export({ format: 'jwk' }) as { x: string };
  const jwk: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x };
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A compact JWS over exactly this header and these claims, signed by `signer` (whatever `alg` says). */
function signed(signer: Signer, header: unknown, claims: unknown): string {
  const input = `${b64(header)}.${b64(claims)}`;
  return `${input}.${sign(null, Buffer.from(input), signer.privateKey).toString('base64url')}`;
}

const hostKey = newSigner();
const agentKey = newSigner();
const clock = new ManualClock(NOW_SECONDS * 1000);
let agentAuth: AgentAuthenticator;
let hostAuth: HostAuthenticator;

beforeAll(async () => {
  const store = new MemoryStore({ now: () => clock.nowMs() });
  const nowMs = clock.nowMs();
  await store.createHost({
    id: HOST_ID, thumbprint: hostKey.thumbprint, publicJwk: hostKey.jwk, status: 'active', defaultCapabilities: [], createdAtMs: nowMs, updatedAtMs: nowMs, activatedAtMs: nowMs,
  });
  await store.createAgent({
    agent: {
      id: AGENT_ID, hostId: HOST_ID, name: 'property agent', mode: 'delegated', status: 'active', publicJwk: agentKey.jwk, keyThumbprint: agentKey.thumbprint,
      keyVersion: 1, version: 1, hostStatus: 'active', hostThumbprint: hostKey.thumbprint, createdAtMs: nowMs, updatedAtMs: nowMs, activatedAtMs: nowMs,
      absoluteExpiresAtMs: nowMs + 86_400_000, maxLifetimeExpiresAtMs: nowMs + 86_400_000,
    },
    grants: [],
    sessionExpiresAtMs: nowMs + 3_600_000,
  });
  // Budgets no run can spend, so a refusal is never a rate limit.
  const unlimited = (): RateLimiterAbstract => new RateLimiterMemory({ points: 1e9, duration: 60 });
  const limits = new RateLimits(Object.fromEntries(LIMIT_NAMES.map((n) => [n, unlimited()])) as Record<LimitName, RateLimiterAbstract>, silentLogger);
  const importer = new KeyImporter(chooseEd25519Verifier('auto').verifier);
  const keys = new AgentKeyCache({ maxEntries: 100, ttlSeconds: 30, clock, importer });
  const budgets = callerBudgets(limits);
  // No JWKS is reachable here: a token naming a JWKS URL must be refused, never accepted.
  const jwks = new JwksKeys({
    source: { lookup: async () => ({ kind: 'unavailable', reason: 'no JWKS in this test' }), peek: () => undefined },
    algorithms: settings.algorithms,
    spendFetch: budgets.jwksFetch,
  });
  agentAuth = new AgentAuthenticator({ store, clock, settings, keys, budgets, jwks });
  hostAuth = new HostAuthenticator({ store, clock, settings, budgets, importer, jwks, moveJwksKey: () => Promise.reject(new Error('no JWKS host exists here')) });
});

// ---- what a refusal may be ------------------------------------------------------------------------

/** The codes a host JWT may be refused with: invalid_jwt, or what the contract says of a presented key. */
const HOST_CODES = ['invalid_jwt', 'invalid_request', 'unsupported_algorithm'];

type Verdict = { accepted: true } | { accepted: false; code: string; message: string } | { accepted: false; thrown: string };

async function verdictOf(run: () => Promise<unknown>): Promise<Verdict> {
  try {
    await run();
    return { accepted: true };
  } catch (err) {
    if (err instanceof ApiError) return { accepted: false, code: err.code, message: err.message };
    return { accepted: false, thrown: err instanceof Error ? `${err.name}: ${err.message}` : String(err) };
  }
}

const asAgent = (token: string) => verdictOf(() => agentAuth.verify(token, { audiences: [ISSUER, EXECUTE_URL], consumeJti: true }));
const asHost = (token: string) => verdictOf(() => hostAuth.verify(token, { allowUnknown: true, allowPending: true }));

async function expectRefused(token: string, codes: readonly string[] = ['invalid_jwt']): Promise<void> {
  for (const [who, verdict] of [['agent', await asAgent(token)], ['host', await asHost(token)]] as const) {
    expect(verdict, `${who} JWT ${JSON.stringify(token.slice(0, 200))}`).toMatchObject({ accepted: false });
    expect(verdict, `${who} JWT ${JSON.stringify(token.slice(0, 200))}`).not.toHaveProperty('thrown');
    if ('code' in verdict) expect(who === 'host' ? [...codes, ...HOST_CODES] : codes, verdict.message).toContain(verdict.code);
  }
}

// ---- generators -----------------------------------------------------------------------------------

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const segment = fc.string({ maxLength: 60, unit: fc.constantFrom(...B64URL) });

/** JSON of every shape, with the values JWT rules care about (numbers at the edges, long strings). */
const jsonLeaf = fc.oneof(
  fc.constant(null), fc.boolean(), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, NOW_SECONDS, NOW_SECONDS + 60, 'agent+jwt', 'host+jwt', 'none', 'EdDSA', 'HS256', 'x'.repeat(300)),
  fc.string({ maxLength: 12 }),
);
const jsonValue = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { maxDepth: 3 },
    { weight: 5, arbitrary: jsonLeaf },
    { weight: 1, arbitrary: fc.array(tie('value'), { maxLength: 4 }) },
    { weight: 1, arbitrary: fc.dictionary(fc.constantFrom('typ', 'alg', 'sub', 'iss', 'aud', 'exp', 'iat', 'jti', 'nbf', 'crit', 'capabilities', 'host_public_key', 'x'), tie('value'), { maxKeys: 5 }) },
  ),
})).value;

/** A header or claims object: random members, sometimes over the real ones, sometimes not an object at all. */
const jsonDocument = (base: Record<string, unknown>) => fc.oneof(
  { weight: 4, arbitrary: fc.dictionary(fc.constantFrom(...Object.keys(base), 'x', 'crit', 'kid', 'jwk'), jsonValue, { maxKeys: 6 }).map((over) => ({ ...base, ...over })) },
  { weight: 1, arbitrary: jsonValue },
);

// ---- valid tokens and the ways to break them ------------------------------------------------------

const agentHeader = () => ({ alg: 'EdDSA', typ: 'agent+jwt' });
const agentClaims = (): Record<string, unknown> => ({ iss: hostKey.thumbprint, sub: AGENT_ID, aud: EXECUTE_URL, iat: NOW_SECONDS - 5, exp: NOW_SECONDS + 40, jti: randomUUID() });
const hostHeader = () => ({ alg: 'EdDSA', typ: 'host+jwt' });
const hostClaims = (): Record<string, unknown> => ({ iss: hostKey.thumbprint, aud: ISSUER, iat: NOW_SECONDS - 5, exp: NOW_SECONDS + 40, jti: randomUUID() });

interface Token {
  kind: 'agent' | 'host';
  header: Record<string, unknown>;
  claims: Record<string, unknown>;
  /** Replaces the signature; undefined signs the header and claims with the right key. */
  signature?: (good: string) => string;
}

/** Another key's thumbprint: an issuer that is not the token's host. */
const newSignerThumbprint = newSigner().thumbprint;

/** One way to break a token, each a refusal DESIGN §4 or RFC 7515/7519 asks for. */
type Breakage = (t: Token) => void;

const BREAKAGES: Record<string, Breakage> = {
  'typ JWT': (t) => { t.header.typ = 'JWT'; },
  'typ of the other kind': (t) => { t.header.typ = t.kind === 'agent' ? 'host+jwt' : 'agent+jwt'; },
  'typ missing': (t) => { delete t.header.typ; },
  'typ not a string': (t) => { t.header.typ = ['agent+jwt']; },
  'alg none, no signature': (t) => { t.header.alg = 'none'; t.signature = () => ''; },
  'alg HS256': (t) => { t.header.alg = 'HS256'; },
  'alg ES256 for an Ed25519 key': (t) => { t.header.alg = 'ES256'; },
  'crit header': (t) => { t.header.crit = ['exp']; },
  'signature of other bytes': (t) => { t.signature = (good) => `${good.slice(0, -4)}${good.slice(-4) === 'AAAA' ? 'BBBB' : 'AAAA'}`; },
  'signature cut short': (t) => { t.signature = (good) => good.slice(0, 40); },
  'signature spelt with spare bits set': (t) => { t.signature = (good) => `${good.slice(0, -1)}${B64URL[B64URL.indexOf(good.at(-1)!) ^ 1]}`; },
  'exp missing': (t) => { delete t.claims.exp; },
  'exp a numeric string': (t) => { t.claims.exp = String(t.claims.exp); },
  'exp huge (1e308)': (t) => { t.claims.exp = 1e308; },
  'exp past, beyond the skew': (t) => { t.claims.iat = NOW_SECONDS - 80; t.claims.exp = NOW_SECONDS - 31; },
  'exp not after iat': (t) => { t.claims.exp = t.claims.iat; },
  'lifetime over the cap': (t) => { t.claims.exp = (t.claims.iat as number) + 61; },
  'iat missing': (t) => { delete t.claims.iat; },
  'iat in the future beyond the skew': (t) => { t.claims.iat = NOW_SECONDS + 31; t.claims.exp = NOW_SECONDS + 60; },
  'iat an array': (t) => { t.claims.iat = [t.claims.iat]; },
  'nbf in the future': (t) => { t.claims.nbf = NOW_SECONDS + 31; },
  'nbf not a number': (t) => { t.claims.nbf = { at: NOW_SECONDS }; },
  'jti missing': (t) => { delete t.claims.jti; },
  'jti empty': (t) => { t.claims.jti = ''; },
  'jti too long': (t) => { t.claims.jti = 'j'.repeat(257); },
  'jti a number': (t) => { t.claims.jti = 7; },
  'aud another server': (t) => { t.claims.aud = 'https://evil.example'; },
  'aud missing': (t) => { delete t.claims.aud; },
  'aud a list without this server': (t) => { t.claims.aud = ['https://evil.example', 42]; },
  'iss not the host': (t) => { t.claims.iss = newSignerThumbprint; },
  'iss not a string': (t) => { t.claims.iss = { thumbprint: hostKey.thumbprint }; },
};
/** Breakages that only an agent token has rules for. */
const AGENT_BREAKAGES: Record<string, Breakage> = {
  'sub not a string': (t) => { t.claims.sub = 12345; },
  'sub with characters no id has': (t) => { t.claims.sub = 'agt {x}'; },
  'sub an unknown agent': (t) => { t.claims.sub = 'agt_unknown'; },
  'sub nested': (t) => { t.claims.sub = { id: AGENT_ID }; },
  'capabilities not a list': (t) => { t.claims.capabilities = 'echo'; },
  'capabilities of non-strings': (t) => { t.claims.capabilities = ['echo', { name: 'x' }]; },
  'capabilities too many': (t) => { t.claims.capabilities = Array.from({ length: 257 }, (_, i) => `c${i}`); },
};
/** Claims the rules do not read: they must change nothing. */
const neutralClaims = fc.dictionary(fc.constantFrom('x_note', 'x_nested', 'scope', 'x_list'), jsonValue, { maxKeys: 3 });

function tokenOf(t: Token, signer: Signer): string {
  const good = signed(signer, t.header, t.claims);
  if (!t.signature) return good;
  const dot = good.lastIndexOf('.');
  return `${good.slice(0, dot)}.${t.signature(good.slice(dot + 1))}`;
}

const breakages = (own: Record<string, Breakage>) => fc.uniqueArray(fc.constantFrom(...Object.keys({ ...BREAKAGES, ...own })), { minLength: 1, maxLength: 3 });

describe('JWT parsing and verification throw nothing but ApiError on generated tokens', () => {
  it('controls: a well-formed agent or host JWT is accepted, with or without claims nobody reads', async () => {
    expect(await asAgent(tokenOf({ kind: 'agent', header: agentHeader(), claims: agentClaims() }, agentKey))).toStrictEqual({ accepted: true });
    expect(await asHost(tokenOf({ kind: 'host', header: hostHeader(), claims: hostClaims() }, hostKey))).toStrictEqual({ accepted: true });
    await fc.assert(fc.asyncProperty(neutralClaims, async (extra) => {
      expect(await asAgent(tokenOf({ kind: 'agent', header: agentHeader(), claims: { ...agentClaims(), ...extra } }, agentKey))).toStrictEqual({ accepted: true });
    }), { seed: SEED, numRuns: 50 });
  });

  it('a JWT of random bytes is refused with invalid_jwt, never a crash', async () => {
    await fc.assert(fc.asyncProperty(fc.uint8Array({ maxLength: 300 }), fc.constantFrom<BufferEncoding>('latin1', 'utf8', 'base64url'), async (bytes, encoding) => {
      await expectRefused(Buffer.from(bytes).toString(encoding));
    }), { seed: SEED + 1, numRuns: RAW_RUNS });
  });

  it('random dot-separated base64url segments are refused with invalid_jwt, never a crash', async () => {
    await fc.assert(fc.asyncProperty(fc.array(segment, { minLength: 1, maxLength: 5 }), async (segments) => {
      await expectRefused(segments.join('.'));
    }), { seed: SEED + 2, numRuns: RAW_RUNS });
  });

  it('random JSON headers and claims under a signature nobody made are refused, never a crash and never an acceptance', async () => {
    const forged = fc.tuple(fc.oneof(jsonDocument(agentHeader()), jsonDocument(hostHeader())), fc.oneof(jsonDocument(agentClaims()), jsonDocument(hostClaims())), fc.oneof(segment, fc.constant('')));
    await fc.assert(fc.asyncProperty(forged, async ([header, claims, signature]) => {
      await expectRefused(`${b64(header)}.${b64(claims)}.${signature}`);
    }), { seed: SEED + 3, numRuns: CLAIM_RUNS });
  });

  it('an agent JWT signed by the agent with one or more rules broken is refused with invalid_jwt', async () => {
    await fc.assert(fc.asyncProperty(breakages(AGENT_BREAKAGES), neutralClaims, async (names, extra) => {
      const t: Token = { kind: 'agent', header: agentHeader(), claims: { ...extra, ...agentClaims() } };
      for (const name of names) (BREAKAGES[name] ?? AGENT_BREAKAGES[name])!(t);
      const verdict = await asAgent(tokenOf(t, agentKey));
      expect(verdict, names.join(', ')).toMatchObject({ accepted: false, code: 'invalid_jwt' });
    }), { seed: SEED + 4, numRuns: CLAIM_RUNS });
  });

  it('a host JWT signed by the registered host with one or more rules broken is refused with invalid_jwt', async () => {
    await fc.assert(fc.asyncProperty(breakages({}), neutralClaims, async (names, extra) => {
      const t: Token = { kind: 'host', header: hostHeader(), claims: { ...extra, ...hostClaims() } };
      for (const name of names) BREAKAGES[name]!(t);
      const verdict = await asHost(tokenOf(t, hostKey));
      // A changed iss makes the host unknown, so its refusal may come from the self-presented key rules.
      expect(verdict, names.join(', ')).toMatchObject({ accepted: false });
      expect(HOST_CODES, names.join(', ')).toContain((verdict as { code?: string }).code);
      if (!names.some((n) => n.startsWith('iss'))) expect((verdict as { code?: string }).code, names.join(', ')).toBe('invalid_jwt');
    }), { seed: SEED + 5, numRuns: CLAIM_RUNS });
  });

  it('an unknown host presenting a random key in host_public_key is refused with invalid_jwt, invalid_request or unsupported_algorithm', async () => {
    const presented = fc.oneof(
      jsonValue,
      fc.record({ kty: fc.constantFrom('OKP', 'EC', 'RSA', 'oct', 'x'), crv: fc.constantFrom('Ed25519', 'P-256', 'X25519', 'secp256k1'), x: segment, y: segment, d: fc.option(segment, { nil: undefined }) }, { requiredKeys: ['kty'] }),
    );
    await fc.assert(fc.asyncProperty(presented, fc.boolean(), async (jwk, selfSigned) => {
      const stranger = newSigner();
      const claims = { ...hostClaims(), iss: selfSigned ? stranger.thumbprint : hostKey.thumbprint.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')), host_public_key: jwk };
      const verdict = await asHost(tokenOf({ kind: 'host', header: hostHeader(), claims }, stranger));
      expect(verdict).toMatchObject({ accepted: false });
      expect(HOST_CODES).toContain((verdict as { code?: string }).code);
    }), { seed: SEED + 6, numRuns: 150 });
  });

  it('the shared rules alone (decode, time and jti) answer any header and claims with a result or an ApiError', () => {
    const rules = { nowSeconds: NOW_SECONDS, maxLifetimeSeconds: 60, skewSeconds: 30 };
    fc.assert(fc.property(jsonDocument(agentHeader()), jsonDocument(agentClaims()), (header, claims) => {
      const token = `${b64(header)}.${b64(claims)}.sig`;
      try {
        const decoded = decodeJwt(token, 'agent+jwt');
        const { exp, iat, jti } = checkTimeAndJti(decoded.claims, rules);
        // What passed is what DESIGN §4 allows: finite times, a bounded lifetime, within the skew.
        expect(Number.isFinite(exp) && Number.isFinite(iat) && exp > iat && exp - iat <= 60).toBe(true);
        expect(iat <= NOW_SECONDS + 30 && exp + 30 > NOW_SECONDS && jti.length >= 1 && jti.length <= 256).toBe(true);
      } catch (err) {
        expect(err).toBeInstanceOf(ApiError);
        expect((err as ApiError).code).toBe('invalid_jwt');
      }
    }), { seed: SEED + 7, numRuns: CLAIM_RUNS });
  });
});
