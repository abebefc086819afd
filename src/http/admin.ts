// The admin API (DESIGN §8), guarded by a bearer token (ADMIN_TOKEN). Without a token configured
// every admin route answers 403: the API is off. Every call, refused or not, is recorded in the
// audit trail (`admin.call`: method, path, status; never the body or the token), except a read of
// the trail that succeeded (docs/stances.md, "Reads of the audit trail"); the trail is read here
// (GET /admin/audit).
import express, { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { requireAdminToken } from '../auth/operator-tokens.ts';
import { AUDIT_EVENT_FAMILIES, AUDIT_ID_PATTERN, parseAuditTime } from '../audit/events.ts';
import { ApiError, isApiError } from '../errors.ts';
import * as admin from '../services/admin.ts';
import { clearShadow, guardedReload, loadShadow, previewCandidate, promoteShadow, shadowStatus, type MaxFlips } from '../services/policy-rollout.ts';
import { approveAgent, denyAgent } from '../services/approvals/decide.ts';
import { listWaitingAgents, MAX_LISTED_APPROVALS } from '../services/approvals/waiting.ts';
import { AUDIT_DEFAULT_LIMIT, AUDIT_MAX_LIMIT, queryAudit } from '../audit/query.ts';
import type { ServiceDeps } from '../services/deps.ts';
import { removePasskeysAsAdmin } from '../people/passkeys.ts';
import { parseWith, tokenOf } from './parse.ts';
import { adminApproveBodySchema, adminCreateHostBodySchema, adminDenyBodySchema } from './schemas.ts';
import { agentView, hostView, waitingAgentView } from './views.ts';

// The admin API's own inputs live here rather than in schemas.ts, which holds the protocol's
// request shapes; the OpenAPI document is generated from both (its admin queries are these).
const agentIdParamsSchema = z.object({ agentId: z.string().min(1).max(128) });
/** `POST /admin/passkeys/remove` */
export const adminRemovePasskeysBodySchema = z.object({
  user_id: z.string().min(1).max(512).describe('the person (as the people\'s API names them: person_id)'),
  passkey_id: z.string().min(1).max(1400).optional().describe('one passkey; all of the person\'s when absent'),
}).strict();
export const approvalsQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(MAX_LISTED_APPROVALS).default(MAX_LISTED_APPROVALS),
});

/** A time in an audit query: ISO 8601 or epoch milliseconds, as epoch ms. */
const auditTime = z.string().max(40).transform((text, ctx) => {
  const ms = parseAuditTime(text);
  if (ms === null) ctx.addIssue({ code: 'custom', message: 'must be an ISO 8601 time or epoch milliseconds' });
  return ms ?? 0;
}).describe('inclusive: ISO 8601 (a date, or a date and time) or epoch milliseconds');

const auditType = z.string().min(1).max(64)
  .regex(/^[a-z_]+(?:\.[a-z_]+)*$/, 'must be an event type (execute.refused) or its family (execute)')
  .superRefine((type, ctx) => {
    const family = type.split('.')[0] ?? '';
    if ((AUDIT_EVENT_FAMILIES as readonly string[]).includes(family)) return;
    ctx.addIssue({
      code: 'custom',
      message: `${JSON.stringify(type)} names no event type: a type is a family and a name (execute.refused), `
        + `or a family alone (execute matches execute.allowed and execute.refused); the families are ${AUDIT_EVENT_FAMILIES.join(', ')}`,
    });
  });

export const auditQuerySchema = z.object({
  agent_id: z.string().min(1).max(128).optional(),
  host_id: z.string().min(1).max(128).optional(),
  type: auditType.optional()
    .describe('an event type (execute.refused), or a family: the part before the dot (execute)'),
  since: auditTime.optional(),
  until: auditTime.optional(),
  limit: z.coerce.number().int().min(1).max(AUDIT_MAX_LIMIT).default(AUDIT_DEFAULT_LIMIT),
  cursor: z.string().regex(AUDIT_ID_PATTERN, 'must be a next_cursor this endpoint answered').optional().describe('the next_cursor of the previous page'),
}).strict();

