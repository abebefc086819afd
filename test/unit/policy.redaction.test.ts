// Redaction of recorded policy decisions (src/policy/redaction.ts): a value an operator names in the
// redaction setting never reaches a decision record, not through the input, not through the
// policy's output (a violation's `actual` is the argument's value) and not through the plugin
// operator answers. The patterns are checked when compiled, matched exactly as documented, and
// applying them never mutates, never throws and stays bounded on any JSON value.
//
// The property tests put generated secrets at places the patterns match, run the decision through
// the real compiled policy (plugin operators included), and look for the secret in the record's
// JSON. The seeds are fixed, so a run is the same every time; a failure prints the counter-example.
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseDecisionRecord, type OperatorAnswer } from '../../src/policy/decision-records.ts';
import { loadPolicyEngine, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { compileRedaction, redactDecision, REDACTED, TOO_DEEP } from '../../src/policy/redaction.ts';
import type { ExecuteInput, GrantsInput } from '../../src/policy/types.ts';
import { SERVICE_POLICY } from '../support/policies.ts';

const SEED = 20_260_101;
const SETTING = 'card_number,password,arguments.ssn,arguments.*.iban,**.secret';

describe('compileRedaction checks every pattern when compiled', () => {
  const refused: Array<[string, RegExp]> = [
    ['password,,ssn', /empty pattern/],
    ['password,', /empty pattern/],
    ['arguments..ssn', /"arguments..ssn" has an empty segment/],
    ['.ssn', /"\.ssn" has an empty segment/],
    ['arguments.ssn.', /"arguments.ssn." has an empty segment/],
    ['pass word', /"pass word": segment "pass word" holds a character outside/],
    ['arguments.s$n', /"arguments.s\$n": segment "s\$n"/],
    ['pässword', /"pässword"/],
    ['arguments/ssn', /"arguments\/ssn"/],
    ['arguments.ss*', /"arguments.ss\*": a \* must be a whole segment/],
    ['***.secret', /a \* must be a whole segment/],
    ['*', /"\*" names no member/],
    ['**', /"\*\*" names no member/],
    ['*.**', /names no member/],
    ['allow', /"allow" would redact the policy's own answer/],
    ['decisions', /would redact the policy's own answer/],
    [Array.from({ length: 33 }, (_, i) => `name${i}`).join(','), /33 patterns, more than 32/],
    [Array.from({ length: 17 }, () => 'a').join('.'), /has 17 segments, more than 16/],
  ];
  it.each(refused)('refuses %j', (setting, message) => {
    expect(() => compileRedaction(setting)).toThrow(message);
  });

  it('accepts the documented forms, at the limits, with blanks around commas', () => {
    expect(compileRedaction(` ${SETTING.split(',').join(' , ')} `).patterns).toEqual(SETTING.split(','));
    expect(compileRedaction(Array.from({ length: 32 }, (_, i) => `name-${i}_X`).join(',')).patterns).toHaveLength(32);
    expect(compileRedaction(Array.from({ length: 16 }, () => 'a').join('.')).patterns).toHaveLength(1);
    expect(compileRedaction('arguments.allow').apply({ arguments: { allow: 1 }, allow: true })).toEqual({ arguments: { allow: REDACTED }, allow: true });
  });

  it('redacts nothing for an empty or blank setting, and still copies', () => {
    for (const setting of ['', '   ']) {
      const value = { a: { password: 'x' } };
      const copy = compileRedaction(setting).apply(value);
      expect(copy).toStrictEqual(value);
      expect(copy).not.toBe(value);
    }
  });
});

describe('which members a pattern matches', () => {
  const cases: Array<[string, string, unknown, unknown]> = [
    ['a bare name matches the member at any depth, in arrays too', 'password',
      { password: 1, a: { password: { x: 2 } }, list: [{ password: null }, 'password'] },
      { password: REDACTED, a: { password: REDACTED }, list: [{ password: REDACTED }, 'password'] }],
    ['names are matched exactly, case included', 'password',
      { Password: 1, password_hint: 2, passwords: 3 },
      { Password: 1, password_hint: 2, passwords: 3 }],
    ['a bare name does not match an array index', '0',
      { list: ['a', 'b'], '0': 'x' },
      { list: ['a', 'b'], '0': REDACTED }],
    ['a dotted pattern is a path from the root only', 'arguments.ssn',
      { arguments: { ssn: 's', other: 1 }, nested: { arguments: { ssn: 't' } }, ssn: 'u' },
      { arguments: { ssn: REDACTED, other: 1 }, nested: { arguments: { ssn: 't' } }, ssn: 'u' }],
    ['* matches exactly one member name', 'arguments.*.iban',
      { arguments: { a: { iban: 1 }, b: { iban: 2, c: { iban: 3 } }, iban: 4 } },
      { arguments: { a: { iban: REDACTED }, b: { iban: REDACTED, c: { iban: 3 } }, iban: 4 } }],
    ['* matches exactly one array index', 'items.*.secret',
      { items: [{ secret: 1 }, [{ secret: 2 }], { secret: 3 }] },
      { items: [{ secret: REDACTED }, [{ secret: 2 }], { secret: REDACTED }] }],
    ['a digit segment of a path matches that array index', 'items.1',
      { items: ['a', 'b', 'c'] },
      { items: ['a', REDACTED, 'c'] }],
    ['** matches no level, one level or many', '**.secret',
      { secret: 1, a: { secret: 2, b: [{ c: { secret: 3 } }] } },
      { secret: REDACTED, a: { secret: REDACTED, b: [{ c: { secret: REDACTED } }] } }],
    ['** between names matches any number of levels between them', 'a.**.b',
      { a: { b: 1, x: { b: 2, y: { b: 3 } } }, b: 4, z: { a: { b: 5 } } },
      { a: { b: REDACTED, x: { b: REDACTED, y: { b: REDACTED } } }, b: 4, z: { a: { b: 5 } } }],
    ['a trailing ** matches the member itself', 'a.**',
      { a: { b: 1 }, c: 2 },
      { a: REDACTED, c: 2 }],
    ['a member matched by a pattern keeps its place, whatever its value', 'x',
      { x: null, y: { x: [1, 2] }, z: { x: { x: 1 } } },
      { x: REDACTED, y: { x: REDACTED }, z: { x: REDACTED } }],
    ['scalars and documents with nothing to match are copied as they are', 'secret',
      [1, 'two', null, true, { three: [3] }],
      [1, 'two', null, true, { three: [3] }]],
  ];
  it.each(cases)('%s', (_label, setting, value, expected) => {
    expect(compileRedaction(setting).apply(value)).toStrictEqual(expected);
  });

  it('keeps a member named __proto__ as a member, and matches it', () => {
    const value = JSON.parse('{"__proto__": {"password": "p", "x": 1}, "y": 2}') as unknown;
    const copy = compileRedaction('password').apply(value) as Record<string, unknown>;
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.hasOwn(copy, '__proto__')).toBe(true);
    expect(JSON.stringify(copy)).toBe('{"__proto__":{"password":"[redacted]","x":1},"y":2}');
    expect(JSON.stringify(compileRedaction('__proto__').apply(value))).toBe('{"__proto__":"[redacted]","y":2}');
  });
});

describe('applying a redaction is bounded and safe on any JSON value', () => {
  const redaction = compileRedaction(SETTING);

  it('replaces a subtree deeper than 64 levels by "[too deep]"', () => {
    let value: unknown = 'bottom';
    for (let i = 0; i < 100; i++) value = { next: value };
    let copy = redaction.apply(value);
    let levels = 0;
    while (typeof copy === 'object' && copy !== null) {
      copy = (copy as { next: unknown }).next;
      levels++;
    }
    expect(levels).toBe(64);
    expect(copy).toBe(TOO_DEEP);
    expect(redaction.apply([[[[['scalar at depth 5']]]]])).toStrictEqual([[[[['scalar at depth 5']]]]]);
  });

  it('never mutates its argument (frozen documents included) and shares no object with it', () => {
    const value = { arguments: { ssn: 's', list: [{ secret: 1 }] }, other: { deep: [1, 2] } };
    const frozen = structuredClone(value);
    const freeze = (v: unknown): void => {
      if (typeof v === 'object' && v !== null) {
        Object.freeze(v);
        Object.values(v).forEach(freeze);
      }
    };
    freeze(frozen);
    const copy = redaction.apply(frozen) as typeof value;
    expect(frozen).toStrictEqual(value);
    expect(copy.other).not.toBe(frozen.other);
    expect(copy.other.deep).not.toBe(frozen.other.deep);
  });

  it('never throws, is idempotent, and changes nothing a pattern does not match (generated JSON)', () => {
    fc.assert(fc.property(fc.jsonValue({ maxDepth: 8 }), (value) => {
      const once = redaction.apply(value);
      expect(redaction.apply(once)).toStrictEqual(once);
      expect(compileRedaction('zz_no_such_member').apply(value)).toStrictEqual(value);
    }), { seed: SEED, numRuns: 400 });
  });
});

// ---- decisions: the secrets placed where the patterns match, run through the real policy ---------------

/** A secret no generated filler can spell: the § marks never come from the alphabet used for filler. */
const secretArb = fc.stringMatching(/^[0-9a-f]{6,12}$/).map((hex) => `§${hex}§`);
const fillerKey = fc.constantFrom('amount', 'note', 'path', 'meta', 'zone', 'tags');
const fillerValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer({ min: -5, max: 500 }),
  fc.stringMatching(/^[a-z ]{0,8}$/),
  fc.constant(null),
  fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 3 }),
  fc.dictionary(fc.constantFrom('x', 'y'), fc.integer({ min: 0, max: 9 }), { maxKeys: 2 }),
);
/** A value that holds the secret: the secret itself, or the secret inside filler. */
const carrier = (secret: string): fc.Arbitrary<unknown> => fc.oneof(
  fc.constant(secret),
  fillerValue.map((f) => ({ value: secret, filler: f })),
  fillerValue.map((f) => [f, secret]),
);
/** A path of filler member names (none a redacted name), zero to three levels. */
const fillerPath = fc.array(fillerKey, { maxLength: 3 });

