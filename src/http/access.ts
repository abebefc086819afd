// The first middleware of the app: gives each request its id (returned in X-Request-Id, quoted in
// 5xx bodies and every log line about the request), runs the request inside its RequestContext
// (src/request-context.ts), and when the answer is done writes the one access line and records the
// request's metrics: method, route pattern, status, agent and host where a signature proved them,
// the error code of a refusal, and the time taken.
//
// The access line holds no URL, query, header or body: route patterns carry no ids, and a user
// code typed into /device?user_code=... stays out of the log.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from '../logger.ts';
import { methodLabel, routeLabel, RoutePatterns } from '../metrics/labels.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { newRequestContext, runInRequestContext, type RequestContext } from '../request-context.ts';

const REQUEST_ID_HEADER = 'X-Request-Id';

/**
 * The status an access line and the metrics give a request whose client went away before its
 * answer was sent (nginx's convention), so an abandoned request is not counted as a 200.
 */
const CLIENT_CLOSED_STATUS = 499;

/** The request's context, set by the access middleware (absent for requests it never saw). */
export function requestContextOf(res: Response): RequestContext | undefined {
  return res.locals.requestContext as RequestContext | undefined;
}

export function accessLog(deps: { logger: Logger; metrics: Metrics; trustProxy: boolean }): RequestHandler {
  const { logger, metrics, trustProxy } = deps;
  // Ids are this instance's tag and a counter: unique across instances and restarts in practice,
  // cheap, and short enough to read out over the phone. They are not secrets.
  const instance = randomBytes(4).toString('hex');
  let sequence = 0;
  // Read from the app on first need, when every router has been added.
  let patterns: RoutePatterns | undefined;

  return (req: Request, res: Response, next: NextFunction) => {
    const startedAt = performance.now();
    const context = newRequestContext(`${instance}-${(++sequence).toString(36)}`);
    res.locals.requestId = context.requestId;
    res.locals.requestContext = context;
    res.setHeader(REQUEST_ID_HEADER, context.requestId);
    // 'close' comes once per response: after the answer is sent, or when the connection broke first.
    res.once('close', () => {
      const durationMs = performance.now() - startedAt;
      const sent = res.writableFinished;
      const status = sent ? res.statusCode : CLIENT_CLOSED_STATUS;
      const method = methodLabel(req.method);
      const route = routeLabel(req.route?.path, req.originalUrl, (patterns ??= new RoutePatterns(declaredRoutes(req.app))));
      metrics.request(method, route, status, durationMs / 1000, context.errorCode);
      // One shape for every line (pino leaves out undefined fields), which keeps building and
      // writing it cheap. Behind no proxy the address is the socket's, without Express parsing
      // X-Forwarded-For only to ignore it.
      logger.info('request', {
        requestId: context.requestId,
        method,
        route,
        status,
        durationMs: Math.round(durationMs * 100) / 100,
        agentId: context.agentId,
        hostId: context.hostId,
        code: context.errorCode,
        aborted: sent ? undefined : true,
        ip: trustProxy ? req.ip : req.socket.remoteAddress,
      });
    });
    runInRequestContext(context, next);
  };
}

interface RouterLayer {
  route?: { path?: unknown };
  handle?: { stack?: RouterLayer[] };
}

/**
 * Every path pattern the app's routes declare, through routers added with `app.use(router)`.
 * Express 5 exposes its router as `app.router`; its layers are read, never changed.
 */
function declaredRoutes(app: unknown): string[] {
  const patterns: string[] = [];
  const visit = (stack: RouterLayer[] | undefined) => {
    for (const layer of stack ?? []) {
      const path = layer.route?.path;
      if (typeof path === 'string') patterns.push(path);
      else if (Array.isArray(path)) patterns.push(...path.filter((p): p is string => typeof p === 'string'));
      else visit(layer.handle?.stack);
    }
  };
  visit((app as { router?: { stack?: RouterLayer[] } }).router?.stack);
  return patterns;
}
