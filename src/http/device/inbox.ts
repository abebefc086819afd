// The person's inbox (protocol §10, CIBA): the requests an agent had sent to this person, each
// decided on its own page with the same rules as the approval page (a fresh sign-in, a passkey for
// a presence capability, the form's CSRF token, every claim escaped), through the same use case
// (services/approvals/by-person.ts decideAsPerson). The link in a notice leads to /inbox/<id>.
import express, { Router } from 'express';
import { ApiError } from '../../errors.ts';
import { decideAsPerson } from '../../services/approvals/by-person.ts';
import { namesToTellApart } from '../../services/approvals/view.ts';
import type { PersonServiceDeps } from '../../services/deps.ts';
import { myInbox, myOpenApproval } from '../../services/person-account.ts';
import { presenceOnPage } from './approval.ts';
import { approvalPage, decidedPage, INBOX_DECISION_PATH, INBOX_PATH, inboxPage } from './pages/device-pages.ts';
import { redirectTo, signInUrl, type PageWrapper } from './session.ts';

const itemPath = (approvalId: string) => `${INBOX_PATH}/${encodeURIComponent(approvalId)}`;
const APPROVAL_ID = /^[A-Za-z0-9_-]{1,128}$/;

export function inboxPagesRouter(deps: PersonServiceDeps, page: PageWrapper): Router {
  const router = Router();
  const { logger, sessions } = deps;
  const forms = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 128 });

  router.get(INBOX_PATH, page.fresh(async (_req, _res, session) => {
    const personId = session.data.person.personId;
    const items = await myInbox(deps, personId);
    return inboxPage(items, { nowMs: deps.clock.nowMs(), known: await namesToTellApart(deps, personId, '') });
  }));

  router.get(`${INBOX_PATH}/:approvalId`, page.fresh(async (req, res, session) => {
    page.backTo(res, INBOX_PATH);
    const approvalId = typeof req.params.approvalId === 'string' ? req.params.approvalId : '';
    if (!APPROVAL_ID.test(approvalId)) throw notOpen();
    const personId = session.data.person.personId;
    const view = await myOpenApproval(deps, personId, approvalId).catch((err: unknown) => {
      throw err instanceof ApiError && err.code === 'not_found' ? notOpen() : err;
    });
    const presence = await presenceOnPage(deps, session, view, req.originalUrl);
    const known = await namesToTellApart(deps, personId, view.host.id);
    return approvalPage(view, { csrfToken: session.data.csrfToken, nowMs: deps.clock.nowMs(), presence, known, plugins: (name) => deps.operators.get(name) });
  }));

  router.post(INBOX_DECISION_PATH, forms, page(async (req, res, session) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const approvalId = typeof body.approval_id === 'string' && APPROVAL_ID.test(body.approval_id) ? body.approval_id : '';
    page.backTo(res, approvalId ? itemPath(approvalId) : INBOX_PATH);
    if (!sessions.csrfMatches(session, body.csrf)) throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
    const verdict = body.verdict === 'approve' ? 'approve' : body.verdict === 'deny' ? 'deny' : null;
    const agentId = typeof body.agent_id === 'string' ? body.agent_id.slice(0, 128) : '';
    if (verdict === null || !agentId || !approvalId) throw new ApiError('invalid_request', 'Choose approve or deny.');
    if (!sessions.isFresh(session)) return redirectTo(signInUrl(itemPath(approvalId)));
    const capabilities = ([] as unknown[]).concat(body.capabilities ?? []).filter((c): c is string => typeof c === 'string').slice(0, 100);
    const webauthnResponse = typeof body.webauthn_response === 'string' && body.webauthn_response !== '' ? body.webauthn_response : undefined;
    const outcome = await decideAsPerson(deps, session, { agentId, approvalId, verdict, capabilities, webauthnResponse, via: 'inbox' });
    logger.info('approval decided in the inbox', { agentId, approvalId, verdict, personId: session.data?.person.personId, approved: outcome.approved.map((g) => g.capability) });
    const known = await namesToTellApart(deps, session.data!.person.personId, outcome.snapshot.agent.hostId);
    return decidedPage(verdict, outcome.snapshot.agent.name, outcome.approved, outcome.notApproved, { known, plugins: (name) => deps.operators.get(name) });
  }));

  return router;
}

/** The same answer for an id that never existed, one decided or lapsed, and one sent to someone else. */
const notOpen = () => new ApiError('not_found', 'This request is not waiting for you: it was decided, it expired, or it was never sent to you.');
