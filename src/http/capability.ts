// Capability resources (protocol §4.1, §4.2, §9).
import type { IRouter } from 'express';
import { describeCapability, grantStatus, listCapabilities, resolveViewer } from '../services/capabilities.ts';
import { executeBatch } from '../services/batch-execute.ts';
import { spendAddressBudget } from '../services/budgets.ts';
import type { ServiceDeps } from '../services/deps.ts';
import { executeCapability } from '../services/execute.ts';
import { parseWith, tokenOf } from './parse.ts';
import { batchExecuteBodySchema, describeQuerySchema, executeBodySchema, listQuerySchema } from './schemas.ts';

/**
 * Adds the capability routes to `router`. The app passes itself (src/app.ts), so the hot path's
 * route is matched by the app's own router rather than through a nested one, whose entry and exit
 * (path trimming, saving and restoring the request's routing state) cost every execute.
 */
export function addCapabilityRoutes(router: IRouter, deps: ServiceDeps): void {
  // Anonymous listing and describe spend the caller address's budget (protocol §11.5).
  router.get(['/capability/list', '/capability/describe'], async (req, _res, next) => {
    if (!req.headers.authorization) await spendAddressBudget(deps, req.ip);
    next();
  });

  // Protocol §4.1
  router.get('/capability/list', async (req, res) => {
    const query = parseWith(listQuerySchema, req.query, 'query');
    const viewer = await resolveViewer(deps, tokenOf(req));
    const { page, hasMore, nextCursor } = listCapabilities(deps, viewer, query);
    res.set('Cache-Control', viewer.kind === 'anonymous' ? 'public, max-age=300' : 'private, max-age=300');
    res.json({
      capabilities: page.map((c) => ({
        name: c.name,
        description: c.description,
        ...(c.location ? { location: c.location } : {}),
        ...(viewer.kind === 'agent' ? { grant_status: grantStatus(viewer, c.name) } : {}),
      })),
      next_cursor: nextCursor,
      has_more: hasMore,
    });
  });

  // Protocol §4.2
  router.get('/capability/describe', async (req, res) => {
    const query = parseWith(describeQuerySchema, req.query, 'query');
    const viewer = await resolveViewer(deps, tokenOf(req));
    const c = describeCapability(deps, viewer, query.name);
    res.set('Cache-Control', viewer.kind === 'anonymous' ? 'public, max-age=300' : 'private, max-age=300');
    res.json({
      name: c.name,
      description: c.description,
      ...(c.location ? { location: c.location } : {}),
      input: c.input ?? { type: 'object' },
      ...(c.output ? { output: c.output } : {}),
      ...(viewer.kind === 'agent' ? { grant_status: grantStatus(viewer, c.name) } : {}),
    });
  });

  // Protocol §9, DESIGN §2: the hot path.
  router.post('/capability/execute', async (req, res) => {
    const body = parseWith(executeBodySchema, req.body, 'body');
    const data = await executeCapability(deps, tokenOf(req), { capability: body.capability, arguments: body.arguments ?? {} }, res.locals.requestId as string | undefined);
    res.json({ data });
  });

  // Protocol §3.2 (reference-server extension): the calls of one agent JWT, authenticated once.
  router.post('/capability/batch-execute', async (req, res) => {
    const body = parseWith(batchExecuteBodySchema, req.body, 'body');
    const responses = await executeBatch(deps, tokenOf(req), body.requests, res.locals.requestId as string | undefined);
    res.json({ responses });
  });
}
