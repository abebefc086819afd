// How one call of a plugin's `evaluate` is read (DESIGN §6: anything but `true` is a violation).
// The same reading runs in the plugin worker and in the in-process registry, so the two cannot
// disagree. A plugin is trusted code written by a platform team, but it can still be wrong: it can
// throw, answer "yes", or be async and answer a promise. None of these may allow a call, and none
// may escape: a rejected promise nobody handles would end the process.
import { describeThrown } from '../common/thrown.ts';

/** What one evaluation produced. Only `allowed` admits the argument. */
export type OperatorOutcome =
  | { kind: 'allowed' }
  | { kind: 'refused' }
  /** `evaluate` threw; the message is for the log only. */
  | { kind: 'threw'; message: string }
  /** `evaluate` answered a promise or another thenable: an async operator (never awaited). */
  | { kind: 'promise' }
  /** `evaluate` answered something that is neither `true` nor `false`. */
  | { kind: 'not_boolean'; type: string }
  /** The decision's plugin calls ran past their time budget; the worker running them was replaced. */
  | { kind: 'timeout'; budgetMs: number }
  /** The worker running the call died (a crash inside a plugin); it was replaced. */
  | { kind: 'crashed'; message: string }
  /**
   * Not run: every grant that needs the call overran the budget recently and is tripped (trips.ts),
   * so the call is a violation without reaching a worker.
   */
  | { kind: 'tripped' };

/** The outcomes that mean the plugin misbehaved (worth a log line), as opposed to a plain `false`. */
export const isPluginFailure = (outcome: OperatorOutcome): boolean => outcome.kind !== 'allowed' && outcome.kind !== 'refused';

const ignore = (): void => {};

/**
 * Calls `evaluate(operand, actual)` and reads the answer without ever throwing. A thenable answer is
 * given a rejection handler (so its rejection cannot become an unhandled one) and counts as a
 * violation: the policy decides synchronously, so an answer that arrives later is never read.
 */
export function runOperator(evaluate: (operand: unknown, actual: unknown) => unknown, operand: unknown, actual: unknown): OperatorOutcome {
  let answer: unknown;
  try {
    answer = evaluate(operand, actual);
  } catch (error) {
    return { kind: 'threw', message: describeThrown(error) };
  }
  if (answer === true) return { kind: 'allowed' };
  if (answer === false) return { kind: 'refused' };
  if (isThenable(answer)) {
    swallowRejection(answer);
    return { kind: 'promise' };
  }
  return { kind: 'not_boolean', type: answer === null ? 'null' : typeof answer };
}

/** Reading `then` may itself run plugin code (a getter or a Proxy), so it is guarded too. */
function isThenable(value: unknown): boolean {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false;
  try {
    return typeof (value as { then?: unknown }).then === 'function';
  } catch {
    return false;
  }
}

/**
 * Promise.resolve adopts any thenable into a native promise (calling its `then` in a later job, where
 * a throw becomes a rejection), and the native `then` attaches the handler: nothing the plugin
 * defined is trusted to do it.
 */
function swallowRejection(thenable: unknown): void {
  try {
    Promise.prototype.then.call(Promise.resolve(thenable), ignore, ignore);
  } catch {
    // Promise.resolve reads `constructor`, which a hostile object could make throw; then there is
    // no promise to handle, and the answer is refused anyway.
  }
}
