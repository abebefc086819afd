// Agent resources (protocol §4.3–§4.8, §4.12, and the Docs' revoke-capability). Thin: parse,
// call one service, shape the response.
import { Router } from 'express';
import { requireIntrospectionToken } from '../auth/operator-tokens.ts';
import * as agents from '../services/agents.ts';
import { spendAddressBudget } from '../services/budgets.ts';
import type { ServiceDeps } from '../services/deps.ts';
import { introspectToken } from '../services/introspect.ts';
import { registerAgent } from '../services/registration.ts';
import { noteAgent } from '../request-context.ts';
import { hintsOf, parseWith, tokenOf, toRequested } from './parse.ts';
import {
  agentIdBodySchema,
  introspectBodySchema,
  reactivateBodySchema,
  registerBodySchema,
  requestCapabilityBodySchema,
  revokeCapabilityBodySchema,
  rotateAgentKeyBodySchema,
  statusQuerySchema,
} from './schemas.ts';
import { agentView, approvalView, deviceApprovalView, grantView, type ViewContext } from './views.ts';

export function agentRouter(deps: ServiceDeps): Router {
  const router = Router();
  const view = (): ViewContext => ({ config: deps.config, catalog: deps.catalog, userCodes: deps.userCodes, nowMs: deps.clock.nowMs() });

  // Protocol §4.3
  router.post('/agent/register', async (req, res) => {
    const body = parseWith(registerBodySchema, req.body, 'body');
    const snapshot = await registerAgent(deps, tokenOf(req), {
      name: body.name, hostName: body.host_name, mode: body.mode, capabilities: toRequested(body.capabilities ?? []), reason: body.reason,
      hints: hintsOf(body), clientIp: req.ip ?? 'unknown',
    });
    // A host new to the server has no id before this answer: the access line names what it created.
    noteAgent(snapshot.agent.id, snapshot.agent.hostId);
    res.status(200).json(agentView(snapshot, view()));
  });

  // Protocol §4.5
  router.get('/agent/status', async (req, res) => {
    const query = parseWith(statusQuerySchema, req.query, 'query');
    res.json(agentView(await agents.agentStatus(deps, tokenOf(req), query.agent_id), view()));
  });

  // Protocol §4.4 (a top-level status: docs/stances.md)
  router.post('/agent/request-capability', async (req, res) => {
    const body = parseWith(requestCapabilityBodySchema, req.body, 'body');
    const { snapshot, grants } = await agents.requestCapabilities(deps, tokenOf(req), toRequested(body.capabilities), body.reason, hintsOf(body));
    const ctx = view();
    const pending = grants.some((g) => g.status === 'pending');
    res.json({
      agent_id: snapshot.agent.id,
      status: pending ? 'pending' : 'active',
      agent_capability_grants: grants.map((g) => grantView(g, ctx.catalog)),
      ...(pending && snapshot.agent.approval ? { approval: approvalView(snapshot.agent.approval, ctx) } : {}),
    });
  });

  // Ref extension (docs/protocol.md §3.2): a fresh RFC 8628 code for an agent waiting for approval.
  router.post('/agent/device/code', async (req, res) => {
    const body = parseWith(agentIdBodySchema, req.body, 'body');
    const { approval } = await agents.newDeviceCode(deps, tokenOf(req), body.agent_id);
    const ctx = view();
    const { method: _method, ...rfc8628 } = deviceApprovalView(approval, ctx);
    res.set('Cache-Control', 'no-store').json({ device_code: approval.id, ...rfc8628 });
  });

  // Protocol §4.6
  router.post('/agent/reactivate', async (req, res) => {
    const body = parseWith(reactivateBodySchema, req.body, 'body');
    res.json(agentView(await agents.reactivateAgent(deps, tokenOf(req), body.agent_id, hintsOf(body)), view()));
  });

  // Protocol §4.7
  router.post('/agent/revoke', async (req, res) => {
    const body = parseWith(agentIdBodySchema, req.body, 'body');
    const snapshot = await agents.revokeAgent(deps, tokenOf(req), body.agent_id);
    res.json({ agent_id: snapshot.agent.id, status: 'revoked' });
  });

  // Protocol §4.8
  router.post('/agent/rotate-key', async (req, res) => {
    const body = parseWith(rotateAgentKeyBodySchema, req.body, 'body');
    const snapshot = await agents.rotateAgentKey(deps, tokenOf(req), body.agent_id, body.public_key);
    res.json({ agent_id: snapshot.agent.id, status: agentView(snapshot, view()).status });
  });

  // Docs/Ref extension: POST /agent/revoke-capability, by the agent itself or by its host.
  router.post('/agent/revoke-capability', async (req, res) => {
    const body = parseWith(revokeCapabilityBodySchema, req.body, 'body');
    const { snapshot, revoked } = await agents.revokeCapabilities(deps, tokenOf(req), body.agent_id, body.capabilities);
    res.json({ agent_id: snapshot.agent.id, revoked: [...new Set(revoked.map((g) => g.capability))], grant_ids: revoked.map((g) => g.id) });
  });

  // Protocol §4.12: server-to-server; a bearer token proves the caller is a resource server.
  router.post('/agent/introspect', async (req, res) => {
    await spendAddressBudget(deps, req.ip);
    requireIntrospectionToken(tokenOf(req), { introspection: deps.config.INTROSPECTION_TOKEN, admin: deps.config.ADMIN_TOKEN });
    const body = parseWith(introspectBodySchema, req.body, 'body');
    const result = await introspectToken(deps, body.token);
    if (!result.active) {
      res.json({ active: false });
      return;
    }
    const { agent, grants, sessionExpiresAtMs } = result.snapshot;
    const listed = result.capabilityClaim ? grants.filter((g) => result.capabilityClaim!.includes(g.capability)) : grants;
    const full = agentView(result.snapshot, view());
    res.json({
      active: true,
      agent_id: agent.id,
      host_id: agent.hostId,
      ...(agent.userId ? { user_id: agent.userId } : {}),
      agent_capability_grants: listed.map((g) => ({ capability: g.capability, status: g.status })),
      mode: agent.mode,
      ...(sessionExpiresAtMs !== null && full.expires_at ? { expires_at: full.expires_at } : {}),
    });
  });

  return router;
}
