// People sign in through OpenID Connect (authorization code + PKCE, OpenID Connect Core 1.0 §3.1),
// against a real oidc-provider on loopback. Each test names the guarantee it protects; the browser's
// part is played by signInHeadless.
import { createHash } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createOidcSignIn, PENDING_SIGN_IN_MAX_AGE_MS, SignInError, type OidcSettings, type SignInFailure } from '../../src/people/sign-in/oidc.ts';
import { CookieJar, signInHeadless, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';

// The provider redirects here; signInHeadless stops at the redirect, so nothing needs to listen.
const REDIRECT_URI = 'http://localhost:3000/signin/callback';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/**
 * How long after its 300 ms timeout a call to a silent provider may still end. Generous for a busy
 * machine, and still far under the 30 s openid-client would wait were our timeout not passed on.
 */
const TIMEOUT_SLACK_MS = 5_000;

let provider: TestOidcProvider;
let settings: OidcSettings;

beforeAll(async () => {
  provider = await startOidcProvider({ redirectUris: [REDIRECT_URI] });
  settings = { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret, redirectUri: REDIRECT_URI, freshSeconds: 300, timeoutMs: 2_000 };
});
afterAll(() => provider.close());

/** Resolves to the SignInError reason a promise rejects with, failing the test on anything else. */
async function refusal(promise: Promise<unknown>): Promise<SignInFailure> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SignInError);
  return (err as SignInError).reason;
}

describe('a sign-in through the provider', () => {
  it('a full sign-in yields the person qualified by issuer, with name and email and a fresh auth_time', async () => {
    const signIn = await createOidcSignIn(settings);
    const before = Date.now();
    const { redirectUrl, pending } = await signIn.start('/approvals/abc?tab=1');
    const person = await signIn.finish(await signInHeadless(redirectUrl, 'alice'), pending);
    expect(person).toMatchObject({ personId: `${provider.issuer}|alice`, subject: 'alice', issuer: provider.issuer, name: 'Alice Example', email: 'alice@example.test' });
    // auth_time has whole-second resolution.
    expect(person.authTimeMs).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    expect(person.authTimeMs).toBeLessThanOrEqual(Date.now());
    expect(pending.returnTo).toBe('/approvals/abc?tab=1');
  });

  it('a public client (no secret) signs in with PKCE alone', async () => {
    const signIn = await createOidcSignIn({ ...settings, clientId: provider.publicClientId, clientSecret: undefined });
    const { redirectUrl, pending } = await signIn.start('/');
    const person = await signIn.finish(await signInHeadless(redirectUrl, 'bob'), pending);
    expect(person.personId).toBe(`${provider.issuer}|bob`);
    expect(person.name).toBe('Bob Example');
  });

  it('the authorization URL carries an S256 code_challenge of the kept verifier, state, nonce and max_age', async () => {
    const signIn = await createOidcSignIn({ ...settings, freshSeconds: 120 });
    const { redirectUrl, pending } = await signIn.start('/');
    const params = new URL(redirectUrl).searchParams;
    expect(params.get('response_type')).toBe('code');
    expect(params.get('scope')?.split(' ')).toContain('openid');
    expect(params.get('redirect_uri')).toBe(REDIRECT_URI);
    expect(params.get('code_challenge_method')).toBe('S256');
    expect(params.get('code_challenge')).toBe(createHash('sha256').update(pending.codeVerifier).digest('base64url'));
    expect(params.get('state')).toBe(pending.state);
    expect(params.get('nonce')).toBe(pending.nonce);
    expect(params.get('max_age')).toBe('120');
  });

  it('a return path that could leave our origin becomes "/"', async () => {
    const signIn = await createOidcSignIn(settings);
    for (const hostile of ['//evil.example/x', '/\\evil.example', 'https://evil.example/', 'javascript:alert(1)', '/\t/evil.example', '', 'approvals']) {
      expect((await signIn.start(hostile)).pending.returnTo, hostile).toBe('/');
    }
    expect((await signIn.start('/approvals/1#top')).pending.returnTo).toBe('/approvals/1#top');
  });
});

describe('a callback that does not belong to the pending sign-in is refused', () => {
  it('a wrong or missing state is refused before the code is spent, so the genuine callback still works', async () => {
    const signIn = await createOidcSignIn(settings);
    const { redirectUrl, pending } = await signIn.start('/');
    const callback = await signInHeadless(redirectUrl, 'alice');

    const wrongState = new URL(callback);
    wrongState.searchParams.set('state', 'not-the-state');
    expect(await refusal(signIn.finish(wrongState, pending))).toBe('state_mismatch');
    const noState = new URL(callback);
    noState.searchParams.delete('state');
    expect(await refusal(signIn.finish(noState, pending))).toBe('state_mismatch');

    expect((await signIn.finish(callback, pending)).subject).toBe('alice');
  });

  it('a replayed callback (the same code twice) is refused', async () => {
    const signIn = await createOidcSignIn(settings);
    const { redirectUrl, pending } = await signIn.start('/');
    const callback = await signInHeadless(redirectUrl, 'alice');
    await signIn.finish(callback, pending);
    expect(await refusal(signIn.finish(callback, pending))).toBe('provider_refused');
  });

  it('a pending sign-in from another start is refused: its state, its PKCE verifier and its nonce each fail', async () => {
    const signIn = await createOidcSignIn(settings);
    const first = await signIn.start('/');
    const second = await signIn.start('/');

    const callback = await signInHeadless(first.redirectUrl, 'alice');
    expect(await refusal(signIn.finish(callback, second.pending))).toBe('state_mismatch');
    // The other start's verifier, even with this start's state: the provider refuses the PKCE check
    // (oidc-provider 9 leaves the code unspent after a failed verifier, so it can be tried once more).
    expect(await refusal(signIn.finish(callback, { ...second.pending, state: first.pending.state }))).toBe('provider_refused');
    // The other start's nonce with this start's state and verifier: the ID token names another sign-in.
    expect(await refusal(signIn.finish(callback, { ...first.pending, nonce: second.pending.nonce }))).toBe('nonce_mismatch');
  });

  it('a pending sign-in older than ten minutes is refused without asking the provider', async () => {
    const signIn = await createOidcSignIn(settings);
    const { redirectUrl, pending } = await signIn.start('/');
    const callback = await signInHeadless(redirectUrl, 'alice');
    expect(await refusal(signIn.finish(callback, { ...pending, startedAtMs: Date.now() - PENDING_SIGN_IN_MAX_AGE_MS - 1 }))).toBe('expired');
    // The code was not spent by the refused attempt.
    expect((await signIn.finish(callback, pending)).subject).toBe('alice');
  });

  it('an error from the provider is refused with a message that carries none of its text', async () => {
    const signIn = await createOidcSignIn(settings);
    const { pending } = await signIn.start('/');
    const callback = new URL(REDIRECT_URI);
    callback.search = new URLSearchParams({ error: 'access_denied', error_description: 'internal detail 42', state: pending.state, iss: provider.issuer }).toString();
    const err = await signIn.finish(callback, pending).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SignInError);
    expect((err as SignInError).reason).toBe('provider_denied');
    expect((err as SignInError).message).not.toMatch(/access_denied|internal detail/);
  });
});