function setAt(root: Record<string, unknown>, path: readonly string[], name: string, value: unknown): void {
  let at = root;
  for (const key of path) {
    const next = at[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) at[key] = {};
    at = at[key] as Record<string, unknown>;
  }
  at[name] = value;
}

interface Scenario {
  secret: string;
  args: Record<string, unknown>;
  constraints: Record<string, unknown> | null;
}

/** Arguments with the secret at one to five matching places, and grant constraints that touch them. */
const scenarioArb: fc.Arbitrary<Scenario> = secretArb.chain((secret) => fc.record({
  secret: fc.constant(secret),
  filler: fc.dictionary(fillerKey, fillerValue, { maxKeys: 4 }),
  ssn: fc.option(carrier(secret), { nil: undefined }),
  iban: fc.option(fc.tuple(fillerKey, carrier(secret)), { nil: undefined }),
  password: fc.option(fc.tuple(fillerPath, carrier(secret)), { nil: undefined }),
  deepSecret: fc.option(fc.tuple(fillerPath, carrier(secret)), { nil: undefined }),
  cardNumber: fc.option(fc.tuple(fillerPath, carrier(secret)), { nil: undefined }),
  constraintKinds: fc.subarray(['ssn_plugin', 'ssn_exact', 'iban_plugin', 'password_operand', 'amount_max', 'none'] as const),
}).filter((s) => s.ssn !== undefined || s.iban !== undefined || s.password !== undefined || s.deepSecret !== undefined || s.cardNumber !== undefined)
  .map((s): Scenario => {
    const args: Record<string, unknown> = structuredClone(s.filler);
    if (s.ssn !== undefined) args.ssn = s.ssn;
    if (s.iban !== undefined) setAt(args, [s.iban[0]], 'iban', s.iban[1]);
    if (s.password !== undefined) setAt(args, s.password[0], 'password', s.password[1]);
    if (s.deepSecret !== undefined) setAt(args, s.deepSecret[0], 'secret', s.deepSecret[1]);
    if (s.cardNumber !== undefined) setAt(args, s.cardNumber[0], 'card_number', s.cardNumber[1]);
    if (s.constraintKinds.includes('none')) return { secret: s.secret, args, constraints: null };
    const constraints: Record<string, unknown> = {};
    // A plugin operator on the secret argument: the policy hands the secret to agentgate.operator.
    if (s.constraintKinds.includes('ssn_plugin')) constraints.ssn = { looks_like: 'ssn' };
    // An exact value the secret fails: the violation's `actual` is the secret.
    if (s.constraintKinds.includes('ssn_exact')) constraints.ssn = 'not the secret';
    // A plugin on the member holding an iban: its value (with the secret inside) goes to the operator.
    if (s.constraintKinds.includes('iban_plugin') && s.iban !== undefined) constraints[s.iban[0]] = { has_iban: true };
    // The secret as an operand, under a member the bare name `password` redacts.
    if (s.constraintKinds.includes('password_operand')) constraints.password = { eq: s.secret, matches: s.secret };
    if (s.constraintKinds.includes('amount_max')) constraints.amount = { max: 100 };
    return { secret: s.secret, args, constraints };
  }));

