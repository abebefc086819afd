// The people-facing pages (protocol §10, DESIGN §8): the approval page at `verification_uri`
// (/device), sign-in and sign-out. Thin, like every handler: parse, call a service in
// services/device-approvals.ts or services/people.ts, render a page from http/pages/. Every answer
// carries a strict Content-Security-Policy (no script at all), refuses framing and caching, and
// every form is checked against the session's CSRF token. Nothing in the protocol path uses this.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import express, { Router, type NextFunction, type Request, type Response } from 'express';
import { ApiError, isApiError } from '../errors.ts';
import { safeReturnTo as sameOriginPath } from '../people/oidc-urls.ts';
import type { Logger } from '../logger.ts';
import { decideAsPerson, findApprovalByCode, type PageDeps } from '../services/device-approvals.ts';
import type { PersonSession } from '../services/people.ts';
import { passkeyRegistrationOptions, presenceOptions, registerPasskey } from '../services/passkeys.ts';
import { addPasskeyPage, approvalPage, codePage, decidedPage, errorPage, layout, signInPage, STYLESHEET, type PresenceOnPage } from './pages/device-pages.ts';
import type { SafeHtml } from './pages/html.ts';
import { requestContextOf } from './access.ts';

/** An OpenID Connect sign-in (src/people/oidc-sign-in.ts), as the pages use it. */
export interface OidcSignInFlow {
  start(returnTo: string): Promise<{ redirectUrl: string; pending: { state: string; nonce: string; codeVerifier: string; returnTo: string; startedAtMs: number } }>;
  finish(callbackUrl: URL, pending: { state: string; nonce: string; codeVerifier: string; returnTo: string; startedAtMs: number }): Promise<{ personId: string; name?: string; email?: string; authTimeMs: number }>;
}

export interface DevicePageDeps extends PageDeps {
  oidc?: OidcSignInFlow | undefined;
}

export const SESSION_COOKIE = 'agentgate_session';
/** The pages' only scripts, read once: ours, and @simplewebauthn/browser's UMD bundle. */
const PASSKEYS_CLIENT = readFileSync(new URL('./pages/passkeys-client.js', import.meta.url), 'utf8');
// The package exports no path to its browser bundle, so it is found beside the package's entry.
const WEBAUTHN_BROWSER = readFileSync(
  join(dirname(dirname(createRequire(import.meta.url).resolve('@simplewebauthn/browser'))), 'dist', 'bundle', 'index.umd.min.js'),
  'utf8',
);
const CSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** A same-origin path to come back to after sign-in (people/oidc-urls.ts decides); otherwise the code page. */
function safeReturnTo(value: unknown): string {
  const path = typeof value === 'string' ? sameOriginPath(value) : '/';
  return path === '/' ? '/device' : path;
}

