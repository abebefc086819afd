// The admin API (DESIGN §8), guarded by a bearer token (ADMIN_TOKEN). Without a token configured
// every admin route answers 403: the API is off. Every call, refused or not, is recorded in the
// audit trail (`admin.call`: method, path, status; never the body or the token), except a read of
// the trail that succeeded (docs/stances.md, "Reads of the audit trail"); the trail is read here
// (GET /admin/audit).
import { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { requireAdminToken } from '../auth/operator-tokens.ts';
import { AUDIT_EVENT_FAMILIES, AUDIT_ID_PATTERN, parseAuditTime } from '../audit/events.ts';
import { ApiError, isApiError } from '../errors.ts';
import * as admin from '../services/admin.ts';
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
  router.post('/admin/policy/reload', async (_req, res) => {
    if (!deps.reloadPolicy) throw new ApiError('not_found', 'this instance cannot reload its policy');
    const outcome = await deps.reloadPolicy();
    if (!outcome.ok) throw new ApiError('reload_rejected', `the new policy artefact was refused: ${outcome.error}`);
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
