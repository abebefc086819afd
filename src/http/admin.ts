// The admin API (DESIGN §8), guarded by a bearer token (ADMIN_TOKEN). Without a token configured
// every admin route answers 403: the API is off.
import { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { requireAdminToken } from '../auth/operator-tokens.ts';
import { ApiError } from '../errors.ts';
import * as admin from '../services/admin.ts';
import type { ServiceDeps } from '../services/deps.ts';
import { revokeHost } from '../services/hosts.ts';
import { parseWith, tokenOf } from './parse.ts';
import { adminApproveBodySchema, adminCreateHostBodySchema, adminDenyBodySchema } from './schemas.ts';
import { agentView, hostView, waitingAgentView } from './views.ts';

// The admin API's own inputs live here rather than in schemas.ts, which holds the protocol's
// request shapes (the OpenAPI document is generated from it; the admin API is not part of it).
const agentIdParamsSchema = z.object({ agentId: z.string().min(1).max(128) });
const approvalsQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(admin.MAX_LISTED_APPROVALS).default(admin.MAX_LISTED_APPROVALS),
});

export function adminRouter(deps: ServiceDeps): Router {
  const router = Router();
  const view = () => ({ config: deps.config, catalog: deps.catalog, userCodes: deps.userCodes, nowMs: deps.clock.nowMs() });
  router.use('/admin', requireAdmin(deps));

  router.post('/admin/hosts', async (req, res) => {
    const body = parseWith(adminCreateHostBodySchema, req.body, 'body');
    const host = await admin.preRegisterHost(deps, {
      publicKey: body.public_key, name: body.name, defaultCapabilities: body.default_capabilities, userId: body.user_id,
    });
    res.status(201).json(hostView(host));
  });

  router.get('/admin/hosts/:hostId', async (req, res) => {
    const host = await deps.store.getHost(req.params.hostId);
    if (!host) throw new ApiError('host_not_found', 'no host has this id');
    res.json(hostView(host));
  });

  router.post('/admin/hosts/:hostId/revoke', async (req, res) => {
    const host = await deps.store.getHost(req.params.hostId);
    if (!host) throw new ApiError('host_not_found', 'no host has this id');
    const { agentsRevoked } = await revokeHost(deps, host);
    res.json({ host_id: host.id, status: 'revoked', agents_revoked: agentsRevoked });
  });

  router.get('/admin/agents/:agentId', async (req, res) => {
    const snapshot = await deps.store.getAgent(req.params.agentId);
    if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
    res.json(agentView(snapshot, view()));
  });

  router.post('/admin/agents/:agentId/approve', async (req, res) => {
    const body = parseWith(adminApproveBodySchema, req.body ?? {}, 'body');
    const snapshot = await admin.approveAgent(deps, req.params.agentId, { capabilities: body.capabilities, userId: body.user_id, userCode: body.user_code });
    res.json(agentView(snapshot, view()));
  });

  router.post('/admin/agents/:agentId/deny', async (req, res) => {
    const body = parseWith(adminDenyBodySchema, req.body ?? {}, 'body');
    res.json(agentView(await admin.denyAgent(deps, req.params.agentId, { userId: body.user_id, userCode: body.user_code }), view()));
  });

  // The admin's revoke: the host's revoke (protocol §4.7) without the host's token; idempotent.
  router.post('/admin/agents/:agentId/revoke', async (req, res) => {
    const { agentId } = parseWith(agentIdParamsSchema, req.params, 'query');
    res.json(agentView(await admin.revokeAgent(deps, agentId), view()));
  });

  // Agents waiting for a person: pending registrations and open approvals of active agents.
  router.get('/admin/approvals', async (req, res) => {
    const query = parseWith(approvalsQuerySchema, req.query, 'query');
    const { waiting, truncated } = await admin.listWaitingAgents(deps, query.limit);
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

  return router;
}

function requireAdmin(deps: ServiceDeps) {
  return (req: Request, _res: Response, next: NextFunction) => {
    requireAdminToken(tokenOf(req), deps.config.ADMIN_TOKEN);
    next();
  };
}