function cookieValue(req: Request, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

export function devicePagesRouter(deps: DevicePageDeps): Router {
  const router = Router();
  const { config, logger, sessions } = deps;
  const secureCookie = config.issuer.startsWith('https://');
  const forms = express.urlencoded({ extended: false, limit: '8kb', parameterLimit: 64 });

  router.use(['/device', '/signin', '/signout', '/passkeys', '/static', '/favicon.ico'], (_req, res, next) => {
    res.set({
      'Content-Security-Policy': CSP,
      'X-Frame-Options': 'DENY',
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    });
    next();
  });

  router.get('/static/agentgate.css', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/css').send(STYLESHEET);
  });
  router.get('/favicon.ico', (_req, res) => {
    res.status(204).end();
  });
  router.get('/static/passkeys.js', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/javascript').send(PASSKEYS_CLIENT);
  });
  router.get('/static/simplewebauthn-browser.js', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/javascript').send(WEBAUTHN_BROWSER);
  });

  /** Loads the session, runs the page, saves the session when it holds anything, sets the cookie. */
  const page = (handler: (req: Request, res: Response, session: PersonSession) => Promise<SafeHtml | void>) =>
    async (req: Request, res: Response, next: NextFunction) => {
      let session = await sessions.load(cookieValue(req, SESSION_COOKIE));
      const renderAs = (title: string, body: SafeHtml, status = 200) => {
        const person = session.data.person;
        res.status(status).type('html').send(layout(title, body, person ? { name: person.name ?? person.personId, csrfToken: session.data.csrfToken } : undefined).toString());
      };
      try {
        const body = await handler(req, res, session);
        if (res.locals.session) session = res.locals.session as PersonSession;
        if (res.headersSent) return;
        await keep(res, session);
        if (body) renderAs('agentgate', body);
      } catch (err) {
        if (!isApiError(err)) return next(err);
        const context = requestContextOf(res);
        if (context) context.errorCode = err.code;
        if (res.locals.session) session = res.locals.session as PersonSession;
        await keep(res, session).catch(() => undefined);
        if (err.headers) res.set(err.headers);
        renderAs('Not done', err.code === 'invalid_request' && req.path === '/device' ? codePage(err.message) : errorPage(err.message), err.status);
      }
    };

  // A session costs storage only once it holds something, or once a page gave out its CSRF token
  // (the sign-in form), so anonymous visits to other pages store nothing.
  const keep = async (res: Response, session: PersonSession) => {
    const worthKeeping = !session.isNew || res.locals.formIssued === true || session.data.person !== undefined
      || session.data.pendingSignIn !== undefined || session.data.failedCodeLookupsAtMs.length > 0;
    if (!worthKeeping) return;
    await sessions.save(session);
    res.cookie(SESSION_COOKIE, session.id, { httpOnly: true, sameSite: 'lax', secure: secureCookie, path: '/', maxAge: config.SESSION_MAX_SECONDS * 1000 });
  };

  const requireCsrf = (session: PersonSession, body: Record<string, unknown>) => {
    if (!sessions.csrfMatches(session, body.csrf)) throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
  };

  // RFC 8628 §3.3: the verification URI; `?user_code=` is verification_uri_complete.
  router.get('/device', page(async (req, res, session) => {
    if (!session.data.person || !sessions.isFresh(session)) {
      res.redirect(303, `/signin?return_to=${encodeURIComponent(req.originalUrl)}`);
      return;
    }
    const typed = typeof req.query.user_code === 'string' ? req.query.user_code : undefined;
    if (typed === undefined) return codePage();
    const view = await findApprovalByCode(deps, session, typed, req.ip ?? 'unknown');
    let presence: PresenceOnPage = { kind: 'not_needed' };
    if (view.requested.some((r) => r.presence)) {
      const options = deps.passkeys ? await presenceOptions(deps, session, view.approvalId) : null;
      presence = options ? { kind: 'ready', options }
        : deps.passkeys ? { kind: 'no_passkey', addUrl: `/passkeys/new?return_to=${encodeURIComponent(req.originalUrl)}` }
          : { kind: 'unavailable' };
    }
    return approvalPage(view, session.data.csrfToken, deps.clock.nowMs(), presence);
  }));

  router.get('/passkeys/new', page(async (req, res, session) => {
    if (!session.data.person || !sessions.isFresh(session)) {
      res.redirect(303, `/signin?return_to=${encodeURIComponent(req.originalUrl)}`);
      return;
    }
    const options = await passkeyRegistrationOptions(deps, session);
    return addPasskeyPage(options, session.data.csrfToken, safeReturnTo(req.query.return_to));
  }));

  router.post('/passkeys', forms, page(async (req, res, session) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    requireCsrf(session, body);
    if (!session.data.person || !sessions.isFresh(session)) throw new ApiError('authentication_required', 'Sign in again to add a passkey.');
    await registerPasskey(deps, session, typeof body.response === 'string' ? body.response : '');
    logger.info('passkey added', { personId: session.data.person.personId });
    await keep(res, session);
    res.redirect(303, safeReturnTo(body.return_to));
  }));

  router.post('/device/decision', forms, page(async (req, res, session) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    requireCsrf(session, body);
    const verdict = body.verdict === 'approve' ? 'approve' : body.verdict === 'deny' ? 'deny' : null;
    const agentId = typeof body.agent_id === 'string' ? body.agent_id : '';
    const approvalId = typeof body.approval_id === 'string' ? body.approval_id : '';
    if (verdict === null || !agentId || !approvalId) throw new ApiError('invalid_request', 'Choose approve or deny.');
    if (!sessions.isFresh(session)) {
      res.redirect(303, `/signin?return_to=${encodeURIComponent('/device')}`);
      return;
    }
    const capabilities = ([] as unknown[]).concat(body.capabilities ?? []).filter((c): c is string => typeof c === 'string').slice(0, 100);
    const webauthnResponse = typeof body.webauthn_response === 'string' && body.webauthn_response !== '' ? body.webauthn_response : undefined;
    const { snapshot, approved, denied } = await decideAsPerson(deps, session, { agentId, approvalId, verdict, capabilities, webauthnResponse });
    logger.info('approval decided on the page', { agentId, approvalId, verdict, personId: session.data.person?.personId, approved: verdict === 'approve' ? capabilities : [] });
    return decidedPage(verdict, snapshot.agent.name, approved, denied);
  }));

  router.get('/signin', page(async (req, res, session) => {
    res.locals.formIssued = config.INSECURE_DEV_SIGN_IN;
    return signInPage(safeReturnTo(req.query.return_to), session.data.csrfToken, { oidc: deps.oidc !== undefined, dev: config.INSECURE_DEV_SIGN_IN });
  }));

  router.get('/signin/start', page(async (req, res, session) => {
    if (!deps.oidc) throw new ApiError('not_found', 'No sign-in provider is configured.');
    const { redirectUrl, pending } = await deps.oidc.start(safeReturnTo(req.query.return_to));
    session.data.pendingSignIn = pending;
    await keep(res, session);
    res.redirect(303, redirectUrl);
  }));

  router.get('/signin/callback', page(async (req, res, session) => {
    const pending = session.data.pendingSignIn;
    if (!deps.oidc || !pending) throw new ApiError('invalid_request', 'This sign-in was not started here, or took too long. Start again.');
    const person = await deps.oidc.finish(new URL(req.originalUrl, config.issuer), pending).catch((err: unknown) => {
      logger.warn('sign-in refused', { error: err instanceof Error ? err.message : String(err) });
      throw new ApiError('authentication_required', 'Signing in did not work. Start again.');
    });
    const signedIn = await sessions.signIn(session, { personId: person.personId, name: person.name, email: person.email, signedInAtMs: person.authTimeMs });
    res.locals.session = signedIn;
    await keep(res, signedIn);
    res.redirect(303, safeReturnTo(pending.returnTo));
  }));

  router.post('/signin/dev', forms, page(async (req, res, session) => {
    if (!config.INSECURE_DEV_SIGN_IN) throw new ApiError('not_found', 'Development sign-in is off.');
    const body = (req.body ?? {}) as Record<string, unknown>;
    requireCsrf(session, body);
    const name = typeof body.name === 'string' ? body.name.trim() : '';
    if (!/^[\p{L}\p{N} ._-]{1,64}$/u.test(name)) throw new ApiError('invalid_request', 'Use a name of letters, digits, spaces, dots, dashes (at most 64).');
    warnDevSignIn(logger, name);
    const signedIn = await sessions.signIn(session, { personId: `dev|${name}`, name, signedInAtMs: deps.clock.nowMs() });
    res.locals.session = signedIn;
    await keep(res, signedIn);
    res.redirect(303, safeReturnTo(body.return_to));
  }));

  router.post('/signout', forms, page(async (req, res, session) => {
    requireCsrf(session, (req.body ?? {}) as Record<string, unknown>);
    await sessions.destroy(session);
    res.clearCookie(SESSION_COOKIE, { path: '/' });
    res.redirect(303, '/device');
  }));

  return router;
}

function warnDevSignIn(logger: Logger, name: string): void {
  logger.warn('INSECURE_DEV_SIGN_IN: someone signed in by name alone; never use this in production', { name });
}
