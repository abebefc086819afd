// The people-facing pages (protocol §10, DESIGN §8), assembled: their security headers and static
// files, sign-in (http/sign-in.ts), adding a passkey (http/passkey-pages.ts), the account page
// (http/people-pages.ts), and here the approval page at `verification_uri` (/device) and its
// decision. Thin, like every handler: parse, call a service in services/device-approvals.ts, render
// a page from http/pages/. The pages' only scripts are two static files (the WebAuthn ceremonies);
// none is inline. Nothing in the protocol path uses this.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import express, { Router } from 'express';
import { ApiError, isApiError } from '../errors.ts';
import { decideAsPerson, findApprovalByCode, type PageDeps } from '../services/device-approvals.ts';
import { presenceOptions } from '../services/passkeys.ts';
import { pageSecurityHeaders, pageWrapper, PAGE_PATHS, redirectTo } from './page-session.ts';
import { passkeyPagesRouter } from './passkey-pages.ts';
import { peoplePagesRouter } from './people-pages.ts';
import { approvalPage, codePage, decidedPage, STYLESHEET, type PresenceOnPage } from './pages/device-pages.ts';
import { signInRouter, signInUrl, type OidcSignInFlow } from './sign-in.ts';

export type { OidcSignInFlow } from './sign-in.ts';

export interface DevicePageDeps extends PageDeps {
  oidc?: OidcSignInFlow | undefined;
}

/** The pages' only scripts, read once: ours, and @simplewebauthn/browser's UMD bundle. */
const PASSKEYS_CLIENT = readFileSync(new URL('./pages/passkeys-client.js', import.meta.url), 'utf8');
// The package exports no path to its browser bundle, so it is found beside the package's entry.
const WEBAUTHN_BROWSER = readFileSync(
  join(dirname(dirname(createRequire(import.meta.url).resolve('@simplewebauthn/browser'))), 'dist', 'bundle', 'index.umd.min.js'),
  'utf8',
);

/** The approval page for a code, as a path (a refusal's page links back to it). */
const approvalPath = (code: string) => `/device?user_code=${encodeURIComponent(code)}`;

export function devicePagesRouter(deps: DevicePageDeps): Router {
  const router = Router();
  const { logger, sessions } = deps;
  const page = pageWrapper(deps);
  const forms = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 128 });

  router.use(PAGE_PATHS, pageSecurityHeaders());
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
  router.use(signInRouter(deps, page));
  router.use(passkeyPagesRouter(deps, page));
  router.use(peoplePagesRouter(deps, page));

  // RFC 8628 §3.3: the verification URI; `?user_code=` is verification_uri_complete.
  router.get('/device', page(async (req, res, session) => {
    if (!session.data || !sessions.isFresh(session)) {
      return redirectTo(signInUrl(req.originalUrl));
    }
    const typed = typeof req.query.user_code === 'string' ? req.query.user_code : undefined;
    if (typed === undefined) return codePage();
    let view;
    try {
      view = await findApprovalByCode(deps, session, typed, req.ip ?? 'unknown');
    } catch (err) {
      // A wrong code is answered on the code form itself, with what was typed, so it can be fixed.
      if (isApiError(err) && err.code === 'invalid_request') {
        res.status(err.status);
        return codePage(err.message, typed.slice(0, 16));
      }
      throw err;
    }
    let presence: PresenceOnPage = { kind: 'not_needed' };
    if (view.requested.some((r) => r.approvalStrength === 'presence')) {
      const options = deps.passkeys ? await presenceOptions(deps, session, view.approvalId) : null;
      presence = options ? { kind: 'ready', options }
        : deps.passkeys ? { kind: 'no_passkey', addUrl: `/passkeys/new?return_to=${encodeURIComponent(req.originalUrl)}` }
          : { kind: 'unavailable' };
    }
    const known = await knownNames(deps, session.data.person.personId, view.host.id);
    return approvalPage(view, { csrfToken: session.data.csrfToken, userCode: typed, nowMs: deps.clock.nowMs(), presence, known, plugins: (name) => deps.operators.get(name) });
  }));

  router.post('/device/decision', forms, page(async (req, res, session) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const userCode = typeof body.user_code === 'string' ? body.user_code.slice(0, 32) : '';
    if (userCode) page.backTo(res, approvalPath(userCode));
    if (!sessions.csrfMatches(session, body.csrf)) throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
    const verdict = body.verdict === 'approve' ? 'approve' : body.verdict === 'deny' ? 'deny' : null;
    const agentId = typeof body.agent_id === 'string' ? body.agent_id : '';
    const approvalId = typeof body.approval_id === 'string' ? body.approval_id : '';
    if (verdict === null || !agentId || !approvalId) throw new ApiError('invalid_request', 'Choose approve or deny.');
    if (!sessions.isFresh(session)) {
      return redirectTo(signInUrl(userCode ? approvalPath(userCode) : '/device'));
    }
    const capabilities = ([] as unknown[]).concat(body.capabilities ?? []).filter((c): c is string => typeof c === 'string').slice(0, 100);
    const webauthnResponse = typeof body.webauthn_response === 'string' && body.webauthn_response !== '' ? body.webauthn_response : undefined;
    const outcome = await decideAsPerson(deps, session, { agentId, approvalId, verdict, capabilities, webauthnResponse });
    logger.info('approval decided on the page', { agentId, approvalId, verdict, personId: session.data?.person.personId, approved: outcome.approved.map((g) => g.capability) });
    const known = await knownNames(deps, session.data!.person.personId, outcome.snapshot.agent.hostId);
    return decidedPage(verdict, outcome.snapshot.agent.name, outcome.approved, outcome.notApproved, { known, plugins: (name) => deps.operators.get(name) });
  }));

  return router;
}

/**
 * Names an agent or host might imitate on this person's page: the server's own, and the names of
 * the person's other hosts (read from their host links: bounded by what they linked).
 */
async function knownNames(deps: PageDeps, personId: string, shownHostId: string): Promise<string[]> {
  const names = [deps.config.PROVIDER_NAME];
  const hostIds = (await deps.store.listPersonHostIds(personId)).filter((id) => id !== shownHostId).slice(0, 50);
  for (const host of await Promise.all(hostIds.map((id) => deps.store.getHost(id)))) {
    if (host?.name && host.userId === personId) names.push(host.name);
  }
  return names;
}

