// The static bearer tokens of the people and services that operate agentgate: the admin token and
// the resource servers' introspection token (DESIGN §8, protocol §4.12). Compared in constant time,
// so the comparison does not reveal how much of a guess was right.
import { timingSafeEqual } from 'node:crypto';
import { ApiError } from '../errors.ts';

/** Constant-time string equality (lengths may differ; that alone is not secret here). */
export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Admin API: off without ADMIN_TOKEN (403), 401 without a token, 403 for a wrong one. */
export function requireAdminToken(presented: string | null, adminToken: string | undefined): void {
  if (!adminToken) throw new ApiError('unauthorized', 'the admin API is disabled (set ADMIN_TOKEN)');
  if (!presented) throw new ApiError('authentication_required', 'the admin API requires Authorization: Bearer <ADMIN_TOKEN>');
  if (!sameSecret(presented, adminToken)) throw new ApiError('unauthorized', 'the admin token is not valid');
}

/** Introspection: the resource-server token, or the admin token; refused when neither is set. */
export function requireIntrospectionToken(presented: string | null, tokens: { introspection?: string | undefined; admin?: string | undefined }): void {
  const accepted = [tokens.introspection, tokens.admin].filter((t): t is string => t !== undefined);
  if (!presented || !accepted.some((t) => sameSecret(presented, t))) {
    throw new ApiError('authentication_required', 'introspection requires the resource-server bearer token (INTROSPECTION_TOKEN)');
  }
}

/** /metrics with METRICS_TOKEN set: 401 without a token, 403 for a wrong one (as the admin API). */
export function requireMetricsToken(presented: string | null, metricsToken: string): void {
  if (!presented) throw new ApiError('authentication_required', '/metrics requires Authorization: Bearer <METRICS_TOKEN>', undefined, { 'WWW-Authenticate': 'Bearer' });
  if (!sameSecret(presented, metricsToken)) throw new ApiError('unauthorized', 'the metrics token is not valid');
}
