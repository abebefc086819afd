// `regex`: a string argument matches a regular expression, in RE2 syntax.
// Constraint: {"currency": {"regex": "^[A-Z]{3}$"}}
//
// JavaScript's own regular expressions backtrack, so a pattern such as (a+)+b or a{0,99}a{0,99}b
// can take exponential or high-polynomial time on a short argument, and a check of the pattern's
// text cannot rule that out reliably (an audit froze the server for 91 s with a pattern the old
// check accepted). This operator uses re2js, a JavaScript port of RE2, whose matching time is linear
// in the argument's length by construction: it never backtracks. The price is RE2's syntax, which
// has no backreferences or lookaround (such patterns are refused when the grant is made).
// Patterns are at most 256 characters and arguments at most 1024; longer arguments violate.
import { RE2JS } from 're2js';
import { z } from 'zod';

const MAX_PATTERN_CHARS = 256;
const MAX_ARGUMENT_CHARS = 1024;
const MAX_CACHED = 1000;

/** Why a pattern cannot be used, or null when it compiles under RE2. */
export function unusableReason(source: string): string | null {
  if (source.length > MAX_PATTERN_CHARS) return `longer than ${MAX_PATTERN_CHARS} characters`;
  try {
    RE2JS.compile(source);
    return null;
  } catch (error) {
    return `not a valid RE2 pattern (${(error as Error).message})`;
  }
}

export const name = 'regex';
export const description = `the argument is a string (at most ${MAX_ARGUMENT_CHARS} characters) matching a regular expression in RE2 syntax`;
export const operand = z.string().min(1).superRefine((source, ctx) => {
  const reason = unusableReason(source);
  if (reason) ctx.addIssue({ code: 'custom', message: `unusable pattern: ${reason}` });
});

const compiled = new Map<string, RE2JS>();

export function evaluate(source: string, actual: unknown): boolean {
  if (typeof actual !== 'string' || actual.length > MAX_ARGUMENT_CHARS) return false;
  let pattern = compiled.get(source);
  if (!pattern) {
    if (unusableReason(source) !== null) return false;
    pattern = RE2JS.compile(source);
    if (compiled.size >= MAX_CACHED) compiled.delete(compiled.keys().next().value!);
    compiled.set(source, pattern);
  }
  return pattern.matcher(actual).find();
}
