// `prefix`: a string argument starts with one of the listed prefixes.
// Constraint: {"path": {"prefix": ["/reports/", "/exports/"]}}
import { z } from 'zod';

export const name = 'prefix';
export const description = 'the argument is a string starting with one of the listed prefixes';
export const operand = z.array(z.string().min(1).max(256)).min(1).max(100);

export function evaluate(prefixes: string[], actual: unknown): boolean {
  return typeof actual === 'string' && prefixes.some((p) => actual.startsWith(p));
}
