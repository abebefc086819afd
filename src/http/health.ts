// Liveness and readiness for operators and load balancers, plus the active policy's identity.
import { Router } from 'express';
import type { ServiceDeps } from '../services/deps.ts';

export function healthRouter(deps: ServiceDeps): Router {
  const router = Router();
  router.get('/healthz', async (_req, res) => {
    const policy = deps.policy.info();
    let storeOk = true;
    try {
      await deps.store.ping();
    } catch {
      storeOk = false;
    }
    res.status(storeOk ? 200 : 503).json({
      status: storeOk ? 'ok' : 'degraded',
      store: { kind: deps.store.kind, ok: storeOk },
      policy: { sha256: policy.sha256, loaded_at: new Date(policy.loadedAtMs).toISOString(), generation: policy.generation },
    });
  });
  return router;
}
