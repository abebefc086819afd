// Plugin operators through the compiled default policy the service tests use
// (test/fixtures/policies/service.wasm, see test/support/policies.ts), DESIGN §6: the
// policy asks agentgate.operator(name, operand, actual) for every operator that is not built in,
// and the field is violated unless the evaluator answers true. A failing evaluator denies without
// corrupting the wasm instance (docs/research/opa-wasm.md, gotcha 3), so the next decision is right.
import { describe, expect, it } from 'vitest';
import { loadPolicyEngine } from '../../src/policy/engine.ts';
import type { OperatorEvaluator } from '../../src/policy/engine.ts';
import type { ExecuteInput } from '../../src/policy/types.ts';
import { SERVICE_POLICY } from '../support/policies.ts';

const artefact = SERVICE_POLICY;

type Call = [name: string, operand: unknown, actual: unknown];

/** What agentgate's registry can hold (src/operators/plugin-loader.ts): other names answer false. */
const PLUGIN_NAME = /^[a-z][a-z0-9_]{0,63}$/;

/**
 * The real artefact, with `answer` behind agentgate.operator for every name a plugin could have,
 * as agentgate's registry does. Calls made after loading (which runs golden.json) are recorded.
 */
async function engineWith(answer: (...call: Call) => unknown) {
  const calls: Call[] = [];
  const operator: OperatorEvaluator = (name, operand, actual) => {
    calls.push([name, operand, actual]);
    return (PLUGIN_NAME.test(name) ? answer(name, operand, actual) : false) as boolean;
  };
  const engine = await loadPolicyEngine({ ...artefact, operator });
  calls.length = 0;
  return { engine, calls };
}

function executeInput(args: Record<string, unknown>, ...constraints: Array<Record<string, unknown> | null>): ExecuteInput {
  return {
    now_ms: 1_767_225_600_000,
    agent: { id: 'agt_1', mode: 'delegated', host_id: 'hst_1' },
    capability: 'read_report',
    arguments: args,
    grants: constraints.map((c, i) => ({ id: `grt_${i + 1}`, constraints: c })),
  };
}

const endsWith = (name: string, operand: unknown, actual: unknown) => name === 'ends_with' && typeof actual === 'string' && actual.endsWith(String(operand));
const allowedBy = (grantId: string) => ({ allow: true, grant_id: grantId, violations: [] });

