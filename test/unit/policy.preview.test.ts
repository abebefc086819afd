// Previewing a candidate policy against recorded decisions (src/policy/preview.ts): the live
// decisions come from the default policy as the service knows it (SERVICE_POLICY, really evaluated,
// plugin operators answered and recorded, then redacted as a record is), and the candidates are the
// committed fixture artefacts. The counts and groups are exact, because a reviewer acts on them:
// the policy itself changes nothing, the maintenance-window policy turns every allow into a deny, the
// allow-everything policy the reverse. A candidate that cannot decide, a record that cannot be read
// and a decision that needs an operator answer nobody recorded are errors, never flips.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord, OperatorAnswer } from '../../src/policy/decision-records.ts';
import { loadPolicyEngine, type OperatorEvaluator, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { previewDecisions, type CandidatePolicy, type PreviewReport } from '../../src/policy/preview.ts';
import { compileRedaction, redactDecision, REDACTED } from '../../src/policy/redaction.ts';
import type { ExecuteInput, GrantsInput, GrantsOutput } from '../../src/policy/types.ts';
import { fixturePolicy, SERVICE_POLICY } from '../support/policies.ts';

const NOW_MS = 1_767_225_600_000;
const AT = '2026-01-01T00:00:00.000Z';
const redaction = compileRedaction('ssn');

let live: WasmPolicyEngine;
let denyAll: WasmPolicyEngine;
let allowAll: WasmPolicyEngine;

function executeInput(hostId: string, capability: string, args: Record<string, unknown>, constraints: Record<string, unknown> | null | 'no grant'): ExecuteInput {
  return {
    now_ms: NOW_MS,
    agent: { id: 'agt_1', mode: 'delegated', host_id: hostId },
    capability,
    arguments: args,
    grants: constraints === 'no grant' ? [] : [{ id: 'grt_1', constraints: constraints as ExecuteInput['grants'][number]['constraints'] }],
  };
}

function grantsInput(host: GrantsInput['host'], mode: 'delegated' | 'autonomous', requests: Array<[capability: string, exists: boolean]>): GrantsInput {
  return {
    now_ms: NOW_MS,
    action: 'register',
    host,
    agent: { id: null, mode },
    requests: requests.map(([capability, exists]) => ({ capability, exists, constraints: null, previous_status: null })),
  };
}

/** A plugin that admits paths under /tmp and anything as an ssn, as the sandbox would answer. */
const plugins: OperatorEvaluator = (name, operand, actual) =>
  name === 'starts_with' ? typeof actual === 'string' && actual.startsWith(String(operand)) : name === 'looks_like';

/** The live decision, recorded as agentgate will: operator answers kept, everything redacted. */
function recordExecute(input: ExecuteInput): DecisionRecord {
  const answers: OperatorAnswer[] = [];
  const output = live.decideExecute(input, (name, operand, actual) => {
    const answer = plugins(name, operand, actual);
    answers.push([name, operand, actual, answer]);
    return answer;
  });
  const redacted = redactDecision(redaction, 'agentgate/execute', input as unknown as Record<string, unknown>, output, answers);
  const record: DecisionRecord = { at: AT, entrypoint: 'agentgate/execute', sha256: live.info().sha256, input: redacted.input, output: redacted.output };
  if (answers.length > 0) record.operatorAnswers = redacted.operatorAnswers;
  return record;
}

function recordGrants(input: GrantsInput): DecisionRecord {
  const redacted = redactDecision(redaction, 'agentgate/grants', input as unknown as Record<string, unknown>, live.decideGrants(input));
  return { at: AT, entrypoint: 'agentgate/grants', sha256: live.info().sha256, input: redacted.input, output: redacted.output };
}

const pluginConstraints = { path: { starts_with: '/tmp' }, ssn: { looks_like: 'ssn' } };

/** The recorded traffic: each group of records with the live decision the comments name. */
function recordedTraffic() {
  const allowedA = [10, 20, 30, 40, 50].map((amount) => recordExecute(executeInput('hst_a', 'transfer_money', { amount }, { amount: { max: 100 } })));
  const allowedB = [60, 70].map((amount) => recordExecute(executeInput('hst_b', 'transfer_money', { amount }, { amount: { max: 100 } })));
  const overMax = [500, 600, 700].map((amount) => recordExecute(executeInput('hst_a', 'transfer_money', { amount }, { amount: { max: 100 } })));
  const noGrant = recordExecute(executeInput('hst_b', 'read_file', { path: '/tmp/a' }, 'no grant'));
  const pluginAllowed = ['/tmp/a', '/tmp/b'].map((path) => recordExecute(executeInput('hst_a', 'read_report', { path, ssn: '078-05-1120' }, pluginConstraints)));
  const pluginDenied = recordExecute(executeInput('hst_a', 'read_report', { path: '/etc/passwd', ssn: '078-05-1120' }, pluginConstraints));
  const delegated = recordGrants(grantsInput({ id: 'hst_a', status: 'active', linked: true, default_capabilities: ['read_file'] }, 'delegated',
    [['read_file', true], ['write_file', true], ['purge_all_data', true]]));
  const autonomous = recordGrants(grantsInput({ id: 'hst_b', status: 'active', linked: false, default_capabilities: [] }, 'autonomous',
    [['echo', true], ['ghost', false], ['write_file', true]]));
  return { allowedA, allowedB, overMax, noGrant, pluginAllowed, pluginDenied, delegated, autonomous };
}

type Traffic = ReturnType<typeof recordedTraffic>;
let traffic: Traffic;
let records: DecisionRecord[];

beforeAll(async () => {
  live = await loadPolicyEngine(SERVICE_POLICY);
  denyAll = await loadPolicyEngine(fixturePolicy('deny'));
  allowAll = await loadPolicyEngine(fixturePolicy('allow'));
  traffic = recordedTraffic();
  const t = traffic;
  records = [...t.allowedA, ...t.allowedB, ...t.overMax, t.noGrant, ...t.pluginAllowed, t.pluginDenied, t.delegated, t.autonomous];
});

describe('the recorded traffic is what the live policy decided', () => {
  it('holds the decisions the comments name, redacted, with the operator answers of plugin decisions', () => {
    expect(records.map((r) => (r.entrypoint === 'agentgate/execute' ? (r.output as { allow: boolean }).allow : 'grants'))).toEqual([
      true, true, true, true, true, true, true, false, false, false, false, true, true, false, 'grants', 'grants',
    ]);
    expect((traffic.pluginDenied.output as { violations: unknown[] }).violations).toEqual([{ field: 'path', constraint: { starts_with: '/tmp' }, actual: '/etc/passwd' }]);
    expect(traffic.pluginAllowed[0]!.input.arguments).toEqual({ path: '/tmp/a', ssn: REDACTED });
    // The bare name `ssn` redacts the grant's constraint on ssn too, so its operand is redacted as well.
    expect(traffic.pluginAllowed[0]!.input.grants).toEqual([{ id: 'grt_1', constraints: { path: { starts_with: '/tmp' }, ssn: REDACTED } }]);
    expect(traffic.pluginAllowed[0]!.operatorAnswers).toEqual([['starts_with', '/tmp', '/tmp/a', true], ['looks_like', REDACTED, REDACTED, true]]);
    expect((traffic.delegated.output as GrantsOutput).decisions.map((d) => d.decision)).toEqual(['grant', 'approval', 'deny']);
    expect((traffic.autonomous.output as GrantsOutput).decisions.map((d) => d.decision)).toEqual(['grant', 'deny', 'approval']);
  });
});

describe('previewing a candidate against the recorded traffic', () => {
  it('the live policy itself changes nothing, plugin decisions re-run on their recorded answers', () => {
    expect(previewDecisions(records, live)).toStrictEqual({
      evaluated: 16, decisions: 20, unchanged: 20, allow_to_deny: 0, deny_to_allow: 0, other_changes: 0, groups: [], errors: { count: 0, examples: [] },
    } satisfies PreviewReport);
  });

  it('the maintenance-window policy turns every allow into a deny and grants every request', () => {
    const t = traffic;
    const report = previewDecisions(records, denyAll);
    expect(report).toStrictEqual({
      evaluated: 16,
      decisions: 20,
      // Denied execute decisions stay denied (5), and granted requests stay granted (2).
      unchanged: 7,
      allow_to_deny: 9,
      deny_to_allow: 4,
      other_changes: 0,
      groups: [
        { direction: 'allow_to_deny', capability: 'transfer_money', host_id: 'hst_a', rule: 'maintenance window', count: 5, examples: t.allowedA.slice(0, 3).map((r) => r.input) },
        { direction: 'allow_to_deny', capability: 'read_report', host_id: 'hst_a', rule: 'maintenance window', count: 2, examples: t.pluginAllowed.map((r) => r.input) },
        { direction: 'allow_to_deny', capability: 'transfer_money', host_id: 'hst_b', rule: 'maintenance window', count: 2, examples: t.allowedB.map((r) => r.input) },
        { direction: 'deny_to_allow', capability: 'ghost', host_id: 'hst_b', rule: 'unknown capability', count: 1, examples: [t.autonomous.input] },
        { direction: 'deny_to_allow', capability: 'purge_all_data', host_id: 'hst_a', rule: 'blocked by policy', count: 1, examples: [t.delegated.input] },
        { direction: 'deny_to_allow', capability: 'write_file', host_id: 'hst_a', rule: 'user approval required', count: 1, examples: [t.delegated.input] },
        { direction: 'deny_to_allow', capability: 'write_file', host_id: 'hst_b', rule: 'administrator approval required', count: 1, examples: [t.autonomous.input] },
      ],
      errors: { count: 0, examples: [] },
    } satisfies PreviewReport);
  });

  it('the allow-everything policy turns every deny into an allow, named by the live side\'s violated operators', () => {
    const t = traffic;
    expect(previewDecisions(records, allowAll)).toStrictEqual({
      evaluated: 16,
      // The decision without a grant is an error: the fixture names input.grants[0], which is undefined there.
      decisions: 19,
      unchanged: 11,
      allow_to_deny: 0,
      deny_to_allow: 8,
      other_changes: 0,
      groups: [
        { direction: 'deny_to_allow', capability: 'transfer_money', host_id: 'hst_a', rule: 'amount.max', count: 3, examples: t.overMax.map((r) => r.input) },
        { direction: 'deny_to_allow', capability: 'ghost', host_id: 'hst_b', rule: 'unknown capability', count: 1, examples: [t.autonomous.input] },
        { direction: 'deny_to_allow', capability: 'purge_all_data', host_id: 'hst_a', rule: 'blocked by policy', count: 1, examples: [t.delegated.input] },
        { direction: 'deny_to_allow', capability: 'read_report', host_id: 'hst_a', rule: 'path.starts_with', count: 1, examples: [t.pluginDenied.input] },
        { direction: 'deny_to_allow', capability: 'write_file', host_id: 'hst_a', rule: 'user approval required', count: 1, examples: [t.delegated.input] },
        { direction: 'deny_to_allow', capability: 'write_file', host_id: 'hst_b', rule: 'administrator approval required', count: 1, examples: [t.autonomous.input] },
      ],
      errors: { count: 1, examples: [{ input: t.noGrant.input, error: 'the candidate could not decide: PolicyError: agentgate/execute is undefined for this input' }] },
    } satisfies PreviewReport);
  });

  it('names a new denial by the candidate\'s violated operators, several sorted and joined', () => {
    const record = recordExecute(executeInput('hst_a', 'transfer_money', { amount: 50, currency: 'GBP' }, null));
    // The candidate sees a different grant, as a policy that imposed constraints of its own would.
    const stricter: CandidatePolicy = {
      decideGrants: (input) => live.decideGrants(input),
      decideExecute: (input, operator) => live.decideExecute({ ...input, grants: [{ id: 'grt_1', constraints: { currency: { in: ['USD'] }, amount: { min: 100, max: 10 } } }] }, operator),
    };
    expect(previewDecisions([record], stricter).groups).toStrictEqual([
      { direction: 'allow_to_deny', capability: 'transfer_money', host_id: 'hst_a', rule: 'amount.max,amount.min,currency.in', count: 1, examples: [record.input] },
    ]);
  });

  it('counts approval <-> deny changes apart from flips: neither side allows', () => {
    const noApprovals: CandidatePolicy = {
      decideGrants: (input) => ({ decisions: live.decideGrants(input).decisions.map((d) => (d.decision === 'approval' ? { capability: d.capability, decision: 'deny', reason: 'no approvals' } : d)) }),
      decideExecute: (input, operator) => live.decideExecute(input, operator),
    };
    const report = previewDecisions([traffic.delegated, traffic.autonomous], noApprovals);
    expect(report).toStrictEqual({
      evaluated: 2, decisions: 6, unchanged: 4, allow_to_deny: 0, deny_to_allow: 0, other_changes: 2, groups: [], errors: { count: 0, examples: [] },
    } satisfies PreviewReport);
  });

  it('pairs grants decisions by capability whatever order the candidate answers in', () => {
    const reversed: CandidatePolicy = {
      decideGrants: (input) => ({ decisions: [...denyAll.decideGrants(input).decisions].reverse() }),
      decideExecute: (input, operator) => denyAll.decideExecute(input, operator),
    };
    expect(previewDecisions([traffic.delegated], reversed)).toStrictEqual(previewDecisions([traffic.delegated], denyAll));
  });
});

describe('what the preview cannot evaluate is an error, and never stops it', () => {
  it('a candidate that throws for some inputs: those are errors, the rest are compared', () => {
    const flaky: CandidatePolicy = {
      decideGrants: (input) => live.decideGrants(input),
      decideExecute: (input, operator) => {
        if (input.agent.host_id === 'hst_b') throw new Error('candidate crashed');
        return live.decideExecute(input, operator);
      },
    };
    const t = traffic;
    expect(previewDecisions(records, flaky)).toStrictEqual({
      evaluated: 16, decisions: 17, unchanged: 17, allow_to_deny: 0, deny_to_allow: 0, other_changes: 0, groups: [],
      errors: {
        count: 3,
        examples: [...t.allowedB, t.noGrant].map((r) => ({ input: r.input, error: 'the candidate could not decide: Error: candidate crashed' })),
      },
    } satisfies PreviewReport);
  });

  it('a candidate answering something unreadable is an error', () => {
    const broken = { decideGrants: () => ({ decisions: 'none' }), decideExecute: () => ({ allowed: true }) } as unknown as CandidatePolicy;
    const report = previewDecisions([traffic.allowedA[0]!, traffic.delegated], broken);
    expect(report.errors).toStrictEqual({
      count: 2,
      examples: [
        { input: traffic.allowedA[0]!.input, error: 'the candidate answered an execute decision without a boolean allow' },
        { input: traffic.delegated.input, error: 'the candidate answered a grants decision without a decisions list' },
      ],
    });
    expect(report.decisions).toBe(0);
  });

  it('a decision that calls an operator the record did not answer is an error, not a flip', () => {
    const t = traffic;
    const withoutAnswers = t.pluginAllowed.map((r): DecisionRecord => ({ ...r, operatorAnswers: undefined }));
    const otherPath: DecisionRecord = { ...t.pluginDenied, operatorAnswers: [['starts_with', '/tmp', '/tmp/other', true]] };
    const report = previewDecisions([...withoutAnswers, otherPath, t.pluginAllowed[0]!], live);
    expect(report).toStrictEqual({
      evaluated: 4, decisions: 1, unchanged: 1, allow_to_deny: 0, deny_to_allow: 0, other_changes: 0, groups: [],
      errors: {
        count: 3,
        examples: [
          { input: withoutAnswers[0]!.input, error: 'the candidate cannot be evaluated without the plugin sandbox: UnrecordedOperatorCall: the recorded decision did not call operator starts_with (it recorded no operator answers)' },
          { input: withoutAnswers[1]!.input, error: 'the candidate cannot be evaluated without the plugin sandbox: UnrecordedOperatorCall: the recorded decision did not call operator starts_with (it recorded no operator answers)' },
          { input: otherPath.input, error: 'the candidate cannot be evaluated without the plugin sandbox: UnrecordedOperatorCall: the recorded decision did not call operator starts_with with this operand and value' },
        ],
      },
    } satisfies PreviewReport);
    // A candidate that asks no operator re-runs the same records without them.
    expect(previewDecisions(withoutAnswers, denyAll)).toMatchObject({ decisions: 2, allow_to_deny: 2, errors: { count: 0 } });
  });

  it('a record that cannot be read is an error; at most five examples are kept', () => {
    const malformed = [
      {},
      { ...traffic.allowedA[0]!, id: 'rec-2', sha256: 'not a hash' },
      { ...traffic.allowedA[0]!, output: { allow: 'yes', violations: [] } },
      ...Array.from({ length: 4 }, () => null),
    ] as unknown as DecisionRecord[];
    const report = previewDecisions([...malformed, traffic.allowedA[0]!], live);
    expect(report.evaluated).toBe(8);
    expect(report.decisions).toBe(1);
    expect(report.errors.count).toBe(7);
    expect(report.errors.examples).toStrictEqual([
      { input: {}, error: 'record is malformed: at is not an ISO 8601 timestamp' },
      { input: {}, error: 'record rec-2 is malformed: sha256 is not 64 lowercase hex digits' },
      { input: {}, error: 'record is malformed: output.allow is not a boolean' },
      { input: {}, error: 'record is malformed: a record is not an object' },
      { input: {}, error: 'record is malformed: a record is not an object' },
    ]);
  });
});

describe('the report\'s bounds', () => {
  it('keeps examplesPerGroup examples and the maxGroups largest groups', () => {
    const report = previewDecisions(records, denyAll, { examplesPerGroup: 1, maxGroups: 2 });
    expect(report.groups.map((g) => [g.capability, g.host_id, g.count, g.examples.length])).toEqual([['transfer_money', 'hst_a', 5, 1], ['read_report', 'hst_a', 2, 1]]);
    expect(report.allow_to_deny).toBe(9);
  });

  it('refuses options that bound nothing', () => {
    expect(() => previewDecisions(records, live, { maxGroups: -1 })).toThrow(/maxGroups must be a number of at least 0/);
    expect(() => previewDecisions(records, live, { examplesPerGroup: Number.NaN })).toThrow(RangeError);
    expect(() => previewDecisions(records, live, { deadlineMs: -5 })).toThrow(RangeError);
  });

  it('stops at the deadline, marks the report truncated, and reads no further record', () => {
    let clockMs = 0;
    let read = 0;
    function* counted(): Generator<DecisionRecord> {
      for (const record of records) {
        read++;
        yield record;
      }
    }
    // The clock moves 1 ms per look: one look sets the deadline, then one look per record.
    const report = previewDecisions(counted(), live, { deadlineMs: 5, now: () => clockMs++ });
    expect(report).toMatchObject({ evaluated: 4, decisions: 4, unchanged: 4, truncated: true });
    expect(read).toBe(5);
    expect(previewDecisions(records, live, { deadlineMs: 60_000 })).not.toHaveProperty('truncated');
  });
});
