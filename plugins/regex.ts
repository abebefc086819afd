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
//
// Linear is not the same as cheap. RE2 simulates the compiled program on every character, so a
// match costs up to (instructions in the program) × (argument length), and counted repetition
// multiplies instructions: `(?i)(?:[a-z]|[0-9]|_){100,1000}@` is 32 characters but 1903 instructions,
// 16-27 ms per match of a 1 KB argument here once warm and up to 60 ms on a worker's first call,
// which a loaded server turns into an overrun of the 50 ms plugin budget on every call. So a
// pattern is also refused when its compiled program is larger than MAX_PROGRAM_INSTRUCTIONS, a
// bound on its worst case.
import { RE2JS } from 're2js';
import { z } from 'zod';

const MAX_PATTERN_CHARS = 256;
export const MAX_ARGUMENT_CHARS = 1024;
const MAX_CACHED = 1000;

/**
 * The largest compiled program (re2js `programSize()`, the instruction count the matcher steps
 * through per character) a pattern may have. Calibrated with `node bench/regex-calibration.ts`
 * (numbers in bench/RESULTS.md, "Plugin isolation"): on the reference machine (2 vCPU AMD EPYC,
 * Node 24.21.0, two runs), the most expensive patterns measured at or just under 500 instructions
 * took at most 22 ms for their first call in a fresh worker (compiling the pattern, then matching a
 * hostile 1024-character argument) and 8.4 ms per match once warm: under half the default 50 ms
 * PLUGIN_BUDGET_MS, which leaves the other half for the decision's other plugin calls and a busy
 * machine. Near 1000 instructions the same families took up to 33 ms (15 ms warm), and the finding's
 * pattern, 1903 instructions, up to 60 ms (27 ms warm): an overrun on a loaded machine.
 * A deployment that lowers PLUGIN_BUDGET_MS far below 50 ms should lower this bound too; a call
 * that still overruns costs only its own grant (it is tripped, plugins/README.md).
 */
export const MAX_PROGRAM_INSTRUCTIONS = 500;

/**
 * Each pattern's compiled form, or why it cannot be used. Compiling is the expensive part of the
 * grant-time check (up to tens of milliseconds for a large program), and the plugin worker checks
 * the operand again on every call, so each pattern is compiled once per thread. Bounded: the
 * oldest entry goes first.
 */
const compiled = new Map<string, RE2JS | string>();

function compileChecked(source: string): RE2JS | string {
  let pattern: RE2JS;
  try {
    pattern = RE2JS.compile(source);
  } catch (error) {
    return `not a valid RE2 pattern (${(error as Error).message})`;
  }
  const instructions = pattern.programSize();
  if (instructions > MAX_PROGRAM_INSTRUCTIONS) {
    return `too costly to match: it compiles to ${instructions} RE2 instructions, more than ${MAX_PROGRAM_INSTRUCTIONS}; ` +
      `matching time grows with instructions × argument length, and at this size a ${MAX_ARGUMENT_CHARS}-character ` +
      'argument could overrun the plugin time budget (use fewer or smaller counted repetitions such as {100,1000})';
  }
  return pattern;
}

/**
 * What the pattern's counted repetitions ({n}, {n,}, {n,m}, not escaped) add up to: each repeated
 * copy is at least one instruction, so a total over MAX_PROGRAM_INSTRUCTIONS compiles too large
 * anyway. Checked on the text first because compiling runs where the grant is checked, on the
 * server's event loop, and a 256-character pattern of large counts compiles for up to tens of
 * milliseconds before its size could refuse it.
 */
function repetitionTotal(source: string): number {
  let total = 0;
  for (const match of source.matchAll(/(?<!\\)\{(\d{1,7})(?:,(\d{0,7}))?\}/g)) total += Number(match[2] || match[1]);
  return total;
}

function lookup(source: string): RE2JS | string {
  if (source.length > MAX_PATTERN_CHARS) return `longer than ${MAX_PATTERN_CHARS} characters`;
  const repetitions = repetitionTotal(source);
  if (repetitions > MAX_PROGRAM_INSTRUCTIONS) {
    return `too costly to match: its counted repetitions add up to ${repetitions}, so it would compile to more than ${MAX_PROGRAM_INSTRUCTIONS} RE2 instructions `
      + '(use fewer or smaller counted repetitions)';
  }
  const known = compiled.get(source);
  if (known !== undefined) return known;
  const result = compileChecked(source);
  if (compiled.size >= MAX_CACHED) compiled.delete(compiled.keys().next().value!);
  compiled.set(source, result);
  return result;
}

/** Why a pattern cannot be used, or null when it compiles under RE2 within the size bound. */
export function unusableReason(source: string): string | null {
  const result = lookup(source);
  return typeof result === 'string' ? result : null;
}

export const name = 'regex';
export const description = `the argument is a string (at most ${MAX_ARGUMENT_CHARS} characters) matching a regular expression in RE2 syntax ` +
  `(at most ${MAX_PATTERN_CHARS} characters, compiling to at most ${MAX_PROGRAM_INSTRUCTIONS} instructions)`;
export const operand = z.string().min(1).superRefine((source, ctx) => {
  const reason = unusableReason(source);
  if (reason) ctx.addIssue({ code: 'custom', message: `unusable pattern: ${reason}` });
});

/**
 * Runs the matcher's code paths once at import (11-17 ms on the reference machine), so that a plugin
 * worker's first real call does not also pay for compiling re2js's own functions: in a fresh thread
 * that cost alone was 15-30 ms whatever the pattern (bench/RESULTS.md, "Plugin isolation"), and a
 * worker started to replace a terminated one would otherwise spend much of a decision's budget on it.
 */
function warmUp(): void {
  const sample = `${'aB3_é'.repeat(60)}@example.com`;
  for (const source of ['^[A-Z]{3}$', '(?i)[a-z0-9._%+-]+@example\\.com', '(?i)\\w{1,30}x', '\\pL{1,40}x', '(?:a?){60}b', '(?:ab|cd|[0-9])*@', 'x{2,}$']) {
    const pattern = RE2JS.compile(source);
    for (let i = 0; i < 3; i++) pattern.matcher(sample).find();
  }
}
warmUp();

export function evaluate(source: string, actual: unknown): boolean {
  if (typeof actual !== 'string' || actual.length > MAX_ARGUMENT_CHARS) return false;
  const pattern = lookup(source);
  if (typeof pattern === 'string') return false;
  return pattern.matcher(actual).find();
}