/** `max_flips`: a count of changed decisions (`3`), or a share of those compared (`"0.5%"`). */
const maxFlipsSchema = z.union([
  z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).transform((count): MaxFlips => ({ count })),
  z.string().regex(/^\d{1,3}(\.\d{1,6})?%$/, 'must be a count (3) or a share in percent ("0.5%")')
    .transform((text, ctx): MaxFlips => {
      const percent = Number(text.slice(0, -1));
      if (percent > 100) ctx.addIssue({ code: 'custom', message: 'must be at most 100%' });
      return { share: percent / 100 };
    }),
]).describe('reload only if the preview of the artefact changes at most this many recorded decisions: a count, or a share ("0.5%")');
/** How many of the newest recorded decisions a preview reads. */
const previewDecisionsSchema = z.coerce.number().int().min(1).max(10_000_000).describe('the newest recorded decisions to preview against (default: DECISION_LOG_MAX_RECORDS)');
/** `POST /admin/policy/reload` */
export const policyReloadBodySchema = z.object({ max_flips: maxFlipsSchema.optional(), decisions: previewDecisionsSchema.optional() }).strict();
export const policyPreviewQuerySchema = z.object({ decisions: previewDecisionsSchema.optional() }).strict();

/** The largest candidate artefact an admin may send (the shipped one is about 150 KB). */
const MAX_ARTEFACT_BYTES = 16 * 1024 * 1024;
// Read only once the admin token has verified (the router checks it first): nobody else can make
// the server buffer 16 MB.
const artefactBody = express.raw({ type: 'application/wasm', limit: MAX_ARTEFACT_BYTES });
/** The request's artefact, or null when it sent none (an empty body, or no application/wasm). */
function artefactOf(req: Request): Uint8Array | null {
  const body: unknown = req.body;
  if (body instanceof Uint8Array) return body.length > 0 ? body : null;
  if (body === undefined || (typeof body === 'object' && body !== null && Object.keys(body).length === 0)) return null;
  throw new ApiError('invalid_request', 'body: must be a policy artefact (Content-Type: application/wasm), or empty');
}

