// A preview of a candidate policy artefact against recorded decisions (decision-records.ts): which
// decisions it would change, grouped so a reviewer sees "amount.max now denies transfer_money for
// host X, 412 times" rather than 412 lines. Every recorded input is fed to the candidate as it was
// recorded (redacted), and an execute decision re-runs with the plugin operator answers it recorded,
// so nothing here calls the plugin sandbox, the store or the clock of the decision.
//
// It is synchronous on purpose: the candidate's wasm runs synchronously anyway, and a caller that
// must stay responsive gives it a slice of records and a deadline.
import { decisionRecordProblem, operatorFromAnswers, UnrecordedOperatorCall, type DecisionRecord } from './decision-records.ts';
import type { OperatorEvaluator } from './engine.ts';
import type { ExecuteInput, GrantsInput, PolicyEngine } from './types.ts';
import { describeThrown } from '../common/thrown.ts';

/** What the preview needs of a candidate: the engine's two decisions (WasmPolicyEngine satisfies it). */
export type CandidatePolicy = Pick<PolicyEngine, 'decideGrants' | 'decideExecute'>;

export interface FlipGroup {
  direction: 'allow_to_deny' | 'deny_to_allow';
  capability: string;
  host_id: string;
  rule: string;
  count: number;
  examples: Array<Record<string, unknown>>;
}

export interface PreviewReport {
  /** Records looked at. */
  evaluated: number;
  /** Decisions compared (a grants record holds one per request). */
  decisions: number;
  unchanged: number;
  allow_to_deny: number;
  deny_to_allow: number;
  /** Grants decisions that changed between 'approval' and 'deny' (neither allows now). */
  other_changes: number;
  /** Sorted by count descending, then direction, capability, host_id, rule; at most maxGroups. */
  groups: FlipGroup[];
  errors: { count: number; examples: Array<{ input: Record<string, unknown>; error: string }> };
  /** Set when the deadline stopped the preview before the records ran out. */
  truncated?: true;
}

export interface PreviewOptions {
  /** Recorded inputs kept per group (default 3). */
  examplesPerGroup?: number;
  /** Groups reported, the largest first (default 100). */
  maxGroups?: number;
  /** How long the preview may run, from its start, as measured by `now`; unset runs through every record. */
  deadlineMs?: number;
  /** A monotonic clock in milliseconds (default performance.now), so tests can move time. */
  now?: () => number;
}

const DEFAULT_EXAMPLES_PER_GROUP = 3;
const DEFAULT_MAX_GROUPS = 100;
const MAX_ERROR_EXAMPLES = 5;
/** A separator no capability, host id or rule of a group key can hold unnoticed: it only joins them. */
const KEY_SEPARATOR = '\u0000';

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

type Direction = FlipGroup['direction'];

/** Outcome of one side of one decision, as the comparison needs it. */
interface Verdict {
  allows: boolean;
  /** For grants: the verdict itself, so approval and deny can be told apart. */
  name: string;
  /** Why it denies, for the group's rule; unused when it allows. */
  rule: string;
}

/** The running totals; a class so the loop's helpers share them without allocating per record. */
class Tally {
  evaluated = 0;
  decisions = 0;
  unchanged = 0;
  allowToDeny = 0;
  denyToAllow = 0;
  otherChanges = 0;
  errorCount = 0;
  readonly errorExamples: Array<{ input: Record<string, unknown>; error: string }> = [];
  readonly groups = new Map<string, FlipGroup>();
  readonly examplesPerGroup: number;

  constructor(examplesPerGroup: number) {
    this.examplesPerGroup = examplesPerGroup;
  }

  error(input: Record<string, unknown>, error: string): void {
    this.errorCount++;
    if (this.errorExamples.length < MAX_ERROR_EXAMPLES) this.errorExamples.push({ input, error });
  }

