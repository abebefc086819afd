// People sign in through an OpenID Connect provider with the authorization code flow and PKCE
// (OpenID Connect Core 1.0 §3.1, RFC 7636). start() builds the authorization request and returns
// what the caller must keep server-side; finish() checks the callback against exactly that, exchanges
// the code, validates the ID token (signature, issuer, audience, nonce, auth_time) and names the person
// by issuer and subject. Email is never an identity: providers let people change it and some let
// anyone claim an unverified one.
import { timingSafeEqual } from 'node:crypto';
import * as client from 'openid-client';
import { classifyProviderError, describeError, SignInError } from './oidc-errors.ts';
import { z } from 'zod';
import { checkIssuer, RETURN_TO_MAX_CHARS, safeReturnTo } from './urls.ts';

export { SignInError, type SignInFailure } from './oidc-errors.ts';

export interface OidcSettings {
  issuer: string; // the provider's issuer URL (discovery at /.well-known/openid-configuration)
  clientId: string;
  clientSecret?: string; // absent: a public client (token_endpoint_auth_method none)
  redirectUri: string; // agentgate's callback URL, e.g. `${issuer}/signin/callback`
  freshSeconds: number; // max_age: a sign-in older than this is sent through the provider's login again
  timeoutMs: number; // every HTTP call to the provider is bounded by this
}

/**
 * What the caller keeps between start and finish (the pages keep it in the sealed sign-in cookie,
 * http/device/sign-in.ts, and check it against this schema when it comes back).
 */
export const pendingSignInSchema = z.object({
  state: z.string().max(256),
  nonce: z.string().max(256),
  codeVerifier: z.string().max(256),
  returnTo: z.string().max(RETURN_TO_MAX_CHARS),
  startedAtMs: z.number(),
});
type PendingSignIn = z.infer<typeof pendingSignInSchema>;

/** The person, identified by issuer and subject (never by email). */
interface SignedInPerson {
  personId: string; // `${issuer}|${sub}`, stable and issuer-qualified
  subject: string;
  issuer: string;
  name?: string;
  email?: string;
  /** The provider said the address is the person's (`email_verified: true`): only then does a login_hint name them. */
  emailVerified?: true;
  authTimeMs: number;
}

/** How a sign-in asks the provider. */
interface SignInOptions {
  /**
   * The person must enter their credentials now, whatever session the provider holds
   * (`prompt=login`, `max_age=0`): what adding a first passkey takes.
   */
  forceLogin?: boolean;
}

export interface OidcSignIn {
  /** Where to send the browser, and what to keep until the callback. returnTo must be a same-origin path (starts with a single '/'); anything else becomes '/'. */
  start(returnTo: string, options?: SignInOptions): Promise<{ redirectUrl: string; pending: PendingSignIn }>;
  /** Completes the callback (the full callback URL the browser arrived at) against what start() kept; throws SignInError on any failure (state mismatch, provider error, nonce, stale auth_time, timeouts). */
  finish(callbackUrl: URL, pending: PendingSignIn): Promise<SignedInPerson>;
}

/** A person has this long between being sent to the provider and coming back; longer suggests a stolen or forgotten link. */
export const PENDING_SIGN_IN_MAX_AGE_MS = 10 * 60 * 1000;

/**
 * How far the provider's clock may differ from ours when openid-client checks iat, exp and
 * auth_time. The library's default of 30 s would quietly stretch a short freshness window by half a
 * minute; servers synchronised by NTP agree to well under a second, so a few seconds is enough.
 */
const CLOCK_TOLERANCE_SECONDS = 5;

/** Start times from a machine whose clock runs slightly ahead (another agentgate instance) are still accepted. */
const PENDING_CLOCK_SKEW_MS = CLOCK_TOLERANCE_SECONDS * 1000;

/** The identity (openid) plus what we show of the person: a display name and an email address. */
const SCOPE = 'openid profile email';

/**
 * Runs discovery once and returns a sign-in bound to the discovered provider. Discovery failures
 * stop start-up with a message naming the issuer, because a provider that cannot be found means
 * nobody can approve anything and the operator needs to know which setting to fix.
 */
export async function createOidcSignIn(settings: OidcSettings): Promise<OidcSignIn> {
  checkSettings(settings);
  const { url, insecureLoopback } = checkIssuer(settings.issuer);
  const redirectUri = new URL(settings.redirectUri);
  const clientAuth = settings.clientSecret === undefined ? client.None() : client.ClientSecretBasic(settings.clientSecret);
  // The clock tolerance has to be part of the metadata given to discovery: openid-client copies the
  // metadata into the configuration then, and a later change is not seen by the token checks.
  const metadata: Partial<client.ClientMetadata> = { [client.clockTolerance]: CLOCK_TOLERANCE_SECONDS };
  let config: client.Configuration;
  try {
    config = await client.discovery(url, settings.clientId, metadata, clientAuth, {
      // openid-client counts in seconds; the same value bounds every later request made with this configuration.
      timeout: settings.timeoutMs / 1000,
      // Plain http only for a provider on loopback (checkIssuer refused it anywhere else).
      ...(insecureLoopback ? { execute: [client.allowInsecureRequests] } : {}),
    });
  } catch (err) {
    throw new Error(`OpenID Connect discovery for ${settings.issuer} failed: ${describeError(err)}`, { cause: err });
  }
  return {
    start: (returnTo, options) => start(config, settings, redirectUri, returnTo, options ?? {}),
    finish: (callbackUrl, pending) => finish(config, settings, redirectUri, callbackUrl, pending),
  };
}

