// GET /metrics: the Prometheus exposition. Metrics say how much traffic each agent
// endpoint gets, how often it refuses and why, and how the dependencies behave, which is worth
// something to an attacker probing the server, so they are never public: they are served either
// on the main port behind a bearer token (METRICS_TOKEN), or on a listener of their own
// (METRICS_PORT, which a deployment keeps off the public network; the token is checked there too
// when set). With neither, nothing is served and nothing is recorded.
import express, { Router, type Express } from 'express';
import { requireMetricsToken } from '../auth/operator-tokens.ts';
import type { Logger } from '../logger.ts';
import { errorHandler, notFoundHandler } from './errors.ts';
import { tokenOf } from './parse.ts';

/** Produces the exposition: one process's registry, or the cluster primary's aggregate of its workers. */
export type RenderMetrics = () => Promise<{ contentType: string; body: string }>;

/** The /metrics route; `token` undefined means the listener itself is the guard (METRICS_PORT). */
export function metricsRouter(render: RenderMetrics, token: string | undefined): Router {
  const router = Router();
  router.get('/metrics', async (req, res) => {
    if (token !== undefined) requireMetricsToken(tokenOf(req), token);
    const { contentType, body } = await render();
    res.set('Cache-Control', 'no-store').type(contentType).send(body);
  });
  return router;
}

/**
 * The app of the separate metrics listener (METRICS_PORT): /metrics and nothing else. Scrapes are
 * not access-logged; they are the monitoring system's, not the service's traffic.
 */
export function metricsApp(render: RenderMetrics, token: string | undefined, logger: Logger): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(metricsRouter(render, token));
  app.use(notFoundHandler);
  app.use(errorHandler(logger));
  return app;
}
