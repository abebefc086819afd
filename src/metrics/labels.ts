// The label values of request metrics and access lines, worked out from what Express knows after a
// request. Every value comes from a closed set, so no client can mint new time series: routes are
// the patterns the app declares (never the raw URL with its ids), methods a fixed list, error codes
// the table in src/errors.ts. Pure functions, tested in test/unit/metrics-labels.test.ts.

/** The label of a request no declared route matches (a 404, or a probe for paths that do not exist). */
export const UNMATCHED_ROUTE = '(unmatched)';

const METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The method as a label: one of the usual ones, anything else `OTHER`. */
export function methodLabel(method: string): string {
  return METHODS.has(method) ? method : 'OTHER';
}

/**
 * A matcher for the path patterns an app declares (`/admin/agents/:agentId/approve`). It answers
 * for requests Express refused before a route took them: a body that is not JSON, a missing admin
 * token. Patterns with syntax beyond `:name` segments (wildcards, optional groups) are left out:
 * agentgate declares none, and a pattern this cannot read must not match by accident.
 */
export class RoutePatterns {
  readonly #patterns: ReadonlyArray<{ pattern: string; regexp: RegExp }>;

  constructor(patterns: Iterable<string>) {
    const seen = new Set<string>();
    const compiled: Array<{ pattern: string; regexp: RegExp }> = [];
    for (const pattern of patterns) {
      if (seen.has(pattern) || !/^\/[A-Za-z0-9_.:/-]*$/.test(pattern)) continue;
      seen.add(pattern);
      const source = pattern
        .split('/')
        .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.]/g, '\\.')))
        .join('/');
      compiled.push({ pattern, regexp: new RegExp(`^${source}/?$`) });
    }
    this.#patterns = compiled;
  }

  /** The first declared pattern `path` matches, else UNMATCHED_ROUTE. */
  match(path: string): string {
    for (const { pattern, regexp } of this.#patterns) if (regexp.test(path)) return pattern;
    return UNMATCHED_ROUTE;
  }
}

/**
 * The route label of a request: the pattern of the route that took it (Express's `req.route.path`;
 * for a route declared with several paths, the one that is the request's path), else the first
 * declared pattern its path matches, else UNMATCHED_ROUTE. `originalUrl` is the request's URL as
 * received (Express's `req.originalUrl`, which mounted middleware never rewrites), query included.
 */
export function routeLabel(routePath: unknown, originalUrl: string, patterns: RoutePatterns): string {
  if (typeof routePath === 'string') return routePath;
  const query = originalUrl.indexOf('?');
  const path = query === -1 ? originalUrl : originalUrl.slice(0, query);
  if (Array.isArray(routePath) && routePath.includes(path)) return path;
  return patterns.match(path);
}

/**
 * The endpoints whose answer is an authorization decision of the server, by method and route:
 * what an agent may call, what a registration or a request for capabilities gets, whether a token
 * is active. Reads, pages and the admin API are requests, not decisions.
 */
const DECISION_ENDPOINTS_BY_POST_ROUTE: ReadonlyMap<string, string> = new Map([
  ['/capability/execute', 'execute'],
  ['/capability/batch-execute', 'batch_execute'],
  ['/agent/register', 'register'],
  ['/agent/request-capability', 'request_capability'],
  ['/agent/reactivate', 'reactivate'],
  ['/agent/introspect', 'introspect'],
]);

/** The decision endpoint a request was, or undefined when it was not one (every decision is a POST). */
export function decisionEndpoint(method: string, route: string): string | undefined {
  return method === 'POST' ? DECISION_ENDPOINTS_BY_POST_ROUTE.get(route) : undefined;
}

type DecisionOutcome = 'allowed' | 'refused' | 'failed';

/**
 * A decision's outcome from its status: answered (2xx: executed, registered; a registration that
 * waits for approval is answered too), refused (4xx, with its error code), or failed (5xx: the
 * server could not decide, and refused).
 */
export function decisionOutcome(status: number): DecisionOutcome {
  if (status >= 500) return 'failed';
  if (status >= 400) return 'refused';
  return 'allowed';
}

/** The `code` label: the refusal's error code, or `none` for an answer that is not a refusal. */
export function codeLabel(code: string | undefined): string {
  return code ?? 'none';
}
