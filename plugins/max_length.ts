// `max_length`: a string argument has at most N characters (Unicode code points).
// Constraint: {"note": {"max_length": 140}}
import { z } from 'zod';

export const name = 'max_length';
export const description = 'the argument is a string of at most N characters (code points)';
export const operand = z.number().int().min(0).max(1_000_000);

export function evaluate(limit: number, actual: unknown): boolean {
  if (typeof actual !== 'string') return false;
  // Length in UTF-16 units bounds the code point count from above, so most strings need no scan.
  if (actual.length <= limit) return true;
  let count = 0;
  for (const _ of actual) if (++count > limit) return false;
  return true;
}