  compare(live: Verdict, candidate: Verdict, capability: string, hostId: string, input: Record<string, unknown>): void {
    this.decisions++;
    if (live.allows === candidate.allows) {
      if (live.name === candidate.name) this.unchanged++;
      else this.otherChanges++;
      return;
    }
    const direction: Direction = live.allows ? 'allow_to_deny' : 'deny_to_allow';
    if (live.allows) this.allowToDeny++;
    else this.denyToAllow++;
    const rule = live.allows ? candidate.rule : live.rule;
    const key = direction + KEY_SEPARATOR + capability + KEY_SEPARATOR + hostId + KEY_SEPARATOR + rule;
    let group = this.groups.get(key);
    if (group === undefined) {
      group = { direction, capability, host_id: hostId, rule, count: 0, examples: [] };
      this.groups.set(key, group);
    }
    group.count++;
    if (group.examples.length < this.examplesPerGroup) group.examples.push(input);
  }
}

/**
 * Runs the candidate on every recorded decision and reports what it would change. A record that is
 * malformed, a candidate that throws or answers something unreadable, and an execute decision that
 * would need an operator answer the record lacks are counted in `errors` and never stop the preview.
 * Bounded by the records given and, when set, by `deadlineMs`.
 */
export function previewDecisions(records: Iterable<DecisionRecord>, candidate: CandidatePolicy, options: PreviewOptions = {}): PreviewReport {
  const examplesPerGroup = options.examplesPerGroup ?? DEFAULT_EXAMPLES_PER_GROUP;
  const maxGroups = options.maxGroups ?? DEFAULT_MAX_GROUPS;
  for (const [name, value] of [['examplesPerGroup', examplesPerGroup], ['maxGroups', maxGroups], ['deadlineMs', options.deadlineMs ?? 0]] as const) {
    if (!(value >= 0)) throw new RangeError(`${name} must be a number of at least 0, got ${value}`);
  }
  const now = options.now ?? (() => performance.now());
  const deadlineAtMs = options.deadlineMs === undefined ? Infinity : now() + options.deadlineMs;
  const tally = new Tally(examplesPerGroup);
  let truncated = false;

  for (const record of records) {
    // One look at the clock per record: a fraction of a microsecond beside a decision's tens.
    if (deadlineAtMs !== Infinity && now() >= deadlineAtMs) {
      truncated = true;
      break;
    }
    tally.evaluated++;
    const problem = decisionRecordProblem(record);
    if (problem !== null) {
      tally.error({}, `record${recordIdOf(record)} is malformed: ${problem}`);
      continue;
    }
    if (record.entrypoint === 'agentgate/execute') previewExecute(record, candidate, tally);
    else previewGrants(record, candidate, tally);
  }

  const report: PreviewReport = {
    evaluated: tally.evaluated,
    decisions: tally.decisions,
    unchanged: tally.unchanged,
    allow_to_deny: tally.allowToDeny,
    deny_to_allow: tally.denyToAllow,
    other_changes: tally.otherChanges,
    groups: [...tally.groups.values()].sort(compareGroups).slice(0, maxGroups),
    errors: { count: tally.errorCount, examples: tally.errorExamples },
  };
  if (truncated) report.truncated = true;
  return report;
}

function recordIdOf(record: unknown): string {
  return isRecord(record) && typeof record.id === 'string' ? ` ${record.id.slice(0, 128)}` : '';
}

function previewExecute(record: DecisionRecord, candidate: CandidatePolicy, tally: Tally): void {
  const input = record.input;
  const recorded = operatorFromAnswers(record.operatorAnswers ?? []);
  // The engine's builtin answers false for any throw (a throw inside wasm would corrupt the
  // instance), so an unrecorded call is noticed here, on its way out of the evaluator.
  let unrecorded: UnrecordedOperatorCall | null = null;
  const operator: OperatorEvaluator = (name, operand, actual) => {
    try {
      return recorded(name, operand, actual);
    } catch (error) {
      if (error instanceof UnrecordedOperatorCall) unrecorded ??= error;
      throw error;
    }
  };
  let output: unknown;
  try {
    output = candidate.decideExecute(input as unknown as ExecuteInput, operator);
  } catch (error) {
    // A candidate other than the engine may let the evaluator's throw through instead.
    tally.error(input, unrecorded === null ? `the candidate could not decide: ${describeThrown(error)}` : unevaluable(unrecorded));
    return;
  }
  if (unrecorded !== null) {
    tally.error(input, unevaluable(unrecorded));
    return;
  }
  if (!isRecord(output) || typeof output.allow !== 'boolean') {
    tally.error(input, 'the candidate answered an execute decision without a boolean allow');
    return;
  }
  const agent = input.agent;
  const hostId = isRecord(agent) && typeof agent.host_id === 'string' ? agent.host_id : '';
  const capability = typeof input.capability === 'string' ? input.capability : '';
  tally.compare(executeVerdict(record.output as Record<string, unknown>), executeVerdict(output), capability, hostId, input);
}