export function adminRouter(deps: ServiceDeps): Router {
  const router = Router();
  const view = () => ({ config: deps.config, catalog: deps.catalog, userCodes: deps.userCodes, nowMs: deps.clock.nowMs() });
  router.use('/admin', (req, res, next) => {
    // 'close' comes for every request, also one whose client went away before the answer.
    res.once('close', () => recordAdminCall(deps, req, res));
    next();
  });
  router.use('/admin', requireAdmin(deps));

  // The audit trail, newest first. This instance's queue is written first, so what it just did is
  // in the answer (another instance's may follow up to AUDIT_FLUSH_MS later).
  router.get('/admin/audit', async (req, res) => {
    const query = parseWith(auditQuerySchema, req.query, 'query');
    if (query.since !== undefined && query.until !== undefined && query.since > query.until) {
      throw new ApiError('invalid_request', 'since: must not be after until');
    }
    await deps.audit.flush();
    const filter = { agentId: query.agent_id, hostId: query.host_id, type: query.type, sinceMs: query.since, untilMs: query.until };
    const page = await queryAudit(deps, { filter, limit: query.limit, cursor: query.cursor });
    res.json({ events: page.events, next_cursor: page.nextCursor });
  });

  router.post('/admin/hosts', async (req, res) => {
    const body = parseWith(adminCreateHostBodySchema, req.body, 'body');
    const host = await admin.preRegisterHost(deps, {
      publicKey: body.public_key, name: body.name, defaultCapabilities: body.default_capabilities, userId: body.user_id,
    });
    res.status(201).json(hostView(host));
  });

  router.get('/admin/hosts/:hostId', async (req, res) => {
    res.json(hostView(await admin.hostForAdmin(deps, req.params.hostId)));
  });

  router.post('/admin/hosts/:hostId/revoke', async (req, res) => {
    const { host, agentsRevoked } = await admin.revokeHostAsAdmin(deps, req.params.hostId);
    res.json({ host_id: host.id, status: 'revoked', agents_revoked: agentsRevoked });
  });

  // Withdraws the host's link (and defaults): it is pending again, its live agents revoked.
  router.post('/admin/hosts/:hostId/unlink', async (req, res) => {
    const { host, agentsRevoked } = await admin.unlinkHostAsAdmin(deps, req.params.hostId);
    res.json({ host_id: host.id, status: host.status, linked: false, agents_revoked: agentsRevoked });
  });

  // A person who lost their authenticator can add no passkey (each needs proof of one held): the
  // administrator removes theirs (one, or all), and their next one is a first one again.
  router.post('/admin/passkeys/remove', async (req, res) => {
    const body = parseWith(adminRemovePasskeysBodySchema, req.body ?? {}, 'body');
    const removed = await removePasskeysAsAdmin(deps, body.user_id, body.passkey_id);
    res.json({ user_id: body.user_id, passkeys_removed: removed });
  });

  router.get('/admin/agents/:agentId', async (req, res) => {
    res.json(agentView(await admin.agentForAdmin(deps, req.params.agentId), view()));
  });

  router.post('/admin/agents/:agentId/approve', async (req, res) => {
    const body = parseWith(adminApproveBodySchema, req.body ?? {}, 'body');
    const snapshot = await approveAgent(deps, req.params.agentId, { capabilities: body.capabilities, userId: body.user_id, userCode: body.user_code });
    res.json(agentView(snapshot, view()));
  });

  router.post('/admin/agents/:agentId/deny', async (req, res) => {
    const body = parseWith(adminDenyBodySchema, req.body ?? {}, 'body');
    res.json(agentView(await denyAgent(deps, req.params.agentId, { userId: body.user_id, userCode: body.user_code }), view()));
  });

  // The admin's revoke: the host's revoke (protocol §4.7) without the host's token; idempotent.
  router.post('/admin/agents/:agentId/revoke', async (req, res) => {
    const { agentId } = parseWith(agentIdParamsSchema, req.params, 'query');
    res.json(agentView(await admin.revokeAgentAsAdmin(deps, agentId), view()));
  });

  // Agents waiting for a person: pending registrations and open approvals of active agents.
  router.get('/admin/approvals', async (req, res) => {
    const query = parseWith(approvalsQuerySchema, req.query, 'query');
    const { waiting, truncated } = await listWaitingAgents(deps, query.limit);
    const ctx = view();
    res.json({ approvals: waiting.map((item) => waitingAgentView(item, ctx)), truncated });
  });

  router.post('/admin/agents/:agentId/expire', async (req, res) => {
    res.json(agentView(await admin.expireAgent(deps, req.params.agentId), view()));
  });

  router.post('/admin/agents/:agentId/exceed-absolute-lifetime', async (req, res) => {
    if (!deps.config.INSECURE_TEST_HOOKS) throw new ApiError('unauthorized', 'test hooks are disabled (INSECURE_TEST_HOOKS)');
    res.json(agentView(await admin.exceedAbsoluteLifetime(deps, req.params.agentId), view()));
  });

  // DESIGN §5: reload the policy artefact on an admin call; a refused artefact changes nothing.
  // With max_flips, the artefact is previewed against the recorded decisions first, and a reload
  // that would change more of them is refused (409, the preview in the body).
  router.post('/admin/policy/reload', async (req, res) => {
    const body = parseWith(policyReloadBodySchema, req.body ?? {}, 'body');
    const outcome = await guardedReload(deps, body.max_flips, body.decisions ?? deps.config.DECISION_LOG_MAX_RECORDS);
    if (!outcome.ok) throw new ApiError('reload_rejected', `the new policy artefact was refused: ${outcome.error}`);
    res.json({ sha256: outcome.sha256, generation: outcome.generation, ...(outcome.preview ? { preview: outcome.preview } : {}) });
  });

  // What a candidate artefact (the body, application/wasm) would change among the recorded
  // decisions; without a body, the artefact file as it is on disk now (what a reload would load).
  router.post('/admin/policy/preview', artefactBody, async (req, res) => {
    const query = parseWith(policyPreviewQuerySchema, req.query, 'query');
    res.json(await previewCandidate(deps, artefactOf(req), query.decisions ?? deps.config.DECISION_LOG_MAX_RECORDS));
  });

  // This instance's shadow policy: loaded from the body (application/wasm), its tally, removed, promoted.
  router.post('/admin/policy/shadow', artefactBody, async (req, res) => {
    const artefact = artefactOf(req);
    if (artefact === null) throw new ApiError('invalid_request', 'body: must be the shadow artefact (Content-Type: application/wasm)');
    res.json(await loadShadow(deps, artefact));
  });
  router.get('/admin/policy/shadow', (_req, res) => {
    res.json(shadowStatus(deps));
  });
  router.delete('/admin/policy/shadow', (_req, res) => {
    clearShadow(deps);
    res.status(204).end();
  });
  router.post('/admin/policy/shadow/promote', async (_req, res) => {
    const outcome = await promoteShadow(deps);
    if (!outcome.ok) throw new ApiError('reload_rejected', `the shadow artefact was refused: ${outcome.error}`);
    res.json({ sha256: outcome.sha256, generation: outcome.generation });
  });

  // The active policy artefact, as health shows it.
  router.get('/admin/policy', (_req, res) => {
    const info = deps.policy.info();
    res.json({ sha256: info.sha256, generation: info.generation, loaded_at: new Date(info.loadedAtMs).toISOString() });
  });

  router.get('/admin/operators', (_req, res) => {
    res.json({ operators: admin.listOperators(deps) });
  });

  // Re-imports plugins/ and swaps the operator set; a broken plugin changes nothing.
  router.post('/admin/operators/reload', async (_req, res) => {
    if (!deps.reloadOperators) throw new ApiError('not_found', 'this instance cannot reload its operators');
    try {
      res.json({ operators: await deps.reloadOperators() });
    } catch (err) {
      // The same answer as a refused policy: the request was fine, what is on disk is not.
      throw new ApiError('reload_rejected', `the operator plugins were refused: ${(err as Error).message}`);
    }
  });

  router.post('/admin/capabilities/:name/remove', (req, res) => {
    if (!deps.catalog.setRemoved(req.params.name, true)) throw new ApiError('capability_not_found', 'no capability has this name');
    res.json({ name: req.params.name, removed: true });
  });

  router.post('/admin/capabilities/:name/restore', (req, res) => {
    if (!deps.catalog.setRemoved(req.params.name, false)) throw new ApiError('capability_not_found', 'no capability has this name');
    res.json({ name: req.params.name, removed: false });
  });

  // Remembers a refusal's code for the call's audit event; the app's error handler answers it.
  router.use('/admin', (err: unknown, _req: Request, res: Response, next: NextFunction) => {
    res.locals.auditCode = isApiError(err) ? err.code : 'internal_error';
    next(err);
  });

  return router;
}

