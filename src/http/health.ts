// Liveness and readiness for operators, orchestrators and load balancers (what is ready is decided
// by services/health.ts).
// /healthz says the process is up and serving HTTP, and nothing else: a liveness probe that failed
// whenever Redis did would restart every instance during a Redis outage, which helps nobody.
// /readyz says whether this instance can do its work (store reachable, policy loaded, operators
// loaded) and, when not, what is wrong, so traffic goes elsewhere until it is.
import { Router } from 'express';
import type { ServiceDeps } from '../services/deps.ts';
import { readiness } from '../services/health.ts';
import { requestContextOf } from './access.ts';

export function healthRouter(deps: ServiceDeps): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    const policy = deps.policy.info();
    res.set('Cache-Control', 'no-store').json({
      status: 'ok',
      uptime_seconds: Math.round(process.uptime()),
      // In-process facts, cheap to give: which policy this instance enforces.
      policy: { sha256: policy.sha256, loaded_at: new Date(policy.loadedAtMs).toISOString(), generation: policy.generation },
    });
  });
  router.get('/readyz', async (_req, res) => {
    const checks = await readiness(deps);
    const problems = Object.values(checks).flatMap((c) => (c.ok ? [] : [c.problem ?? 'unknown problem']));
    res.set('Cache-Control', 'no-store');
    if (problems.length === 0) {
      res.json({ status: 'ready', checks });
      return;
    }
    // The error body of every other refusal (a 5xx: with the request id), with the checks that say what is wrong.
    const context = requestContextOf(res);
    if (context) context.errorCode = 'service_unavailable';
    res.status(503).json({
      error: 'service_unavailable', message: `not ready: ${problems.join('; ')}`, ...(context ? { request_id: context.requestId } : {}), status: 'not_ready', checks,
    });
  });
  return router;
}
