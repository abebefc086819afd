// Bounds the nesting of every JSON body before any other work (SECURITY.md). The body cap
// (MAX_BODY_BYTES) bounds size, but 64 KiB of brackets nest some 30,000 levels deep, and deep
// values cost every later step that walks them: schema checks, the policy's JSON parser, logging.
// So depth is checked right after parsing, iteratively (a recursive walk would itself be the risk).
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../errors.ts';

/** True when `value` nests objects and arrays more than `maxDepth` levels deep (`{}` is 1 level). */
function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  if (maxDepth < 1) return true;
  // Every body passes here, so the walk allocates little: two parallel stacks (the objects still to
  // look into and their levels) instead of an entry object per node, and the children are read in
  // place (an index loop for arrays, for...in with an own-property check for objects) instead of
  // through an Object.values copy. An object is refused as soon as it is found below the limit.
  const pending: object[] = [value];
  const levels: number[] = [1];
  while (pending.length > 0) {
    const current = pending.pop()!;
    const childLevel = levels.pop()! + 1;
    if (Array.isArray(current)) {
      for (let i = 0; i < current.length; i++) {
        const child: unknown = current[i];
        if (child === null || typeof child !== 'object') continue;
        if (childLevel > maxDepth) return true;
        pending.push(child);
        levels.push(childLevel);
      }
    } else {
      for (const key in current) {
        if (!Object.hasOwn(current, key)) continue;
        const child: unknown = (current as Record<string, unknown>)[key];
        if (child === null || typeof child !== 'object') continue;
        if (childLevel > maxDepth) return true;
        pending.push(child);
        levels.push(childLevel);
      }
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
