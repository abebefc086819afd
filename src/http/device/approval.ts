// The approval page at `verification_uri` (/device, RFC 8628 §3.3) and its decision: a signed-in
// person types or follows the code their agent's host showed, sees exactly what it decides, and
// approves all, some or none. Thin, like every handler: read the query or the form, call one use
// case (services/approvals/by-person.ts), render a page from pages/device-pages.ts.
import express, { Router } from 'express';
import { ApiError, isApiError } from '../../errors.ts';
import { presenceOptions } from '../../people/passkeys.ts';
import type { SignedInSession } from '../../people/sessions.ts';
import { decideAsPerson, findApprovalByCode } from '../../services/approvals/by-person.ts';
import { namesToTellApart, type ApprovalForPerson } from '../../services/approvals/view.ts';
import type { PersonServiceDeps } from '../../services/deps.ts';
import { approvalPage, codePage, decidedPage, type PresenceOnPage } from './pages/device-pages.ts';
import { redirectTo, signInUrl, type PageWrapper } from './session.ts';

/** The approval page for a code, as a path (a refusal's page links back to it). */
const approvalPath = (code: string) => `/device?user_code=${encodeURIComponent(code)}`;

/**
 * What the approval page says about presence: nothing when no capability needs it, the passkey
 * ceremony's options when the person has a passkey, else where to add one (coming back to
 * `returnTo`), or that this server cannot use passkeys at all.
 */
export async function presenceOnPage(deps: PersonServiceDeps, session: SignedInSession, view: ApprovalForPerson, returnTo: string): Promise<PresenceOnPage> {
  if (!view.requested.some((r) => r.approvalStrength === 'presence')) return { kind: 'not_needed' };
  const options = deps.passkeys ? await presenceOptions(deps, session, view.approvalId) : null;
  if (options) return { kind: 'ready', options };
  return deps.passkeys ? { kind: 'no_passkey', addUrl: `/passkeys/new?return_to=${encodeURIComponent(returnTo)}` } : { kind: 'unavailable' };
}

export function approvalPagesRouter(deps: PersonServiceDeps, page: PageWrapper): Router {
  const router = Router();
  const { logger, sessions } = deps;
  const forms = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 128 });

  // RFC 8628 §3.3: the verification URI; `?user_code=` is verification_uri_complete.
  router.get('/device', page.fresh(async (req, res, session) => {
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
    const presence = await presenceOnPage(deps, session, view, req.originalUrl);
    const known = await namesToTellApart(deps, session.data.person.personId, view.host.id);
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
    const known = await namesToTellApart(deps, session.data!.person.personId, outcome.snapshot.agent.hostId);
    return decidedPage(verdict, outcome.snapshot.agent.name, outcome.approved, outcome.notApproved, { known, plugins: (name) => deps.operators.get(name) });
  }));

  return router;
}