describe('timeouts', () => {
  it('a provider that stops answering after discovery fails the sign-in within timeoutMs', async () => {
    const signIn = await createOidcSignIn({ ...settings, timeoutMs: 300 });
    const { redirectUrl, pending } = await signIn.start('/');
    const callback = await signInHeadless(redirectUrl, 'alice');
    provider.setStalled(true);
    try {
      const startedMs = Date.now();
      expect(await refusal(signIn.finish(callback, pending))).toBe('timeout');
      expect(Date.now() - startedMs).toBeLessThan(300 + TIMEOUT_SLACK_MS);
    } finally {
      provider.setStalled(false);
    }
  });
});

describe('freshness (max_age)', () => {
  it('within freshSeconds the provider session is reused; once it is older, the provider asks for a new login and auth_time is fresh', async () => {
    const signIn = await createOidcSignIn({ ...settings, freshSeconds: 1 });
    const jar = new CookieJar();
    const run = async () => {
      const { redirectUrl, pending } = await signIn.start('/');
      return signIn.finish(await signInHeadless(redirectUrl, 'alice', { cookieJar: jar }), pending);
    };
    const first = await run();
    expect(jar.loginsSubmitted).toBe(1);
    const reused = await run();
    expect(jar.loginsSubmitted).toBe(1);
    expect(reused.authTimeMs).toBe(first.authTimeMs);

    // oidc-provider re-prompts when whole seconds since the login exceed max_age, so wait past two.
    await sleep(2_100);
    const beforeThird = Date.now();
    const renewed = await run();
    expect(jar.loginsSubmitted).toBe(2);
    expect(renewed.authTimeMs).toBeGreaterThan(first.authTimeMs);
    expect(renewed.authTimeMs).toBeGreaterThanOrEqual(Math.floor(beforeThird / 1000) * 1000);
  });

  it('an ID token whose auth_time is older than freshSeconds (beyond the clock tolerance) is refused', async () => {
    const signIn = await createOidcSignIn({ ...settings, freshSeconds: 1 });
    const { redirectUrl, pending } = await signIn.start('/');
    const callback = await signInHeadless(redirectUrl, 'alice');
    // Move this process's clock (client and provider alike) past freshSeconds plus the 5 s tolerance.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 10_000 });
    try {
      expect(await refusal(signIn.finish(callback, pending))).toBe('stale_sign_in');
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('discovery', () => {
  let blackHole: Server;
  let blackHolePort: number;
  const held: Socket[] = [];
  beforeAll(async () => {
    // Accepts connections and never answers, like a provider that hangs.
    blackHole = createServer((socket) => held.push(socket));
    await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
    blackHolePort = (blackHole.address() as AddressInfo).port;
  });
  afterAll(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of held) socket.destroy();
        blackHole.close(() => resolve());
      }),
  );

  it('a provider that does not answer fails discovery within timeoutMs, naming the issuer', async () => {
    const issuer = `http://127.0.0.1:${blackHolePort}`;
    const startedMs = Date.now();
    const err = await createOidcSignIn({ ...settings, issuer, timeoutMs: 300 }).catch((e: unknown) => e);
    const elapsedMs = Date.now() - startedMs;
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain(issuer);
    expect(elapsedMs).toBeLessThan(300 + TIMEOUT_SLACK_MS);
  });

  it('a provider that refuses connections fails discovery with a message naming the issuer', async () => {
    // A port we just held and released: nothing listens there now.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const issuer = `http://127.0.0.1:${port}`;
    await expect(createOidcSignIn({ ...settings, issuer })).rejects.toThrow(issuer);
  });

  it('a plain-http issuer that is not loopback is refused before any request', async () => {
    await expect(createOidcSignIn({ ...settings, issuer: 'http://idp.example.test' })).rejects.toThrow(/http:\/\/idp\.example\.test.*not loopback/);
  });

  it('an issuer string that differs from the one the provider declares fails discovery', async () => {
    const localhostIssuer = provider.issuer.replace('127.0.0.1', 'localhost');
    await expect(createOidcSignIn({ ...settings, issuer: localhostIssuer })).rejects.toThrow(localhostIssuer);
  });
});
