// What every people-facing page shares (DESIGN §8): its security headers, its cookies, and the one
// wrapper that loads the person's session, runs the page, keeps a signed-in session and renders the
// answer or a refusal. The session cookie is HttpOnly and SameSite=Lax, and on https it is Secure
// with the `__Host-` prefix, so no other site (not even a sibling subdomain) can plant or read it.
// Only signed-in sessions are stored (people/sessions.ts); what a sign-in needs before it
// completes rides in the sealed sign-in cookie (http/device/sign-in.ts).
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Config } from '../../config.ts';
import type { Logger } from '../../logger.ts';
import { isApiError } from '../../errors.ts';
import type { PersonSession, PersonSessions, SignedInSession } from '../../people/sessions.ts';
import { requestContextOf } from '../access.ts';
import { errorPage, layout } from './pages/device-pages.ts';
import { SafeHtml } from './pages/html.ts';

/** The pages' scripts are two static files of ours; nothing inline, nothing from elsewhere. */
const CSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** The paths the pages live under (the people's API sets its own headers). */
export const PAGE_PATHS = ['/device', '/inbox', '/signin', '/signout', '/passkeys', '/account', '/static', '/favicon.ico'];

/** Headers of every page: strict CSP, no framing, no sniffing, no referrer, never cached. */
export function pageSecurityHeaders(): RequestHandler {
  return (_req, res, next) => {
    res.set({
      'Content-Security-Policy': CSP,
      'X-Frame-Options': 'DENY',
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    });
    next();
  };
}

/** Whether cookies must be Secure: the issuer people use is https. */
export const secureCookies = (config: Pick<Config, 'issuer'>) => config.issuer.startsWith('https://');

/** The session cookie's name: `__Host-` on https, where browsers then insist on Secure, Path=/ and no Domain. */
export const sessionCookieName = (secure: boolean) => (secure ? '__Host-agentgate_session' : 'agentgate_session');

/** A cookie's value from the request, or undefined. */
export function readCookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

/** Cookie attributes for a cookie of ours that lives `maxAgeMs`. */
export const cookieOptions = (secure: boolean, maxAgeMs: number) => ({ httpOnly: true, sameSite: 'lax' as const, secure, path: '/', maxAge: maxAgeMs });

/** A page's answer that sends the browser elsewhere (303), after the session is kept. */
interface Redirect {
  redirect: string;
}
export const redirectTo = (url: string): Redirect => ({ redirect: url });

/** Where a page sends someone who must sign in (again); `freshLogin` asks the provider for credentials now. */
export const signInUrl = (returnTo: string, freshLogin = false) => `/signin?return_to=${encodeURIComponent(returnTo)}${freshLogin ? '&fresh=1' : ''}`;

/** What a page handler answers: a body to render, or where to go. */
type PageHandler<Session extends PersonSession = PersonSession> = (req: Request, res: Response, session: Session) => Promise<SafeHtml | Redirect>;

export interface PageWrapper {
  /** Runs a page: loads the session, renders the body (or a refusal as a page), keeps the session. */
  (handler: PageHandler): RequestHandler;
  /**
   * Runs a page only a person signed in recently (SIGN_IN_FRESH_SECONDS) may see; anyone else is
   * sent to sign in, and back to this page afterwards.
   */
  fresh(handler: PageHandler<SignedInSession>): RequestHandler;
  /** A handler that signed someone in hands the new session over here, so it is the one kept. */
  replaceSession(res: Response, session: PersonSession): void;
  /** A refusal's page links here instead of the code form (e.g. back to the approval it was about). */
  backTo(res: Response, path: string): void;
}

export function pageWrapper(deps: { config: Config; sessions: PersonSessions; logger: Logger }): PageWrapper {
  const { config, sessions } = deps;
  const secure = secureCookies(config);
  const cookieName = sessionCookieName(secure);

  // A signed-in session is saved on every page (its idle time restarts); an anonymous one never.
  const keep = async (res: Response, session: PersonSession) => {
    if (session.data === null) return;
    await sessions.save(session);
    res.cookie(cookieName, session.id, cookieOptions(secure, config.SESSION_MAX_SECONDS * 1000));
  };

  const render = (res: Response, session: PersonSession, title: string, body: SafeHtml, status: number) => {
    const data = session.data;
    const header = data ? { name: data.person.name ?? data.person.personId, csrfToken: data.csrfToken } : undefined;
    res.status(status).type('html').send(layout(title, body, header).toString());
  };

  const wrap = (handler: PageHandler): RequestHandler => async (req: Request, res: Response, next: NextFunction) => {
    // Until the session is read (the store may be down), the page is an anonymous visitor's.
    let session: PersonSession = { id: '', data: null, isNew: true };
    try {
      session = await sessions.load(readCookie(req, cookieName));
      const answer = await handler(req, res, session);
      session = (res.locals.session as PersonSession | undefined) ?? session;
      // Kept before the answer is sent: a ceremony's challenge or a new sign-in must be in the
      // store (and its cookie in this answer) by the time the browser follows the redirect. A page
      // that failed to keep it is refused (a 503 page; showing it again is harmless), but a form
      // whose change is made (a decision, a passkey) stands: the person is not told it failed.
      if (req.method === 'POST') await keep(res, session).catch((err: unknown) => deps.logger.warn('could not keep the person\'s session after the form', { err }));
      else await keep(res, session);
      if (answer instanceof SafeHtml) render(res, session, 'agentgate', answer, res.statusCode);
      else res.redirect(303, answer.redirect);
    } catch (err) {
      if (!isApiError(err)) return next(err);
      const context = requestContextOf(res);
      if (context) context.errorCode = err.code;
      session = (res.locals.session as PersonSession | undefined) ?? session;
      // The refusal is what matters; a store that also failed to keep the session must not hide it.
      await keep(res, session).catch(() => undefined);
      if (err.headers) res.set(err.headers);
      render(res, session, 'Not done', errorPage(err.message, res.locals.backTo as string | undefined), err.status);
    }
  };
  return Object.assign(wrap, {
    fresh: (handler: PageHandler<SignedInSession>) =>
      wrap((req, res, session) => (sessions.isFresh(session) ? handler(req, res, session) : Promise.resolve(redirectTo(signInUrl(req.originalUrl))))),
    replaceSession: (res: Response, session: PersonSession) => {
      res.locals.session = session;
    },
    backTo: (res: Response, path: string) => {
      res.locals.backTo = path;
    },
  });
}
