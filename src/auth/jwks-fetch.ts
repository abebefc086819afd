// Fetching a JWK Set from a URL that an untrusted caller named (a host or an agent delivering its
// public key as a JWKS URL). This is the one place agentgate makes an outbound request to an address
// somebody else chose, which is the classic server-side request forgery hole: the caller names
// http://169.254.169.254/ or a name that resolves to 10.0.0.5, and our server fetches from inside
// the network on their behalf. Every rule below closes one way of doing that:
//
//   1. Only https: URLs without credentials, checked before any I/O.
//   2. The host name is resolved once and EVERY address it resolves to is checked against the
//      private, loopback, link-local, reserved and documentation ranges (isForbiddenAddress); one
//      bad address refuses the whole URL. An operator may allow some ranges explicitly.
//   3. The connection goes to the exact address that was checked (we connect by IP, with the host
//      name as the TLS server name and Host header), so DNS cannot answer differently between the
//      check and the connection (DNS rebinding).
//   4. Redirects are followed at most maxRedirects times, each target checked afresh as in 1 and 2.
//   5. The body is capped while it streams, and a declared Content-Length over the cap is refused
//      before reading; only a 200 whose body parses as JSON is read further.
//   6. A per-connection connect limit (TCP and TLS handshake) and one deadline over the whole fetch,
//      so a server that never answers, or answers one byte at a time, cannot hold us.
//   7. The document must be a JWK Set of 1 to 20 public signature keys (validateJwkSet).
//   8. No cookies, no credentials, fixed Accept and User-Agent headers.
//   9. Every failure is a JwksFetchError whose message names the URL's origin only: paths and
//      queries of such URLs often carry tokens, and error messages end up in logs and responses.
//
// This module only fetches and validates; caching the result belongs to its caller.
import { createPublicKey } from 'node:crypto';
import { lookup as dnsLookup } from 'node:dns/promises';
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
import { isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import type { PublicJwk } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { isCanonicalBase64url, parsePublicJwk, publicJwkSchema } from './keys.ts';

export interface JwksFetchSettings {
  /** Whole fetch time limit (connect, TLS, headers, body), across redirects. */
  timeoutMs: number;
  /** Connect time limit per connection: the TCP connection and the TLS handshake. */
  connectTimeoutMs: number;
  /** Largest body accepted, bytes (default use: 1 MiB). */
  maxBytes: number;
  /** Redirects followed at most (3). Values above MAX_REDIRECTS_CEILING are treated as it. */
  maxRedirects: number;
  /**
   * Addresses (CIDR strings, IPv4 or IPv6) allowed even though private/loopback: an operator's
   * explicit opt-in. Empty by default. An entry that is not a valid CIDR allows nothing (validate
   * the configuration with parseCidr to report it).
   */
  allowedPrivateRanges: readonly string[];
  /** DNS resolution, injectable for tests; default node:dns/promises lookup with {all:true, order:'verbatim'}. */
  lookup?: (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;
  /** Extra CA certificates (PEM) trusted for TLS, for tests only; default: Node's bundled CAs. */
  ca?: string | Buffer | undefined;
}

/** The settings a caller uses unless configured otherwise. */
export const JWKS_FETCH_DEFAULTS: Readonly<JwksFetchSettings> = Object.freeze({
  timeoutMs: 5_000,
  connectTimeoutMs: 2_000,
  maxBytes: 1024 * 1024,
  maxRedirects: 3,
  allowedPrivateRanges: Object.freeze([]) as readonly string[],
});

/** Whatever maxRedirects says, no fetch follows more redirects than this, so the loop stays short. */
export const MAX_REDIRECTS_CEILING = 10;

/** The most keys a JWK Set may hold: enough for rotation overlap, too few to be a cost lever. */
export const MAX_KEYS_PER_SET = 20;

/** The fixed User-Agent, so a JWKS host can recognise (and rate-limit) our fetches. */
export const JWKS_USER_AGENT = 'agentgate-jwks-fetch';

const ACCEPT = 'application/jwk-set+json, application/json';

export type JwksFetchReason =
  | 'not_https'
  | 'forbidden_address'
  | 'dns'
  | 'too_many_redirects'
  | 'timeout'
  | 'too_large'
  | 'http_status'
  | 'not_json'
  | 'invalid_jwks'
  | 'network';

/** The only error fetchJwks and validateJwkSet throw. Its message never holds a URL's path or query. */
export class JwksFetchError extends Error {
  readonly reason: JwksFetchReason;

  constructor(reason: JwksFetchReason, message: string) {
    super(message);
    this.name = 'JwksFetchError';
    this.reason = reason;
  }
}

export interface ValidatedJwkSet {
  keys: Array<{ kid: string; jwk: PublicJwk }>;
}

// ---------------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------------

/** An IP address as its bytes: 4 for IPv4, 16 for IPv6. */
interface IpBytes {
  family: 4 | 6;
  bytes: Uint8Array;
}

/** A network: the first `prefix` bits of `bytes`. */
export interface Cidr {
  family: 4 | 6;
  bytes: Uint8Array;
  prefix: number;
}

/**
 * Parses an address in the forms Node's net.isIP accepts: dotted-decimal IPv4 without leading
 * zeros, and IPv6 (with `::`, an embedded dotted IPv4 tail, and a `%zone`, which is dropped). Any
 * other spelling (octal, hex, a single decimal number) is not an address here, so it is refused
 * by isForbiddenAddress rather than guessed at.
 */
function parseIp(text: string): IpBytes | null {
  const family = isIP(text);
  if (family === 4) return { family: 4, bytes: Uint8Array.from(text.split('.'), Number) };
  if (family !== 6) return null;
  const zone = text.indexOf('%');
  const bytes = parseIpv6(zone === -1 ? text : text.slice(0, zone));
  return bytes ? { family: 6, bytes } : null;
}

/** The 16 bytes of an IPv6 address that net.isIP already accepted; null if it is somehow not one. */
function parseIpv6(text: string): Uint8Array | null {
  const groupsOf = (part: string): number[] | null => {
    if (part === '') return [];
    const groups: number[] = [];
    for (const group of part.split(':')) {
      if (/^[0-9a-f]{1,4}$/i.test(group)) groups.push(Number.parseInt(group, 16));
      else if (isIP(group) === 4) {
        const [a = 0, b = 0, c = 0, d = 0] = group.split('.').map(Number);
        groups.push((a << 8) | b, (c << 8) | d);
      } else return null;
    }
    return groups;
  };
  const gap = text.indexOf('::');
  let groups: number[] | null;
  if (gap === -1) groups = groupsOf(text);
  else {
    const head = groupsOf(text.slice(0, gap));
    const tail = groupsOf(text.slice(gap + 2));
    if (!head || !tail || head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  }
  if (!groups || groups.length !== 8) return null;
  const bytes = new Uint8Array(16);
  groups.forEach((group, i) => {
    bytes[2 * i] = group >> 8;
    bytes[2 * i + 1] = group & 0xff;
  });
  return bytes;
}

/** Parses "address/prefix" (or a bare address, meaning just that address); null if invalid. */
export function parseCidr(text: string): Cidr | null {
  const [address = '', prefixText, extra] = text.trim().split('/');
  if (extra !== undefined || address.includes('%')) return null;
  const ip = parseIp(address);
  if (!ip) return null;
  const width = ip.family === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = prefixText === undefined ? width : Number(prefixText);
  if (prefix > width) return null;
  return { family: ip.family, bytes: ip.bytes, prefix };
}

/** A CIDR from our own constant tables; a typo there is a programming error, caught at load. */
function cidr(text: string): Cidr {
  const parsed = parseCidr(text);
  if (!parsed) throw new Error(`bad built-in CIDR ${text}`);
  return parsed;
}

/** Whether the first `prefix` bits of two byte strings agree. */
function samePrefix(a: Uint8Array, b: Uint8Array, prefix: number): boolean {
  const whole = Math.floor(prefix / 8);
  for (let i = 0; i < whole; i++) if (a[i] !== b[i]) return false;
  const rest = prefix % 8;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return ((a[whole] ?? 0) & mask) === ((b[whole] ?? 0) & mask);
}

function inRange(range: Cidr, ip: IpBytes): boolean {
  return range.family === ip.family && samePrefix(range.bytes, ip.bytes, range.prefix);
}

/**
 * IPv4 networks never fetched from: this host, loopback, the RFC 1918 private networks, CGNAT
 * shared space, link-local (which holds the 169.254.169.254 cloud metadata service), the IETF
 * protocol assignments, the three documentation networks, benchmarking, multicast, and the
 * reserved 240/4 (which includes the broadcast 255.255.255.255).
 */
const FORBIDDEN_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4',
  '240.0.0.0/4',
].map(cidr);

/**
 * IPv6 forms that carry an IPv4 address which is what the packets actually reach, so the embedded
 * address is judged instead: IPv4-mapped ::ffff:a.b.c.d (the kernel connects to a.b.c.d over
 * IPv4), the well-known NAT64 prefix 64:ff9b::/96 (a translator forwards to a.b.c.d), and 6to4
 * 2002:AABB:CCDD::/48 (a relay forwards to AA.BB.CC.DD). Each entry gives the byte offset of the
 * embedded address.
 */
const EMBEDDING_V6: ReadonlyArray<{ range: Cidr; offset: number }> = [
  { range: cidr('::ffff:0:0/96'), offset: 12 },
  { range: cidr('64:ff9b::/96'), offset: 12 },
  { range: cidr('2002::/16'), offset: 2 },
];

/**
 * Only global unicast (2000::/3) is ever fetched from over IPv6; everything outside it is refused
 * wholesale, which covers ::, ::1, the IPv4-compatible ::a.b.c.d, fe80::/10 link-local, the
 * deprecated fec0::/10 site-local, fc00::/7 unique local (where fd00:ec2::254, a cloud metadata
 * address, lives), ff00::/8 multicast and the local-use NAT64 prefix 64:ff9b:1::/48. Allowing only
 * the one block that the internet routes is safer than listing every block it does not.
 */
const GLOBAL_UNICAST_V6 = cidr('2000::/3');

/** Inside 2000::/3, still refused: Teredo (it tunnels to an IPv4 address we cannot judge) and the two documentation prefixes. */
const FORBIDDEN_GLOBAL_V6 = ['2001::/32', '2001:db8::/32', '3fff::/20'].map(cidr);

function ipv4Forbidden(ip: IpBytes): boolean {
  return FORBIDDEN_V4.some((range) => inRange(range, ip));
}

/** The IPv4 address an IPv6 address forwards to (EMBEDDING_V6), if it is one of those forms. */
function embeddedIpv4(ip: IpBytes): IpBytes | null {
  if (ip.family !== 6) return null;
  for (const { range, offset } of EMBEDDING_V6) {
    if (inRange(range, ip)) return { family: 4, bytes: ip.bytes.slice(offset, offset + 4) };
  }
  return null;
}

function ipForbidden(ip: IpBytes): boolean {
  if (ip.family === 4) return ipv4Forbidden(ip);
  const embedded = embeddedIpv4(ip);
  if (embedded) return ipv4Forbidden(embedded);
  if (!inRange(GLOBAL_UNICAST_V6, ip)) return true;
  return FORBIDDEN_GLOBAL_V6.some((range) => inRange(range, ip));
}

/**
 * Whether an address must never be fetched from (unless an operator allowed its range). Anything
 * that is not an address in a form net.isIP accepts is forbidden too: a resolver answer we cannot
 * read is not one we may connect to. Pure.
 */
export function isForbiddenAddress(address: string): boolean {
  const ip = parseIp(address);
  return ip === null || ipForbidden(ip);
}

/**
 * Whether an operator's range covers an address. An IPv4-mapped IPv6 address is the IPv4 address
 * it maps (the kernel connects to that), so an IPv4 range covers it too.
 */
function rangeCovers(range: Cidr, ip: IpBytes): boolean {
  if (inRange(range, ip)) return true;
  if (range.family === 4 && ip.family === 6 && inRange(EMBEDDING_V6[0]!.range, ip)) {
    return inRange(range, { family: 4, bytes: ip.bytes.slice(12, 16) });
  }
  return false;
}

/** Whether fetchJwks may connect to an address, given the operator's allowed ranges. */
export function isAllowedAddress(address: string, allowedRanges: readonly Cidr[]): boolean {
  const ip = parseIp(address);
  if (!ip) return false;
  return !ipForbidden(ip) || allowedRanges.some((range) => rangeCovers(range, ip));
}

// ---------------------------------------------------------------------------------------------
// JWK Set validation
// ---------------------------------------------------------------------------------------------

/** Members that only a private or symmetric key has (RFC 7518 §6.2.2, §6.3.2, §6.4.1). */
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const;

/** Coordinate length in bytes for each EC curve we accept (RFC 7518 §6.2.1.2). */
const EC_COORDINATE_BYTES: Readonly<Record<string, number>> = { 'P-256': 32, 'P-384': 48, 'P-521': 66 };

const MIN_RSA_BITS = 2048;
const MAX_KID_CHARS = 256;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

function invalid(message: string): JwksFetchError {
  return new JwksFetchError('invalid_jwks', message);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Runs keys.ts's parsePublicJwk and turns its ApiError into our error, under our label. */
function parseWithKeysTs(value: Record<string, unknown>, supported: string, label: string): PublicJwk {
  try {
    return parsePublicJwk(value, [supported], label).jwk;
  } catch (error) {
    if (error instanceof ApiError) throw invalid(error.message);
    throw error;
  }
}

/** Whether Node's crypto imports a public JWK; for EC keys this also checks the point is on the curve. */
function importable(jwk: PublicJwk): boolean {
  try {
    createPublicKey({ key: { ...jwk }, format: 'jwk' });
    return true;
  } catch {
    return false;
  }
}

/** Bit length of a big-endian unsigned integer whose first byte is not zero. */
function bitLength(bytes: Uint8Array): number {
  const first = bytes[0] ?? 0;
  return first === 0 ? 0 : (bytes.length - 1) * 8 + (32 - Math.clz32(first));
}

/**
 * A Base64urlUInt (RFC 7518 §2) as its bytes: canonical base64url with no leading zero octet, so
 * each number has exactly one spelling and so one RFC 7638 thumbprint.
 */
function unsignedInteger(text: string | undefined, label: string, member: string): Uint8Array {
  if (text === undefined || !BASE64URL.test(text) || !isCanonicalBase64url(text)) {
    throw invalid(`${label} "${member}" must be canonical base64url`);
  }
  const bytes = Buffer.from(text, 'base64url');
  if (bytes[0] === 0) throw invalid(`${label} "${member}" must not start with a zero octet`);
  return bytes;
}

function validateEc(value: Record<string, unknown>, raw: { crv?: string | undefined; x?: string | undefined; y?: string | undefined }, label: string): PublicJwk {
  let jwk: PublicJwk;
  if (raw.crv === 'P-256') {
    // keys.ts already checks P-256 keys as agentgate accepts them at registration.
    jwk = parseWithKeysTs(value, 'P-256', label);
  } else {
    const size = raw.crv === undefined ? undefined : EC_COORDINATE_BYTES[raw.crv];
    if (size === undefined || raw.crv === undefined) throw invalid(`${label} is an EC key on an unsupported curve (P-256, P-384 or P-521 only)`);
    for (const coordinate of [raw.x, raw.y]) {
      if (coordinate === undefined || !isCanonicalBase64url(coordinate) || Buffer.from(coordinate, 'base64url').length !== size) {
        throw invalid(`${label} is not a valid ${raw.crv} public key (x and y must be canonical base64url of ${size} bytes)`);
      }
    }
    jwk = { kty: 'EC', crv: raw.crv, x: raw.x!, y: raw.y! };
  }
  // keys.ts does not check that a P-256 point lies on the curve; a point off it is refused here.
  if (!importable(jwk)) throw invalid(`${label} is not a valid ${raw.crv} public key (not a point on the curve)`);
  return jwk;
}

function validateRsa(raw: { n?: string | undefined; e?: string | undefined }, label: string): PublicJwk {
  const n = unsignedInteger(raw.n, label, 'n');
  const e = unsignedInteger(raw.e, label, 'e');
  const bits = bitLength(n);
  if (bits < MIN_RSA_BITS) throw invalid(`${label} is an RSA key of ${bits} bits; at least ${MIN_RSA_BITS} are required`);
  // An even or tiny public exponent is not an RSA key anyone should sign with.
  if (((e[e.length - 1] ?? 0) & 1) === 0 || (e.length === 1 && (e[0] ?? 0) < 3)) throw invalid(`${label} has an invalid RSA public exponent`);
  const jwk: PublicJwk = { kty: 'RSA', n: raw.n!, e: raw.e! };
  if (!importable(jwk)) throw invalid(`${label} is not a valid RSA public key`);
  return jwk;
}

/** Validates one member of `keys` and returns its kid and only its public members. */
function validateJwk(value: unknown, label: string): { kid: string; jwk: PublicJwk } {
  if (!isObject(value)) throw invalid(`${label} is not a JSON object`);
  // A JWKS must publish public keys only: a private member means the publisher leaked its private
  // key (or is handing us a shared secret), and trusting such a key proves nothing about the signer.
  for (const member of PRIVATE_MEMBERS) {
    if (Object.hasOwn(value, member)) throw invalid(`${label} holds private or secret key material ("${member}"); a JWKS must publish public keys only`);
  }
  const kid = value.kid;
  if (typeof kid !== 'string' || kid.length === 0 || kid.length > MAX_KID_CHARS) {
    throw invalid(`${label} must have a "kid" of 1 to ${MAX_KID_CHARS} characters`);
  }
  if (Object.hasOwn(value, 'use') && value.use !== 'sig') throw invalid(`${label} has "use" other than "sig"; only signature keys are accepted`);
  // The same member bounds keys.ts applies to a key given inline.
  const parsed = publicJwkSchema.safeParse(value);
  if (!parsed.success) throw invalid(`${label} is not a well-formed JWK`);
  const raw = parsed.data;
  switch (raw.kty) {
    case 'OKP':
      if (raw.crv !== 'Ed25519') throw invalid(`${label} is an OKP key that is not Ed25519`);
      // keys.ts checks the length, the canonical spelling, and refuses small-order and
      // non-canonical points (SECURITY.md).
      return { kid, jwk: parseWithKeysTs(value, 'Ed25519', label) };
    case 'EC':
      return { kid, jwk: validateEc(value, raw, label) };
    case 'RSA':
      return { kid, jwk: validateRsa(raw, label) };
    case 'oct':
      throw invalid(`${label} is a symmetric (oct) key, a shared secret rather than a public key`);
    default:
      throw invalid(`${label} has an unsupported "kty" (OKP, EC or RSA only)`);
  }
}

/**
 * Validates a parsed JSON JWK Set: an object whose `keys` holds 1 to MAX_KEYS_PER_SET public
 * signature keys (Ed25519; EC P-256, P-384, P-521; RSA of at least 2048 bits), each with a distinct
 * non-empty kid and no private members. Members we do not know are ignored; the result holds only
 * each key's kid and public members. Pure. Throws JwksFetchError('invalid_jwks').
 */
export function validateJwkSet(json: unknown): ValidatedJwkSet {
  if (!isObject(json)) throw invalid('the JWK Set is not a JSON object');
  const keys = json.keys;
  if (!Array.isArray(keys)) throw invalid('the JWK Set has no "keys" array');
  if (keys.length === 0) throw invalid('the JWK Set holds no keys');
  if (keys.length > MAX_KEYS_PER_SET) throw invalid(`the JWK Set holds ${keys.length} keys; at most ${MAX_KEYS_PER_SET} are accepted`);
  const seen = new Set<string>();
  const result: ValidatedJwkSet = { keys: [] };
  keys.forEach((value: unknown, index) => {
    const key = validateJwk(value, `keys[${index}]`);
    // Two keys under one kid would let the publisher choose, per token, which one a kid means.
    if (seen.has(key.kid)) throw invalid(`keys[${index}] repeats the "kid" of an earlier key`);
    seen.add(key.kid);
    result.keys.push(key);
  });
  return result;
}

// ---------------------------------------------------------------------------------------------
// Fetching
// ---------------------------------------------------------------------------------------------

/** An address that passed the checks, to connect to exactly. */
interface CheckedAddress {
  address: string;
  family: 4 | 6;
}

/** Redirect statuses that carry a Location to follow; other 3xx answers are refused. */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/**
 * How many of a host's addresses one hop tries when connecting fails before a TCP connection
 * exists (refused, unreachable, connect timeout): a name with an IPv6 address first still works
 * from a host without IPv6. All addresses are checked before the first attempt regardless.
 */
const MAX_CONNECT_ATTEMPTS = 4;

/** One deadline over the whole fetch: its signal aborts whatever step is running when it passes. */
class Deadline {
  readonly signal: AbortSignal;
  readonly ms: number;
  private readonly timer: NodeJS.Timeout;

  constructor(ms: number) {
    const controller = new AbortController();
    this.signal = controller.signal;
    this.ms = ms;
    // A non-finite or non-positive limit becomes Node's 1 ms, so a bad setting fails closed.
    this.timer = setTimeout(() => controller.abort(), ms);
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

/** How an error message names a URL: its origin (scheme, host, port), never its path or query. */
function named(url: URL): string {
  return `JWKS URL ${url.origin}`;
}

function timeoutError(url: URL, deadline: Deadline): JwksFetchError {
  return new JwksFetchError('timeout', `${named(url)}: the fetch did not finish within ${deadline.ms} ms`);
}

/** A node error's code (ECONNREFUSED, ERR_TLS_CERT_ALTNAME_INVALID, ...), never its free text. */
function errorCode(error: unknown): string {
  const code = isObject(error) ? error.code : undefined;
  return typeof code === 'string' && /^[A-Z0-9_]{1,64}$/.test(code) ? code : 'connection error';
}

/**
 * Checks a URL before anything is sent anywhere: https only, no user or password in it. `context`
 * prefixes messages about a redirect target.
 */
function checkUrl(url: URL, context: string): URL {
  if (url.protocol !== 'https:') {
    // Only http: has an origin worth naming; other schemes (file:, ftp:, data:, ...) have none.
    const what = url.protocol === 'http:' ? `${url.origin} uses plain http` : 'the URL does not use https';
    throw new JwksFetchError('not_https', `${context}${what}; only https JWKS URLs are fetched`);
  }
  if (url.username !== '' || url.password !== '') {
    throw new JwksFetchError('not_https', `${context}${url.origin}: a JWKS URL must not carry a user name or password`);
  }
  return url;
}

/** The host name of a URL without the brackets around an IPv6 literal. */
function bareHost(url: URL): string {
  const host = url.hostname;
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

async function systemLookup(hostname: string): Promise<Array<{ address: string; family: 4 | 6 }>> {
  const answers = await dnsLookup(hostname, { all: true, order: 'verbatim' });
  return answers.map((answer) => ({ address: answer.address, family: answer.family === 6 ? 6 : 4 }));
}

/** Waits for a promise unless the deadline passes first; the promise is left to settle unobserved. */
function beforeDeadline<T>(promise: Promise<T>, deadline: Deadline, onTimeout: () => JwksFetchError): Promise<T> {
  if (deadline.signal.aborted) return Promise.reject(onTimeout());
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(onTimeout());
    deadline.signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        deadline.signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        deadline.signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * Resolves a URL's host (unless it is an IP literal) and checks every address it gives. One
 * forbidden address refuses the URL: otherwise a name answering both a public and a private address
 * would reach the private one whenever the public one is chosen second.
 */
async function resolveAndCheck(url: URL, settings: JwksFetchSettings, allowed: readonly Cidr[], deadline: Deadline, context: string): Promise<CheckedAddress[]> {
  const host = bareHost(url);
  let answers: unknown;
  if (isIP(host) !== 0) {
    answers = [{ address: host, family: isIP(host) }];
  } else {
    try {
      answers = await beforeDeadline((settings.lookup ?? systemLookup)(host), deadline, () => timeoutError(url, deadline));
    } catch (error) {
      if (error instanceof JwksFetchError) throw error;
      throw new JwksFetchError('dns', `${context}${url.origin}: the host name could not be resolved (${errorCode(error)})`);
    }
  }
  if (!Array.isArray(answers) || answers.length === 0) {
    throw new JwksFetchError('dns', `${context}${url.origin}: the host name resolved to no address`);
  }
  const checked: CheckedAddress[] = [];
  for (const answer of answers as unknown[]) {
    const address = isObject(answer) && typeof answer.address === 'string' ? answer.address : '';
    if (!isAllowedAddress(address, allowed)) {
      const shown = isIP(address) !== 0 ? address : 'something that is not an IP address';
      throw new JwksFetchError('forbidden_address', `${context}${url.origin}: resolves to ${shown}, a private, loopback, link-local or reserved address, which is never fetched`);
    }
    checked.push({ address, family: isIP(address) === 6 ? 6 : 4 });
  }
  return checked;
}

type HopOutcome = { kind: 'body'; body: Buffer } | { kind: 'redirect'; location: string };

/** A failure that happened before any TCP connection existed, so the next address may be tried. */
class BeforeConnect {
  readonly error: JwksFetchError;
  constructor(error: JwksFetchError) {
    this.error = error;
  }
}

/**
 * One request to one checked address. The socket goes to `target.address` itself (Node does no DNS
 * lookup for an IP host), while the TLS server name, the certificate check, and the Host header use
 * the URL's host name, so the certificate must still be valid for the name the caller gave.
 */
function requestOnce(url: URL, target: CheckedAddress, settings: JwksFetchSettings, deadline: Deadline): Promise<HopOutcome> {
  return new Promise<HopOutcome>((resolve, reject) => {
    const host = bareHost(url);
    let settled = false;
    let tcpConnected = false;
    const req = request({
      host: target.address,
      family: target.family,
      port: url.port === '' ? 443 : Number(url.port),
      path: `${url.pathname}${url.search}`,
      method: 'GET',
      // Exactly these headers: no cookies, no Authorization, no Accept-Encoding (so no compressed
      // body whose expanded size the byte cap would not see).
      headers: { host: url.host, accept: ACCEPT, 'user-agent': JWKS_USER_AGENT },
      // SNI carries host names only; for an IP literal the certificate is checked against the IP.
      ...(isIP(host) === 0 ? { servername: host } : {}),
      // Explicit, so NODE_TLS_REJECT_UNAUTHORIZED=0 in the environment cannot turn checking off.
      rejectUnauthorized: true,
      minVersion: 'TLSv1.2',
      ...(settings.ca === undefined ? {} : { ca: [...rootCertificates, settings.ca] }),
      // A fresh connection for every request: a pooled one could belong to another address.
      agent: false,
    });

    const cleanup = () => {
      clearTimeout(connectTimer);
      deadline.signal.removeEventListener('abort', onDeadline);
    };
    const fail = (error: JwksFetchError, beforeConnect = false) => {
      if (settled) return;
      settled = true;
      cleanup();
      req.destroy();
      reject(beforeConnect ? new BeforeConnect(error) : error);
    };
    const succeed = (outcome: HopOutcome) => {
      if (settled) return;
      settled = true;
      cleanup();
      req.destroy();
      resolve(outcome);
    };
    const onDeadline = () => fail(timeoutError(url, deadline));

    // The connect limit runs until the TLS handshake completes: a server that accepts the TCP
    // connection and then says nothing is as stuck as one that never accepts it.
    const connectTimer = setTimeout(
      () => fail(new JwksFetchError('timeout', `${named(url)}: connecting to ${target.address} did not complete within ${settings.connectTimeoutMs} ms`), !tcpConnected),
      settings.connectTimeoutMs,
    );
    deadline.signal.addEventListener('abort', onDeadline, { once: true });
    if (deadline.signal.aborted) onDeadline();

    req.on('socket', (socket) => {
      socket.once('connect', () => {
        tcpConnected = true;
      });
      socket.once('secureConnect', () => clearTimeout(connectTimer));
    });
    req.on('error', (error) => {
      fail(new JwksFetchError('network', `${named(url)}: the request to ${target.address} failed (${errorCode(error)})`), !tcpConnected);
    });
    req.on('response', (res: IncomingMessage) => {
      res.on('error', (error) => fail(new JwksFetchError('network', `${named(url)}: reading the answer failed (${errorCode(error)})`)));
      const status = res.statusCode ?? 0;
      if (REDIRECT_STATUSES.has(status)) {
        const location = res.headers.location;
        if (typeof location !== 'string' || location === '') {
          fail(new JwksFetchError('http_status', `${named(url)}: answered HTTP ${status} without a Location`));
          return;
        }
        succeed({ kind: 'redirect', location });
        return;
      }
      if (status !== 200) {
        fail(new JwksFetchError('http_status', `${named(url)}: answered HTTP ${status}; only 200 is accepted`));
        return;
      }
      const tooLarge = () => new JwksFetchError('too_large', `${named(url)}: the JWK Set is larger than ${settings.maxBytes} bytes`);
      const declared = res.headers['content-length'];
      if (declared !== undefined && /^\d+$/.test(declared) && Number(declared) > settings.maxBytes) {
        fail(tooLarge());
        return;
      }
      // The cap is counted as bytes arrive, whatever Content-Length said (or if it said nothing).
      const chunks: Buffer[] = [];
      let total = 0;
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        total += chunk.length;
        if (total > settings.maxBytes) {
          fail(tooLarge());
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => succeed({ kind: 'body', body: Buffer.concat(chunks, total) }));
    });
    req.end();
  });
}

/** One hop: the checked addresses in order, the next one only when the last never connected. */
async function fetchHop(url: URL, addresses: readonly CheckedAddress[], settings: JwksFetchSettings, deadline: Deadline): Promise<HopOutcome> {
  const attempts = Math.min(addresses.length, MAX_CONNECT_ATTEMPTS);
  let last: JwksFetchError | undefined;
  for (let i = 0; i < attempts; i++) {
    try {
      return await requestOnce(url, addresses[i]!, settings, deadline);
    } catch (error) {
      if (!(error instanceof BeforeConnect)) throw error;
      last = error.error;
    }
  }
  throw last ?? new JwksFetchError('network', `${named(url)}: no address to connect to`);
}

/** The body as JSON: strict UTF-8 (content-type is not trusted, but the bytes must be JSON). */
function parseJson(body: Buffer, url: URL): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch {
    throw new JwksFetchError('not_json', `${named(url)}: the answer is not JSON`);
  }
}

async function fetchWithin(text: string, settings: JwksFetchSettings, deadline: Deadline): Promise<ValidatedJwkSet> {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new JwksFetchError('not_https', 'the JWKS URL is not a valid absolute URL');
  }
  checkUrl(url, '');
  const allowed = settings.allowedPrivateRanges.map(parseCidr).filter((range): range is Cidr => range !== null);
  const limit = Math.max(0, Math.min(Math.floor(settings.maxRedirects) || 0, MAX_REDIRECTS_CEILING));
  let context = '';
  // At most limit + 1 requests: the first, and one per redirect followed.
  for (let redirects = 0; redirects <= limit; redirects++) {
    const addresses = await resolveAndCheck(url, settings, allowed, deadline, context);
    const outcome = await fetchHop(url, addresses, settings, deadline);
    if (outcome.kind === 'body') {
      const json = parseJson(outcome.body, url);
      try {
        return validateJwkSet(json);
      } catch (error) {
        if (error instanceof JwksFetchError) throw new JwksFetchError(error.reason, `${named(url)}: ${error.message}`);
        throw error;
      }
    }
    if (redirects === limit) {
      throw new JwksFetchError('too_many_redirects', `${named(url)}: redirected more than ${limit} times`);
    }
    let next: URL;
    try {
      next = new URL(outcome.location, url);
    } catch {
      throw new JwksFetchError('http_status', `${named(url)}: redirected to something that is not a URL`);
    }
    context = `${named(url)} redirected to `;
    url = checkUrl(next, context);
  }
  // The loop returns or throws on its last turn; this only satisfies the compiler.
  throw new JwksFetchError('too_many_redirects', `${named(url)}: redirected more than ${limit} times`);
}

/**
 * Fetches and validates a JWK Set from an https URL an untrusted caller named, under the rules at
 * the top of this file. Never throws anything but JwksFetchError.
 */
export async function fetchJwks(url: string, settings: JwksFetchSettings): Promise<ValidatedJwkSet> {
  const deadline = new Deadline(settings.timeoutMs);
  try {
    return await fetchWithin(url, settings, deadline);
  } catch (error) {
    if (error instanceof JwksFetchError) throw error;
    // Nothing else is expected; the thrown value's text is not repeated, since it could hold the URL.
    throw new JwksFetchError('network', 'the JWKS fetch failed unexpectedly');
  } finally {
    deadline.clear();
  }
}
