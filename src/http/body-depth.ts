// Bounds the nesting of every JSON body before any other work (SECURITY.md). The body cap
// (MAX_BODY_BYTES) bounds size, but 64 KiB of brackets nest some 30,000 levels deep, and deep
// values cost every later step that walks them: schema checks, the policy's JSON parser, logging.
// So depth is checked right after parsing, iteratively (a recursive walk would itself be the risk).
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../errors.ts';

/** True when `value` nests objects and arrays more than `maxDepth` levels deep (`{}` is 1 level). */
function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const { value: current, depth } = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth + 1 > maxDepth) return true;
    for (const child of Object.values(current)) {
      if (child !== null && typeof child === 'object') stack.push({ value: child, depth: depth + 1 });
    }
  }
  return false;
}

export function bodyDepthLimit(maxDepth: number) {
  return (req: Request, _res: Response, next: NextFunction): void => {
    if (nestsDeeperThan(req.body, maxDepth)) {
      throw new ApiError('invalid_request', `the request body nests deeper than ${maxDepth} levels (MAX_JSON_DEPTH)`);
    }
    next();
  };
}
