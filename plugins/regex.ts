// `regex`: a string argument matches a regular expression that is safe to run on every request.
// Constraint: {"currency": {"regex": "^[A-Z]{3}$"}}
//
// JavaScript regular expressions backtrack, so a careless pattern such as (a+)+b can take
// exponential time. Only patterns whose worst case stays small are accepted: no backreferences
// or lookaround, no quantifier on a group (other than ?), at most two unbounded quantifiers
// (*, +, {n,}), bounded repeats of at most 100, a pattern of at most 128 characters, and
// arguments of at most 256 characters (longer ones violate).
import { z } from 'zod';

const MAX_PATTERN_CHARS = 128;
const MAX_ARGUMENT_CHARS = 256;
const MAX_UNBOUNDED_QUANTIFIERS = 2;
const MAX_REPEAT = 100;
const MAX_CACHED = 1000;

/** Why a pattern is unsafe, or null when it is acceptable. */
export function unsafeReason(source: string): string | null {
  if (source.length > MAX_PATTERN_CHARS) return `longer than ${MAX_PATTERN_CHARS} characters`;
  try {
    new RegExp(source, 'u');
  } catch {
    return 'not a valid regular expression';
  }
  if (/\\[1-9]|\\k</.test(source)) return 'backreferences are not allowed';
  if (/\(\?<?[=!]/.test(source)) return 'lookaround is not allowed';
  if (/\)(?:[*+]|\{\d)/.test(source)) return 'a quantifier may not apply to a group';
  const unbounded = source.match(/(?<!\\)(?:[*+]|\{\d+,\})/g)?.length ?? 0;
  if (unbounded > MAX_UNBOUNDED_QUANTIFIERS) return `more than ${MAX_UNBOUNDED_QUANTIFIERS} unbounded quantifiers`;
  for (const repeat of source.matchAll(/\{(\d+)(?:,(\d+))?\}/g)) {
    if (Number(repeat[2] ?? repeat[1]) > MAX_REPEAT) return `repeats above ${MAX_REPEAT}`;
  }
  return null;
}

export const name = 'regex';
export const description = `the argument is a string (at most ${MAX_ARGUMENT_CHARS} characters) matching a safe regular expression`;
export const operand = z.string().min(1).superRefine((source, ctx) => {
  const reason = unsafeReason(source);
  if (reason) ctx.addIssue({ code: 'custom', message: `unsafe pattern: ${reason}` });
});

const compiled = new Map<string, RegExp>();

export function evaluate(source: string, actual: unknown): boolean {
  if (typeof actual !== 'string' || actual.length > MAX_ARGUMENT_CHARS) return false;
  let regex = compiled.get(source);
  if (!regex) {
    if (unsafeReason(source) !== null) return false;
    regex = new RegExp(source, 'u');
    if (compiled.size >= MAX_CACHED) compiled.delete(compiled.keys().next().value!);
    compiled.set(source, regex);
  }
  return regex.test(actual);
}
