// Pure checks on the two URLs an OpenID Connect sign-in trusts: the provider's issuer, which decides
// whether we may talk to it over plain http, and the path a person returns to after signing in,
// which must never send them to another site (an open redirect would let a phishing link borrow
// agentgate's sign-in to look genuine).

/**
 * The longest return path we keep: every page of ours fits (the longest is the approval page with
 * its code, under 100 characters), and it rides in a cookie while the person signs in.
 */
export const RETURN_TO_MAX_CHARS = 512;

/** A placeholder origin to resolve a return path against; it is never contacted. */
const PLACEHOLDER_ORIGIN = 'https://agentgate.invalid';

interface IssuerPolicy {
  url: URL;
  /** True when the issuer is plain http on a loopback address, the only case we allow without TLS. */
  insecureLoopback: boolean;
}

/**
 * Parses the issuer and decides whether it may be used. Plain http is allowed only on loopback,
 * where no one else can see or alter the traffic (a provider on the same machine, as in tests);
 * anywhere else an attacker on the path could swap the provider's keys or read the tokens.
 */
export function checkIssuer(issuer: string): IssuerPolicy {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new Error(`OpenID Connect issuer ${JSON.stringify(issuer)} is not a valid URL`);
  }
  if (url.protocol === 'https:') return { url, insecureLoopback: false };
  if (url.protocol === 'http:' && isLoopbackHost(url.hostname)) return { url, insecureLoopback: true };
  if (url.protocol === 'http:') {
    throw new Error(`OpenID Connect issuer ${issuer} uses plain http on a host that is not loopback; only https is allowed there`);
  }
  throw new Error(`OpenID Connect issuer ${issuer} must be an https URL`);
}

/** Loopback names and addresses: localhost, 127.0.0.0/8 and [::1]. Other private ranges are networks, not loopback. */
function isLoopbackHost(hostname: string): boolean {
  if (hostname === 'localhost' || hostname === '[::1]') return true;
  // The URL parser has already normalised IPv4 forms such as 127.1 or 0x7f.0.0.1 into dotted quads.
  const octets = hostname.split('.');
  return octets.length === 4 && octets[0] === '127' && octets.every((octet) => /^\d{1,3}$/.test(octet));
}

/**
 * Keeps a return path only if it stays on our own origin. A path must start with exactly one '/':
 * '//evil.example' and '/\evil.example' are read by browsers as another host. Resolving against a
 * placeholder origin catches every other trick (tabs and newlines the URL parser strips, encoded
 * forms) because a path that leaves the origin resolves to a different one.
 */
export function safeReturnTo(returnTo: string): string {
  if (typeof returnTo !== 'string' || returnTo.length === 0 || returnTo.length > RETURN_TO_MAX_CHARS) return '/';
  if (!returnTo.startsWith('/') || returnTo.startsWith('//') || returnTo.startsWith('/\\')) return '/';
  // Control characters have no place in a path of ours, and some parsers drop them silently.
  if (/[\u0000-\u001f\u007f\\]/.test(returnTo)) return '/';
  let resolved: URL;
  try {
    resolved = new URL(returnTo, PLACEHOLDER_ORIGIN);
  } catch {
    return '/';
  }
  if (resolved.origin !== PLACEHOLDER_ORIGIN) return '/';
  // Resolving removes dot segments, so '/.//evil.example' comes out as '//evil.example', which a
  // browser reads as another host: the result must pass the same test as the input.
  const path = `${resolved.pathname}${resolved.search}${resolved.hash}`;
  if (path.startsWith('//') || path.startsWith('/\\') || path.length > RETURN_TO_MAX_CHARS) return '/';
  return path;
}