describe('plugin operators in the compiled policy', () => {
  it('allows when the plugin answers true, and hands it the name, operand and value unchanged', async () => {
    const { engine, calls } = await engineWith(() => true);
    const operand = { zones: ['a', 'b'], strict: true };
    expect(engine.decideExecute(executeInput({ target: { zone: 'a', n: 1.5 } }, { target: { within: operand } }))).toEqual(allowedBy('grt_1'));
    expect(calls).toContainEqual(['within', operand, { zone: 'a', n: 1.5 }]);
    expect(new Set(calls.map((c) => c[0]))).toEqual(new Set(['within']));
  });

  it('violates when the plugin answers false, naming the operator and only the failing operators', async () => {
    const { engine } = await engineWith(endsWith);
    const out = engine.decideExecute(executeInput({ code: 'ABC', n: 1 }, { code: { ends_with: 'Z', in: ['ABC'] }, n: { max: 5 } }));
    expect(out).toStrictEqual({ allow: false, reason: 'constraint violated', violations: [{ field: 'code', constraint: { ends_with: 'Z' }, actual: 'ABC' }] });
  });

  it('only `true` allows: a truthy answer that is not true is a violation', async () => {
    for (const answer of [1, 'yes', {}, [], null, undefined]) {
      const { engine } = await engineWith(() => answer);
      expect(engine.decideExecute(executeInput({ code: 'Z' }, { code: { ends_with: 'Z' } })).allow, JSON.stringify(answer)).toBe(false);
    }
  });

  it('a throwing evaluator denies, and the next decision is still correct on the same instance', async () => {
    let fail = false;
    const { engine } = await engineWith((...call) => {
      if (fail) throw new Error('plugin bug');
      return endsWith(...call);
    });
    const input = executeInput({ code: 'ABZ' }, { code: { ends_with: 'Z' } });
    expect(engine.decideExecute(input)).toEqual(allowedBy('grt_1'));
    fail = true;
    expect(engine.decideExecute(input)).toStrictEqual({ allow: false, reason: 'constraint violated', violations: [{ field: 'code', constraint: { ends_with: 'Z' }, actual: 'ABZ' }] });
    fail = false;
    expect(engine.decideExecute(input)).toEqual(allowedBy('grt_1'));
    expect(engine.decideExecute(executeInput({ code: 'ABC' }, { code: { ends_with: 'Z' } })).allow).toBe(false);
    expect(engine.decideExecute(executeInput({ amount: 5 }, { amount: { max: 10 } }))).toEqual(allowedBy('grt_1'));
    // The builtin caught the exception, so wasm never saw it and no instance had to be replaced.
    expect(engine.info().instanceReplacements).toBe(0);
  });

  it('a thrown non-Error (a string, as wasm throws) is caught the same way', async () => {
    const { engine } = await engineWith(() => {
      throw 'not an Error';
    });
    expect(engine.decideExecute(executeInput({ code: 'Z' }, { code: { ends_with: 'Z' } })).allow).toBe(false);
    expect(engine.decideExecute(executeInput({ amount: 5 }, { amount: { max: 10 } }))).toEqual(allowedBy('grt_1'));
    expect(engine.info().instanceReplacements).toBe(0);
  });

  it('a missing argument reaches the evaluator as null, and its violation carries no actual', async () => {
    const { engine, calls } = await engineWith(() => false);
    const out = engine.decideExecute(executeInput({}, { code: { ends_with: 'Z' } }));
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls) expect(call).toStrictEqual(['ends_with', 'Z', null]);
    expect(out.violations).toStrictEqual([{ field: 'code', constraint: { ends_with: 'Z' } }]);
  });

  it('a supplied null also reaches it as null; only the violation tells the two apart', async () => {
    const { engine, calls } = await engineWith(() => false);
    expect(engine.decideExecute(executeInput({ code: null }, { code: { ends_with: 'Z' } })).violations).toStrictEqual([{ field: 'code', constraint: { ends_with: 'Z' }, actual: null }]);
    expect(calls.at(-1)).toStrictEqual(['ends_with', 'Z', null]);
    const absentOk = await engineWith((_name, _operand, actual) => actual === null);
    expect(absentOk.engine.decideExecute(executeInput({}, { code: { absent: true } }))).toEqual(allowedBy('grt_1'));
  });

  it('built-in operators never reach the evaluator, so a plugin cannot loosen them', async () => {
    const { engine, calls } = await engineWith(() => true);
    const out = engine.decideExecute(executeInput({ n: 50, c: 'GBP' }, { n: { min: 1, max: 10 }, c: { in: ['EUR'] }, d: { not_in: [1] }, e: { eq: 1 } }));
    expect(out.allow).toBe(false);
    expect(out.violations.map((v) => v.field)).toEqual(['c', 'e', 'n']);
    expect(calls).toEqual([]);
  });

  it('a plugin operator on a later grant can allow the call, and that grant is named', async () => {
    const { engine } = await engineWith(endsWith);
    expect(engine.decideExecute(executeInput({ code: 'ABZ' }, { code: { ends_with: 'Q' } }, { code: { ends_with: 'Z' } }))).toEqual(allowedBy('grt_2'));
  });

  it('asks the evaluator once per grant and field, also when the call is refused', async () => {
    const { engine, calls } = await engineWith(() => false);
    engine.decideExecute(executeInput({ code: 'A', path: '/x' }, { code: { ends_with: 'Z' }, path: { prefix: ['/r/'] } }, { code: { ends_with: 'Q' } }));
    expect(calls.map((c) => c[0]).sort()).toEqual(['ends_with', 'ends_with', 'prefix']);
  });

  it('without an evaluator (no plugins configured) every plugin operator is a violation', async () => {
    const engine = await loadPolicyEngine(artefact);
    expect(engine.decideExecute(executeInput({ code: 'ABZ' }, { code: { ends_with: 'Z' } })).violations).toStrictEqual([{ field: 'code', constraint: { ends_with: 'Z' }, actual: 'ABZ' }]);
  });

  it('loads with any set of plugins: the golden decisions use no operator a plugin could be named', async () => {
    await expect(engineWith(() => true)).resolves.toBeDefined();
    await expect(engineWith(() => false)).resolves.toBeDefined();
  });

  it('refuses to load when the evaluator answers true for a name no plugin can have (golden: fail closed)', async () => {
    await expect(loadPolicyEngine({ ...artefact, operator: () => true })).rejects.toThrow(/golden decision "an operator no plugin can register/);
  });
});