function checkSettings(settings: OidcSettings): void {
  const problems: string[] = [];
  if (!settings.clientId) problems.push('clientId is empty');
  if (!Number.isInteger(settings.freshSeconds) || settings.freshSeconds < 0) problems.push('freshSeconds must be a whole number of seconds, 0 or more');
  if (!Number.isFinite(settings.timeoutMs) || settings.timeoutMs <= 0) problems.push('timeoutMs must be a positive number of milliseconds');
  if (!URL.canParse(settings.redirectUri)) problems.push('redirectUri is not a valid URL');
  if (problems.length > 0) throw new Error(`OpenID Connect settings for ${settings.issuer} are invalid: ${problems.join('; ')}`);
}

async function start(
  config: client.Configuration, settings: OidcSettings, redirectUri: URL, returnTo: string, options: SignInOptions,
): Promise<{ redirectUrl: string; pending: PendingSignIn }> {
  // PKCE binds the code to this browser's session, state binds the callback to it, and the nonce
  // binds the ID token to it; all three are sent even though PKCE alone would stop code injection,
  // because providers that ignore PKCE still honour state and nonce.
  const codeVerifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const redirectUrl = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri.href,
    scope: SCOPE,
    code_challenge: await client.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
    state,
    nonce,
    // max_age makes the provider re-prompt when its session is older, and makes it return
    // auth_time, which finish() then checks against the same window. A forced login asks for the
    // credentials now (prompt=login, and max_age=0 for providers that honour only that); the caller
    // checks that auth_time fell within this sign-in.
    ...(options.forceLogin ? { prompt: 'login', max_age: '0' } : { max_age: String(settings.freshSeconds) }),
  });
  return { redirectUrl: redirectUrl.href, pending: { state, nonce, codeVerifier, returnTo: safeReturnTo(returnTo), startedAtMs: Date.now() } };
}

async function finish(config: client.Configuration, settings: OidcSettings, redirectUri: URL, callbackUrl: URL, pending: PendingSignIn): Promise<SignedInPerson> {
  // The cheap local checks come first, so a stale or forged callback never reaches the provider.
  checkPending(pending, Date.now());
  const returnedState = callbackUrl.searchParams.get('state');
  if (returnedState === null || !sameString(returnedState, pending.state)) throw new SignInError('state_mismatch');
  const providerError = callbackUrl.searchParams.get('error');
  if (providerError !== null) throw new SignInError('provider_denied', { cause: new Error(`the provider answered error=${providerError}`) });

  // The code is exchanged against our registered redirect URI, not the host and scheme the request
  // happened to arrive with (a proxy or a forged Host header can change those); only the query
  // parameters of the callback are taken.
  const callback = new URL(redirectUri);
  callback.search = callbackUrl.search;
  let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
  try {
    tokens = await client.authorizationCodeGrant(config, callback, {
      pkceCodeVerifier: pending.codeVerifier,
      expectedState: pending.state,
      expectedNonce: pending.nonce,
      maxAge: settings.freshSeconds,
      idTokenExpected: true,
    });
  } catch (err) {
    throw classifyProviderError(err);
  }
  const claims = tokens.claims();
  if (claims === undefined || typeof claims.auth_time !== 'number') {
    throw new SignInError('invalid_response', { cause: new Error('the ID token carries no auth_time') });
  }
  const profile = await readProfile(config, tokens.access_token, claims);
  const issuer = claims.iss;
  return { personId: `${issuer}|${claims.sub}`, subject: claims.sub, issuer, ...profile, authTimeMs: claims.auth_time * 1000 };
}

function checkPending(pending: PendingSignIn, nowMs: number): void {
  const wellFormed =
    typeof pending === 'object' &&
    pending !== null &&
    [pending.state, pending.nonce, pending.codeVerifier].every((value) => typeof value === 'string' && value.length > 0) &&
    Number.isFinite(pending.startedAtMs);
  if (!wellFormed) throw new SignInError('expired', { cause: new Error('the pending sign-in is missing or malformed') });
  const ageMs = nowMs - pending.startedAtMs;
  if (ageMs > PENDING_SIGN_IN_MAX_AGE_MS || ageMs < -PENDING_CLOCK_SKEW_MS) {
    throw new SignInError('expired', { cause: new Error(`the pending sign-in is ${ageMs} ms old`) });
  }
}

/** Compares two strings without revealing through timing how much of them matched. */
function sameString(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/**
 * Name and email for display. Most providers leave them out of the ID token (oidc-provider does by
 * default), so the UserInfo endpoint is asked when either is missing; openid-client checks that
 * its answer is about the same subject, and the configured timeout bounds the call.
 */
async function readProfile(config: client.Configuration, accessToken: string, claims: client.IDToken): Promise<{ name?: string; email?: string; emailVerified?: true }> {
  let source: Record<string, unknown> = claims;
  const incomplete = typeof claims.name !== 'string' || typeof claims.email !== 'string';
  if (incomplete && config.serverMetadata().userinfo_endpoint !== undefined) {
    try {
      source = { ...(await client.fetchUserInfo(config, accessToken, claims.sub)), ...claims };
    } catch (err) {
      throw classifyProviderError(err);
    }
  }
  const profile: { name?: string; email?: string; emailVerified?: true } = {};
  if (typeof source.name === 'string') profile.name = source.name;
  // An address the provider itself says is unverified is left out, so nothing downstream shows or
  // mails an address the person may not own.
  if (typeof source.email === 'string' && source.email_verified !== false) profile.email = source.email;
  if (profile.email !== undefined && source.email_verified === true) profile.emailVerified = true;
  return profile;
}
