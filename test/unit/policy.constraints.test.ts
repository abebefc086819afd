// The constraint semantics of DESIGN §6, run through the compiled default policy the service tests
// use (test/fixtures/policies/service.wasm, see test/support/policies.ts) with the shipped operator
// plugins (plugins/) answering agentgate.operator, as agentgate wires them. The cases live in test/cases/constraints.json, which
// test/integration/policy.parity.test.ts also runs through HTTP, so the two cannot drift apart.
//
// Case format: {name, grantTime?, constraints, other_grants?, arguments, expected: {allow, grant?,
// violations}}. `constraints` belongs to the first grant; `other_grants` lists the constraints of
// further grants in order; `expected.grant` is the index of the grant that allows (default 0).
// `grantTime` is the error code (400) with which the server refuses the first grant's constraints
// when they are requested; the HTTP test asserts that refusal. Here the policy still sees such a
// grant, as it would one made before an operator was removed, and must fail closed on it.
import { beforeAll, describe, expect, it } from 'vitest';
import { loadPlugins } from '../../src/operators/plugin-loader.ts';
import { BUILTIN_OPERATORS, OperatorRegistry } from '../../src/operators/registry.ts';
import { loadPolicyEngine } from '../../src/policy/engine.ts';
import type { WasmPolicyEngine } from '../../src/policy/engine.ts';
import type { ExecuteInput } from '../../src/policy/types.ts';
import { SERVICE_POLICY } from '../support/policies.ts';
import { CONSTRAINT_CASES, type ConstraintCase } from '../support/constraint-cases.ts';
import { evaluateInProcess } from '../support/operators.ts';


const root = new URL('../../', import.meta.url);
const cases = CONSTRAINT_CASES;

function executeInput(c: ConstraintCase): ExecuteInput {
  const all = [c.constraints, ...(c.other_grants ?? [])];
  return {
    now_ms: 1_767_225_600_000,
    agent: { id: 'agt_cases', mode: 'delegated', host_id: 'hst_cases' },
    capability: 'transfer_money',
    arguments: c.arguments,
    grants: all.map((constraints, i) => ({ id: `grt_${i}`, constraints })),
  };
}

/** Operator names used by a case's grants; exact values count as '(exact)'. */
const operatorsOf = (c: ConstraintCase) => [c.constraints, ...(c.other_grants ?? [])].flatMap((g) => Object.values(g ?? {}).flatMap((v) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.keys(v) : ['(exact)'])));

describe('constraint cases through the compiled policy', () => {
  let engine: WasmPolicyEngine;
  let registry: OperatorRegistry;
  beforeAll(async () => {
    registry = new OperatorRegistry(await loadPlugins(new URL('plugins', root).pathname));
    engine = await loadPolicyEngine({
      ...SERVICE_POLICY,
      operator: (name, operand, actual) => evaluateInProcess(registry, name, operand, actual),
    });
  });

  it('covers every built-in operator, a shipped plugin operator and an unknown one', () => {
    const ops = new Set(cases.flatMap(operatorsOf));
    for (const op of ['(exact)', ...BUILTIN_OPERATORS.map((o) => o.name), 'prefix', 'starts_with']) expect(ops).toContain(op);
    expect(registry.has('prefix')).toBe(true);
    expect(registry.has('starts_with')).toBe(false);
  });

  it('marks a grant-time refusal on every case whose operators the server does not know', () => {
    for (const c of cases) {
      const unknown = operatorsOf(c).filter((op) => op !== '(exact)' && !registry.has(op));
      if (unknown.length > 0) expect(c.grantTime, c.name).toBe('unknown_constraint_operator');
    }
  });

  it.each(cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const out = engine.decideExecute(executeInput(c));
    expect(out.allow).toBe(c.expected.allow);
    // toStrictEqual: `actual` must be absent (not undefined, not null) when the argument was missing.
    expect(out.violations).toStrictEqual(c.expected.violations);
    if (c.expected.allow) expect(out.grant_id).toBe(`grt_${c.expected.grant ?? 0}`);
    else expect(out.grant_id).toBeUndefined();
  });
});
