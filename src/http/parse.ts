// Request parsing helpers: zod failures become 400 invalid_request naming the first problem.
import type { Request } from 'express';
import type { z } from 'zod';
import { bearerToken } from '../auth/jwt.ts';
import type { ApprovalHints } from '../domain/approval-method.ts';
import type { Constraints } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { RequestedCapability } from '../services/grant-decisions.ts';

export function parseWith<S extends z.ZodType>(schema: S, value: unknown, where: 'body' | 'query'): z.infer<S> {
  if (where === 'body' && (value === undefined || value === null || typeof value !== 'object' || Array.isArray(value))) {
    throw new ApiError('invalid_request', 'the request body must be a JSON object (Content-Type: application/json)');
  }
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const path = issue?.path.length ? issue.path.join('.') : where;
  throw new ApiError('invalid_request', `${path}: ${issue?.message ?? 'invalid'}`);
}

export const tokenOf = (req: Request): string | null => bearerToken(req.headers.authorization);

/** Normalises `capabilities` entries (name or {name, constraints}) into one shape. */
export function toRequested(entries: Array<string | { name: string; constraints?: Record<string, unknown> | undefined }>): RequestedCapability[] {
  return entries.map((e) => (typeof e === 'string' ? { name: e } : { name: e.name, constraints: e.constraints as Constraints | undefined }));
}

/** The approval-method hints of a parsed body, in the services' words (domain/approval-method.ts). */
export function hintsOf(body: { preferred_method?: string | undefined; login_hint?: string | undefined; binding_message?: string | undefined }): ApprovalHints {
  return { preferredMethod: body.preferred_method, loginHint: body.login_hint, bindingMessage: body.binding_message };
}
