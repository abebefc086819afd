// The constraint semantics of DESIGN §6, run through the real compiled policy
// (policies/dist/policy.wasm). The cases live in test/cases/constraints.json so that the operator
// unit tests can run the very same cases and the two evaluators cannot drift apart.
//
// Case format: {name, constraints, other_grants?, arguments, expected: {allow, grant?, violations}}.
// `constraints` belongs to the first grant; `other_grants` lists the constraints of further grants
// in order; `expected.grant` is the index of the grant that allows (default 0).
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadPolicyEngine } from '../../src/policy/engine.ts';
import type { WasmPolicyEngine } from '../../src/policy/engine.ts';
import type { ExecuteInput, Violation } from '../../src/policy/types.ts';

interface ConstraintCase {
  name: string;
  constraints: Record<string, unknown> | null;
  other_grants?: Array<Record<string, unknown> | null>;
  arguments: Record<string, unknown>;
  expected: { allow: boolean; grant?: number; violations: Violation[] };
}

const root = new URL('../../', import.meta.url);
const cases = JSON.parse(readFileSync(new URL('test/cases/constraints.json', root), 'utf8')) as ConstraintCase[];

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

describe('constraint cases through the compiled policy', () => {
  let engine: WasmPolicyEngine;
  beforeAll(async () => {
    engine = await loadPolicyEngine({
      wasmPath: new URL('policies/dist/policy.wasm', root).pathname,
      goldenPath: new URL('policies/golden.json', root).pathname,
    });
  });

  it('covers every built-in operator and an unknown one', () => {
    const ops = new Set(cases.flatMap((c) => Object.values(c.constraints ?? {}).flatMap((v) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.keys(v) : ['(exact)']))));
    for (const op of ['(exact)', 'eq', 'min', 'max', 'in', 'not_in', 'starts_with']) expect(ops).toContain(op);
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
