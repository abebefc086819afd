// The policy engine as services use it, with its decisions timed for metrics and, at LOG_LEVEL
// debug, each decision's input and outcome logged. Arguments are the caller's data (amounts,
// accounts, messages), so the debug line keeps their keys and replaces their values by their JSON
// type; violations are logged by field and operator, without the `actual` value.
// Nothing here changes a decision: the engine's answer or exception passes through untouched.
import { performance } from 'node:perf_hooks';
import { debugEnabled, type Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { EXECUTE_ENTRYPOINT, GRANTS_ENTRYPOINT } from './golden.ts';
import type { ExecuteInput, ExecuteOutput, GrantsInput, GrantsOutput, PolicyEngine } from './types.ts';

/** Wraps `engine`; returns it unchanged when neither metrics nor debug lines would use the wrapper. */
export function instrumentPolicy(engine: PolicyEngine, metrics: Metrics, logger: Logger): PolicyEngine {
  const logInputs = debugEnabled(logger);
  if (!metrics.enabled && !logInputs) return engine;
  const timed = <T>(entrypoint: string, decide: () => T): T => {
    const startedAt = performance.now();
    try {
      return decide();
    } finally {
      metrics.policyEvaluation(entrypoint, (performance.now() - startedAt) / 1000);
    }
  };
  return {
    decideGrants(input: GrantsInput): GrantsOutput {
      if (logInputs) logger.debug('policy input', { entrypoint: GRANTS_ENTRYPOINT, input });
      const output = timed(GRANTS_ENTRYPOINT, () => engine.decideGrants(input));
      if (logInputs) logger.debug('policy decision', { entrypoint: GRANTS_ENTRYPOINT, decisions: output.decisions.map((d) => ({ capability: d.capability, decision: d.decision })) });
      return output;
    },
    decideExecute(input: ExecuteInput, operator?: (name: string, operand: unknown, actual: unknown) => boolean): ExecuteOutput {
      if (logInputs) logger.debug('policy input', { entrypoint: EXECUTE_ENTRYPOINT, input: { ...input, arguments: redactArgumentValues(input.arguments) } });
      const output = timed(EXECUTE_ENTRYPOINT, () => engine.decideExecute(input, operator));
      if (logInputs) {
        logger.debug('policy decision', {
          entrypoint: EXECUTE_ENTRYPOINT, allow: output.allow, grantId: output.grant_id, reason: output.reason,
          violations: output.violations.map((v) => ({ field: v.field, operators: Object.keys(v.constraint) })),
        });
      }
      return output;
    },
    info: () => engine.info(),
  };
}

/**
 * The argument values replaced by their JSON type, the keys kept: a debug line may say which
 * fields a call carried, never what was in them.
 */
function redactArgumentValues(args: Record<string, unknown>): Record<string, string> {
  const redacted: Record<string, string> = {};
  for (const key of Object.keys(args)) {
    const value = args[key];
    redacted[key] = `[${value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value}]`;
  }
  return redacted;
}