function requireAdmin(deps: ServiceDeps) {
  return (req: Request, res: Response, next: NextFunction) => {
    requireAdminToken(tokenOf(req), deps.config.ADMIN_TOKEN);
    res.locals.adminAuthenticated = true;
    next();
  };
}

const AGENT_PATH = /^\/admin\/agents\/([^/]{1,128})/;
const HOST_PATH = /^\/admin\/hosts\/([^/]{1,128})/;

// Case-insensitive, as Express routes.
const AUDIT_READ_PATH = /^\/admin\/audit\/?$/i;

/**
 * One `admin.call` event per admin request, when it ends (answered, or its client gone): method,
 * path (without the query), status, the refusal's code, and the agent or host the path names. A
 * call whose token did not verify is capped (audit/log.ts): anyone can send one.
 * A read of the trail that succeeded is no event (docs/stances.md, "Reads of the audit trail"): a
 * follower polling every 2 s would otherwise fill the trail with its own reads. It is still
 * counted (agentgate_http_requests_total, route /admin/audit) and has its access line.
 */
function recordAdminCall(deps: ServiceDeps, req: Request, res: Response): void {
  const path = req.originalUrl.split('?')[0] ?? '';
  const status = res.statusCode;
  if ((req.method === 'GET' || req.method === 'HEAD') && status < 400 && AUDIT_READ_PATH.test(path)) return;
  const named = (pattern: RegExp) => {
    const match = pattern.exec(path)?.[1];
    try {
      return match === undefined ? undefined : decodeURIComponent(match);
    } catch {
      return match;
    }
  };
  deps.audit.record({
    type: 'admin.call', actor: 'admin', method: req.method, path, status,
    outcome: status < 400 ? 'ok' : status < 500 ? 'refused' : 'failed',
    code: typeof res.locals.auditCode === 'string' ? res.locals.auditCode : undefined,
    ...(res.writableFinished ? {} : { aborted: true }),
    agent_id: named(AGENT_PATH), host_id: named(HOST_PATH), request_id: res.locals.requestId as string | undefined,
  }, { capped: res.locals.adminAuthenticated !== true });
}
