// A plugin operator evaluated in this process, for tests that ask the policy or a plugin without
// the server's worker threads: the same reading of an answer as the sandbox's workers
// (src/operators/outcome.ts runOperator), so the two cannot disagree. Never throws: an unknown
// operator, an operand that no longer fits the plugin's schema, an exception, a promise or any
// answer but `true` reads as a violation.
import { runOperator } from '../../src/operators/outcome.ts';
import type { OperatorRegistry } from '../../src/operators/registry.ts';

export function evaluateInProcess(registry: OperatorRegistry, name: string, operand: unknown, actual: unknown): boolean {
  const plugin = registry.get(name);
  if (!plugin?.evaluate) return false;
  try {
    if (!plugin.operand.safeParse(operand).success) return false;
  } catch {
    return false;
  }
  return runOperator(plugin.evaluate as (operand: unknown, actual: unknown) => unknown, operand, actual).kind === 'allowed';
}