function unevaluable(error: UnrecordedOperatorCall): string {
  return `the candidate cannot be evaluated without the plugin sandbox: ${describeThrown(error)}`;
}

function executeVerdict(output: Record<string, unknown>): Verdict {
  const allows = output.allow === true;
  return { allows, name: allows ? 'allow' : 'deny', rule: allows ? '' : executeRule(output) };
}

/** The violated constraints as `field.op`, sorted; else the reason; else "denied". */
function executeRule(output: Record<string, unknown>): string {
  const parts: string[] = [];
  if (Array.isArray(output.violations)) {
    // Bounded by the output, which the engine checked or the record parser bounded.
    for (const violation of output.violations as unknown[]) {
      if (!isRecord(violation) || typeof violation.field !== 'string') continue;
      const ops = isRecord(violation.constraint) ? Object.keys(violation.constraint) : [];
      for (const op of ops) parts.push(`${violation.field}.${op}`);
      if (ops.length === 0) parts.push(violation.field);
    }
  }
  if (parts.length > 0) return [...new Set(parts)].sort().join(',');
  return typeof output.reason === 'string' && output.reason !== '' ? output.reason : 'denied';
}

function previewGrants(record: DecisionRecord, candidate: CandidatePolicy, tally: Tally): void {
  const input = record.input;
  let output: unknown;
  try {
    output = candidate.decideGrants(input as unknown as GrantsInput);
  } catch (error) {
    tally.error(input, `the candidate could not decide: ${describeThrown(error)}`);
    return;
  }
  const live = (record.output as { decisions: Array<Record<string, unknown>> }).decisions;
  const paired = pairByCapability(live, output);
  if (typeof paired === 'string') {
    tally.error(input, paired);
    return;
  }
  const host = input.host;
  const hostId = isRecord(host) && typeof host.id === 'string' ? host.id : '';
  for (let i = 0; i < live.length; i++) {
    tally.compare(grantVerdict(live[i]!), grantVerdict(paired[i]!), live[i]!.capability as string, hostId, input);
  }
}

/**
 * The candidate's decision for each live one, by capability: decisions come in any order, and a
 * capability asked twice is paired in order. A string when the candidate's answer cannot be paired.
 */
function pairByCapability(live: ReadonlyArray<Record<string, unknown>>, output: unknown): Array<Record<string, unknown>> | string {
  if (!isRecord(output) || !Array.isArray(output.decisions)) return 'the candidate answered a grants decision without a decisions list';
  const byCapability = new Map<unknown, Array<Record<string, unknown>>>();
  for (const decision of output.decisions as unknown[]) {
    if (!isRecord(decision) || typeof decision.capability !== 'string' || !isVerdict(decision.decision)) {
      return 'the candidate answered a grants decision holding an item without a capability and a grant, approval or deny decision';
    }
    const list = byCapability.get(decision.capability);
    if (list === undefined) byCapability.set(decision.capability, [decision]);
    else list.push(decision);
  }
  const paired: Array<Record<string, unknown>> = [];
  for (const decision of live) {
    const match = byCapability.get(decision.capability)?.shift();
    if (match === undefined) return `the candidate answered no decision for capability ${String(decision.capability)}`;
    paired.push(match);
  }
  return paired;
}

function isVerdict(value: unknown): boolean {
  return value === 'grant' || value === 'approval' || value === 'deny';
}

function grantVerdict(decision: Record<string, unknown>): Verdict {
  const name = decision.decision as string;
  const allows = name === 'grant';
  const reason = typeof decision.reason === 'string' && decision.reason !== '' ? decision.reason : name;
  return { allows, name, rule: allows ? '' : reason };
}

function compareGroups(a: FlipGroup, b: FlipGroup): number {
  if (a.count !== b.count) return b.count - a.count;
  return compareText(a.direction, b.direction) || compareText(a.capability, b.capability) || compareText(a.host_id, b.host_id) || compareText(a.rule, b.rule);
}

/** Code-unit order, not the locale's: a report must sort the same on every machine. */
function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
