// Signing in and out of the approval page (DESIGN §8): through the configured OpenID Connect
// provider (authorization code with PKCE, state and nonce), or with the development sign-in
// (INSECURE_DEV_SIGN_IN, a name alone). Thin, like every handler.
//
// Nothing is stored for a visitor before a sign-in completes: the sign-in form's CSRF token and the
// provider round trip's state, nonce and PKCE verifier ride in one sealed cookie
// (people/sealed-cookie.ts), readable and changeable by nobody, valid for minutes and bound to this
// browser. Only a completed sign-in writes a session. So an anonymous client sending sign-in starts
// as fast as it can fills its own cookie jar, never the store.
import { randomBytes } from 'node:crypto';
import express, { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { ApiError } from '../../errors.ts';
import type { Logger } from '../../logger.ts';
import { safeReturnTo as sameOriginPath } from '../../people/sign-in/urls.ts';
import { developmentPerson } from '../../people/sign-in/development.ts';
import { pendingSignInSchema, type OidcSignIn } from '../../people/sign-in/oidc.ts';
import { sameSecret, type PersonSessions } from '../../people/sessions.ts';
import type { Clock } from '../../common/clock.ts';
import type { Config } from '../../config.ts';
import { rememberPerson, type RememberDeps } from '../../services/person-account.ts';
import { cookieOptions, readCookie, secureCookies, sessionCookieName, redirectTo, type PageWrapper } from './session.ts';
import { signInPage } from './pages/device-pages.ts';

interface SignInDeps {
  store: RememberDeps['store'];
  config: Config;
  logger: Logger;
  clock: Clock;
  sessions: PersonSessions;
  oidc?: OidcSignIn | undefined;
}

/** The sealed sign-in cookie: what a visitor carries before a sign-in completes. */
const preSignInSchema = z.object({
  csrf: z.string().min(16).max(128),
  pending: pendingSignInSchema.optional(),
});
type PreSignIn = z.infer<typeof preSignInSchema>;

const PRE_SIGN_IN_PURPOSE = 'pre-sign-in';
/** Long enough to read the form or visit the provider (whose own limit is 10 minutes). */
const PRE_SIGN_IN_TTL_MS = 15 * 60_000;
/** How far the provider's auth_time may precede our start and still count as entered in this sign-in. */
const AUTH_TIME_SKEW_MS = 5_000;

/** The sign-in cookie's name: `__Host-` on https, like the session cookie. */
const signInCookieName = (secure: boolean) => (secure ? '__Host-agentgate_signin' : 'agentgate_signin');

/** A same-origin path to come back to after sign-in (people/sign-in/urls.ts decides); otherwise the code page. */
export function safeReturnTo(value: unknown): string {
  const path = typeof value === 'string' ? sameOriginPath(value) : '/';
  return path === '/' ? '/device' : path;
}

export function signInRouter(deps: SignInDeps, page: PageWrapper): Router {
  const router = Router();
  const { config, logger, sessions, clock } = deps;
  const secure = secureCookies(config);
  const cookieName = signInCookieName(secure);
  const forms = express.urlencoded({ extended: false, limit: '8kb', parameterLimit: 64 });

  const readPreSignIn = async (req: Request): Promise<PreSignIn | null> => {
    const opened = (await sessions.sealer()).open(PRE_SIGN_IN_PURPOSE, readCookie(req, cookieName), clock.nowMs());
    const parsed = preSignInSchema.safeParse(opened);
    return parsed.success ? parsed.data : null;
  };
  const writePreSignIn = async (res: Response, value: PreSignIn) => {
    const sealed = (await sessions.sealer()).seal(PRE_SIGN_IN_PURPOSE, value, clock.nowMs() + PRE_SIGN_IN_TTL_MS);
    res.cookie(cookieName, sealed, cookieOptions(secure, PRE_SIGN_IN_TTL_MS));
  };
  const clearPreSignIn = (res: Response) => res.clearCookie(cookieName, { path: '/', secure, httpOnly: true, sameSite: 'lax' });
  /** The visitor's pre-sign-in state, or a new one with a fresh CSRF token. */
  const preSignInFor = async (req: Request): Promise<PreSignIn> => (await readPreSignIn(req)) ?? { csrf: randomToken() };

  router.get('/signin', page(async (req, res) => {
    const state = await preSignInFor(req);
    await writePreSignIn(res, state);
    const fresh = req.query.fresh === '1';
    return signInPage(safeReturnTo(req.query.return_to), state.csrf, { oidc: deps.oidc !== undefined, dev: config.INSECURE_DEV_SIGN_IN, fresh });
  }));

  router.get('/signin/start', page(async (req, res) => {
    if (!deps.oidc) throw new ApiError('not_found', 'No sign-in provider is configured.');
    const state = await preSignInFor(req);
    const { redirectUrl, pending } = await deps.oidc.start(safeReturnTo(req.query.return_to), { forceLogin: req.query.fresh === '1' });
    await writePreSignIn(res, { ...state, pending });
    return redirectTo(redirectUrl);
  }));

  router.get('/signin/callback', page(async (req, res, session) => {
    const state = await readPreSignIn(req);
    clearPreSignIn(res);
    const pending = state?.pending;
    if (!deps.oidc || !pending) throw new ApiError('invalid_request', 'This sign-in was not started in this browser, or took too long. Start again.');
    const person = await deps.oidc.finish(new URL(req.originalUrl, config.issuer), pending).catch((err: unknown) => {
      logger.warn('sign-in refused', { error: err instanceof Error ? err.message : String(err) });
      throw new ApiError('authentication_required', 'Signing in did not work. Start again.');
    });
    // Credentials entered within this sign-in, not answered from the provider's own session: what
    // a first passkey takes (people/passkeys.ts).
    const entered = person.authTimeMs >= pending.startedAtMs - AUTH_TIME_SKEW_MS;
    const signedIn = await sessions.signIn(session, {
      personId: person.personId, name: person.name, email: person.email, signedInAtMs: person.authTimeMs, ...(entered ? { freshLoginAtMs: person.authTimeMs } : {}),
    });
    page.replaceSession(res, signedIn);
    // A CIBA login_hint can now name this person, and a notice reach their verified address.
    await rememberPerson(deps, person.personId, person.emailVerified ? person.email : undefined);
    return redirectTo(safeReturnTo(pending.returnTo));
  }));

  router.post('/signin/dev', forms, page(async (req, res, session) => {
    if (!config.INSECURE_DEV_SIGN_IN) throw new ApiError('not_found', 'Development sign-in is off.');
    const body = (req.body ?? {}) as Record<string, unknown>;
    const state = await readPreSignIn(req);
    if (!state || !sameSecret(body.csrf, state.csrf)) throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
    const person = developmentPerson(body.name, clock.nowMs());
    logger.warn('INSECURE_DEV_SIGN_IN: someone signed in by name alone; never use this in production', { name: person.name });
    clearPreSignIn(res);
    const signedIn = await sessions.signIn(session, person);
    page.replaceSession(res, signedIn);
    // Named by their person id only: a development sign-in vouches for no address.
    await rememberPerson(deps, person.personId, undefined);
    return redirectTo(safeReturnTo(body.return_to));
  }));

  router.post('/signout', forms, page(async (req, res, session) => {
    if (!sessions.csrfMatches(session, ((req.body ?? {}) as Record<string, unknown>).csrf)) {
      throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
    }
    await sessions.destroy(session);
    page.replaceSession(res, { id: '', data: null, isNew: true });
    res.clearCookie(sessionCookieName(secure), { path: '/', secure, httpOnly: true, sameSite: 'lax' });
    return redirectTo('/device');
  }));

  return router;
}

const randomToken = () => randomBytes(32).toString('base64url');