function executeInput(scenario: Scenario): ExecuteInput {
  return {
    now_ms: 1_767_225_600_000,
    agent: { id: 'agt_1', mode: 'delegated', host_id: 'hst_1' },
    capability: 'transfer_money',
    arguments: scenario.args,
    grants: [{ id: 'grt_1', constraints: scenario.constraints as ExecuteInput['grants'][number]['constraints'] }],
  };
}

describe('no redacted value reaches a recorded decision', () => {
  const redaction = compileRedaction(SETTING);
  let live: WasmPolicyEngine;
  beforeAll(async () => {
    live = await loadPolicyEngine(SERVICE_POLICY);
  });

  /** The live decision with every plugin call recorded, answered by whether the value is a string. */
  function decide(input: ExecuteInput): { output: unknown; answers: OperatorAnswer[] } {
    const answers: OperatorAnswer[] = [];
    const output = live.decideExecute(input, (name, operand, actual) => {
      const answer = typeof actual === 'string';
      answers.push([name, operand, actual, answer]);
      return answer;
    });
    return { output, answers };
  }

  it('in an execute decision of the real policy: input, violations and operator answers (generated)', () => {
    fc.assert(fc.property(scenarioArb, (scenario) => {
      const input = executeInput(scenario);
      const { output, answers } = decide(input);
      const before = JSON.stringify({ input, output, answers });
      const redacted = redactDecision(redaction, 'agentgate/execute', input as unknown as Record<string, unknown>, output, answers);
      const text = JSON.stringify(redacted);
      expect(text.includes(scenario.secret), text).toBe(false);
      // The arguments were not mutated, and the record still reads back as one.
      expect(JSON.stringify({ input, output, answers })).toBe(before);
      expect(parseDecisionRecord({ at: '2026-01-01T00:00:00Z', entrypoint: 'agentgate/execute', sha256: 'f'.repeat(64), ...redacted })).not.toBeNull();
    }), { seed: SEED, numRuns: 300 });
  });

  it('in an output a policy built from the secret: reasons, grant ids, any member (generated)', () => {
    fc.assert(fc.property(scenarioArb, fc.stringMatching(/^[a-z ]{0,10}$/), (scenario, words) => {
      const input = executeInput(scenario) as unknown as Record<string, unknown>;
      // What a careless policy could answer: the secret inside a reason, as a grant id, under any member.
      const output = {
        allow: false,
        reason: `${words}${scenario.secret}${words}`,
        grant_id: scenario.secret,
        debug: { echo: scenario.args },
        violations: [{ field: 'ssn', constraint: { eq: scenario.secret }, actual: scenario.args }, { field: 'unknown', constraint: { x: 1 }, actual: scenario.secret }],
      };
      const answers: OperatorAnswer[] = [['op', scenario.secret, scenario.args, true], ['op', scenario.args, null, false]];
      const text = JSON.stringify(redactDecision(redaction, 'agentgate/execute', input, output, answers));
      expect(text.includes(scenario.secret), text).toBe(false);
    }), { seed: SEED, numRuns: 300 });
  });

  it('in a grants decision whose imposed constraints echo the proposed ones (generated)', () => {
    fc.assert(fc.property(scenarioArb, (scenario) => {
      const proposed = { password: { eq: scenario.secret }, note: { secret: scenario.secret } };
      const input: GrantsInput = {
        now_ms: 1_767_225_600_000,
        action: 'register',
        host: { id: 'hst_1', status: 'active', linked: true, default_capabilities: [] },
        agent: { id: null, mode: 'delegated' },
        requests: [{ capability: 'transfer_money', exists: true, constraints: proposed as never, previous_status: null }],
      };
      const output = { decisions: [{ capability: 'transfer_money', decision: 'approval', reason: `asks for ${scenario.secret}`, constraints: { password: { eq: scenario.secret }, note: scenario.secret } }] };
      const redacted = redactDecision(redaction, 'agentgate/grants', input as unknown as Record<string, unknown>, output);
      expect(JSON.stringify(redacted).includes(scenario.secret)).toBe(false);
      expect(redacted.output).toStrictEqual({ decisions: [{ capability: 'transfer_money', decision: 'approval', reason: REDACTED, constraints: { password: REDACTED, note: REDACTED } }] });
    }), { seed: SEED, numRuns: 100 });
  });
});

describe('what a redacted decision keeps, so it can be re-run', () => {
  const redaction = compileRedaction('ssn,arguments.card.number');
  const input = {
    agent: { id: 'agt_1', mode: 'delegated', host_id: 'hst_1' },
    capability: 'pay',
    arguments: { ssn: 'S1', amount: 500, card: { number: 'N1', brand: 'visa' }, note: 'S1 twice' },
    grants: [{ id: 'grt_1', constraints: { amount: { max: 100 }, card: { valid_card: true }, note: { eq: 'x' } } }],
  };

  it('a violation of a redacted argument gets the argument as redacted, the others keep theirs', () => {
    const output = {
      allow: false,
      reason: 'constraint violated',
      violations: [
        { field: 'amount', constraint: { max: 100 }, actual: 500 },
        { field: 'card', constraint: { valid_card: true }, actual: { number: 'N1', brand: 'visa' } },
        { field: 'note', constraint: { eq: 'x' }, actual: 'S1 twice' },
        { field: 'ssn', constraint: { eq: 'other' }, actual: 'S1' },
        { field: 'missing', constraint: { eq: 1 }, missing: true },
      ],
    };
    const redacted = redactDecision(redaction, 'agentgate/execute', input, output, [['valid_card', true, { brand: 'visa', number: 'N1' }, false]]);
    expect(redacted.output).toStrictEqual({
      allow: false,
      reason: 'constraint violated',
      violations: [
        { field: 'amount', constraint: { max: 100 }, actual: 500 },
        { field: 'card', constraint: { valid_card: true }, actual: { number: REDACTED, brand: 'visa' } },
        // An argument no pattern matched keeps its value, as the recorded input does.
        { field: 'note', constraint: { eq: 'x' }, actual: 'S1 twice' },
        { field: 'ssn', constraint: { eq: 'other' }, actual: REDACTED },
        { field: 'missing', constraint: { eq: 1 }, missing: true },
      ],
    });
    // The operator answer's actual is the argument as the candidate will see it in the redacted input.
    expect(redacted.operatorAnswers).toStrictEqual([['valid_card', true, { number: REDACTED, brand: 'visa' }, false]]);
    expect(redacted.input.arguments).toStrictEqual({ ssn: REDACTED, amount: 500, card: { number: REDACTED, brand: 'visa' }, note: 'S1 twice' });
  });

  it('an operand redacted in the grants becomes its redacted version in the answers', () => {
    const withOperand = { ...input, grants: [{ id: 'grt_1', constraints: { ssn: { looks_like: 'S1' }, amount: { within: { ssn: 'S2' } } } }] };
    const redacted = redactDecision(redaction, 'agentgate/execute', withOperand, { allow: true, grant_id: 'grt_1', violations: [] }, [
      ['looks_like', 'S1', 'S1', true],
      ['within', { ssn: 'S2' }, 500, true],
    ]);
    expect(redacted.operatorAnswers).toStrictEqual([['looks_like', REDACTED, REDACTED, true], ['within', { ssn: REDACTED }, 500, true]]);
    expect(redacted.input.grants).toStrictEqual([{ id: 'grt_1', constraints: { ssn: REDACTED, amount: { within: { ssn: REDACTED } } } }]);
  });

  it('keeps at most 64 operator answers, as a record holds no more', () => {
    const answers = Array.from({ length: 70 }, (_, i): OperatorAnswer => ['op', i, null, true]);
    expect(redactDecision(redaction, 'agentgate/execute', input, { allow: true, grant_id: 'grt_1', violations: [] }, answers).operatorAnswers).toHaveLength(64);
  });

  it('a grants decision has no operator answers, and its verdicts and capabilities are kept', () => {
    const grants = { host: { id: 'hst_1' }, requests: [{ capability: 'read_file', constraints: { path: { ssn: 'S1' } } }] };
    const output = { decisions: [{ capability: 'read_file', decision: 'grant', constraints: { path: { in: ['/tmp'] } } }] };
    expect(redactDecision(redaction, 'agentgate/grants', grants, output)).toStrictEqual({
      input: { host: { id: 'hst_1' }, requests: [{ capability: 'read_file', constraints: { path: { ssn: REDACTED } } }] },
      output,
    });
  });
});
