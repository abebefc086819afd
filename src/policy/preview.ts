// A preview of a candidate policy artefact against recorded decisions (decision-records.ts): which
// decisions it would change, grouped so a reviewer sees "amount.max now denies transfer_money for
// host X, 412 times" rather than 412 lines. Every recorded input is fed to the candidate as it was
// recorded (redacted), and an execute decision re-runs with the plugin operator answers it recorded,
// so nothing here calls the plugin sandbox, the store or the clock of the decision.
//
// It is synchronous on purpose: the candidate's wasm runs synchronously anyway, and a caller that
// must stay responsive runs it off the main thread (candidates.ts). DecisionPreview keeps one tally
// across as many slices of records as the caller feeds it; previewDecisions runs one iterable.
//
// The verdict rules live here once: compareWithCandidate runs a candidate on one live decision and
// says how its answer differs, for the preview's tally and for a shadow policy's (candidates.ts).
import { decisionOutputProblem, decisionRecordProblem, operatorFromAnswers, UnrecordedOperatorCall, type DecisionEntrypoint, type DecisionRecord, type OperatorAnswer } from './decision-records.ts';
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

/** Outcome of one side of one decision, as the comparison needs it. */
interface Verdict {
  allows: boolean;
  /** For grants: the verdict itself, so approval and deny can be told apart. */
  name: string;
  /** Why it denies, for the group's rule; unused when it allows. */
  rule: string;
}

/**
 * How a candidate's decision differs from the live one. `other` is a change that neither allows nor
 * refuses anything new: a grants decision that moved between 'approval' and 'deny'. A decision both
 * sides allow (or both refuse in the same way) is `unchanged`, even when the details differ (another
 * grant_id, other violations or reasons): what a reviewer acts on is whether it is allowed.
 */
export type DecisionChange = 'unchanged' | 'allow_to_deny' | 'deny_to_allow' | 'other';

/** One decision as the live policy made it: a record, or a decision a shadow policy observes. */
export interface LiveDecision {
  entrypoint: DecisionEntrypoint;
  input: Record<string, unknown>;
  /** The live policy's output; one that decisionOutputProblem refuses cannot be compared. */
  output: unknown;
  /** Execute only: the plugin operator answers the live decision used. */
  operatorAnswers?: ReadonlyArray<OperatorAnswer>;
}

/** Where compareWithCandidate reports, once per decision compared or once per live decision it could not compare. */
export interface ComparisonSink {
  /**
   * One decision compared (a grants decision holds one per request). `rule` names why the refusing
   * side refuses: the candidate's reason for allow_to_deny and other, the live one's for
   * deny_to_allow, '' when unchanged.
   */
  compared(change: DecisionChange, capability: string, hostId: string, rule: string, input: Record<string, unknown>): void;
  /** The decision could not be compared: the candidate threw, answered something unreadable, or needed an operator answer nobody recorded. */
  failed(input: Record<string, unknown>, error: string): void;
}

/**
 * Runs the candidate on one live decision and tells `sink` how its answer differs: an execute
 * decision re-runs with the plugin operator answers it recorded, a grants decision is paired request
 * by request. Never throws for anything the candidate does; a live output it cannot read is a failure.
 */
export function compareWithCandidate(live: LiveDecision, candidate: CandidatePolicy, sink: ComparisonSink): void {
  const problem = decisionOutputProblem(live.entrypoint, live.output);
  if (problem !== null) {
    sink.failed(live.input, `the live decision cannot be read: ${problem}`);
    return;
  }
  if (live.entrypoint === 'agentgate/execute') compareExecute(live, candidate, sink);
  else compareGrants(live, candidate, sink);
}

/** The change from one side's verdict to the other's: the one place the verdict rule is written. */
function changeBetween(live: Verdict, candidate: Verdict): DecisionChange {
  if (live.allows === candidate.allows) return live.name === candidate.name ? 'unchanged' : 'other';
  return live.allows ? 'allow_to_deny' : 'deny_to_allow';
}

function reportChange(sink: ComparisonSink, live: Verdict, candidate: Verdict, capability: string, hostId: string, input: Record<string, unknown>): void {
  const change = changeBetween(live, candidate);
  const rule = change === 'unchanged' ? '' : change === 'deny_to_allow' ? live.rule : candidate.rule;
  sink.compared(change, capability, hostId, rule, input);
}

/** The running totals; a class so the comparison reports into it without allocating per record. */
class Tally implements ComparisonSink {
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

  failed(input: Record<string, unknown>, error: string): void {
    this.errorCount++;
    if (this.errorExamples.length < MAX_ERROR_EXAMPLES) this.errorExamples.push({ input, error });
  }

  compared(change: DecisionChange, capability: string, hostId: string, rule: string, input: Record<string, unknown>): void {
    this.decisions++;
    if (change === 'unchanged') {
      this.unchanged++;
      return;
    }
    if (change === 'other') {
      this.otherChanges++;
      return;
    }
    if (change === 'allow_to_deny') this.allowToDeny++;
    else this.denyToAllow++;
    const key = change + KEY_SEPARATOR + capability + KEY_SEPARATOR + hostId + KEY_SEPARATOR + rule;
    let group = this.groups.get(key);
    if (group === undefined) {
      group = { direction: change, capability, host_id: hostId, rule, count: 0, examples: [] };
      this.groups.set(key, group);
    }
    group.count++;
    if (group.examples.length < this.examplesPerGroup) group.examples.push(input);
  }
}

/** Throws a RangeError naming the first option that bounds nothing. */
export function checkPreviewOptions(options: PreviewOptions): void {
  for (const [name, value] of [['examplesPerGroup', options.examplesPerGroup ?? 0], ['maxGroups', options.maxGroups ?? 0], ['deadlineMs', options.deadlineMs ?? 0]] as const) {
    if (!(value >= 0)) throw new RangeError(`${name} must be a number of at least 0, got ${value}`);
  }
}

/**
 * A preview fed record by record, keeping one tally however many slices the records come in (a
 * worker fed pages of a store's records, say). A record that is malformed, a candidate that throws
 * or answers something unreadable, and an execute decision that would need an operator answer the
 * record lacks are counted in `errors` and never stop the preview.
 */
export class DecisionPreview {
  readonly #candidate: CandidatePolicy;
  readonly #maxGroups: number;
  readonly #tally: Tally;

  constructor(candidate: CandidatePolicy, options: Pick<PreviewOptions, 'examplesPerGroup' | 'maxGroups'> = {}) {
    checkPreviewOptions(options);
    this.#candidate = candidate;
    this.#maxGroups = options.maxGroups ?? DEFAULT_MAX_GROUPS;
    this.#tally = new Tally(options.examplesPerGroup ?? DEFAULT_EXAMPLES_PER_GROUP);
  }

  add(record: DecisionRecord): void {
    const tally = this.#tally;
    tally.evaluated++;
    const problem = decisionRecordProblem(record);
    if (problem !== null) {
      tally.failed({}, `record${recordIdOf(record)} is malformed: ${problem}`);
      return;
    }
    if (record.redactionDependent === true) {
      // Re-run redacted, it would not even reproduce the live answer: any "flip" would be the redaction's.
      tally.failed(record.input, 'the recorded decision depended on a redacted value, so it cannot be re-run faithfully');
      return;
    }
    compareWithCandidate(record, this.#candidate, tally);
  }

  /** The report of every record added so far. */
  report(): PreviewReport {
    const tally = this.#tally;
    return {
      evaluated: tally.evaluated,
      decisions: tally.decisions,
      unchanged: tally.unchanged,
      allow_to_deny: tally.allowToDeny,
      deny_to_allow: tally.denyToAllow,
      other_changes: tally.otherChanges,
      groups: [...tally.groups.values()].sort(compareGroups).slice(0, this.#maxGroups),
      errors: { count: tally.errorCount, examples: [...tally.errorExamples] },
    };
  }
}

/**
 * Runs the candidate on every recorded decision and reports what it would change (DecisionPreview
 * says what counts as an error). Bounded by the records given and, when set, by `deadlineMs`.
 */
export function previewDecisions(records: Iterable<DecisionRecord>, candidate: CandidatePolicy, options: PreviewOptions = {}): PreviewReport {
  checkPreviewOptions(options);
  const now = options.now ?? (() => performance.now());
  const deadlineAtMs = options.deadlineMs === undefined ? Infinity : now() + options.deadlineMs;
  const preview = new DecisionPreview(candidate, options);
  let truncated = false;

  for (const record of records) {
    // One look at the clock per record: a fraction of a microsecond beside a decision's tens.
    if (deadlineAtMs !== Infinity && now() >= deadlineAtMs) {
      truncated = true;
      break;
    }
    preview.add(record);
  }

  const report = preview.report();
  if (truncated) report.truncated = true;
  return report;
}

function recordIdOf(record: unknown): string {
  return isRecord(record) && typeof record.id === 'string' ? ` ${record.id.slice(0, 128)}` : '';
}

function compareExecute(live: LiveDecision, candidate: CandidatePolicy, sink: ComparisonSink): void {
  const input = live.input;
  const recorded = operatorFromAnswers(live.operatorAnswers ?? []);
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
    sink.failed(input, unrecorded === null ? `the candidate could not decide: ${describeThrown(error)}` : unevaluable(unrecorded));
    return;
  }
  if (unrecorded !== null) {
    sink.failed(input, unevaluable(unrecorded));
    return;
  }
  if (!isRecord(output) || typeof output.allow !== 'boolean') {
    sink.failed(input, 'the candidate answered an execute decision without a boolean allow');
    return;
  }
  const agent = input.agent;
  const hostId = isRecord(agent) && typeof agent.host_id === 'string' ? agent.host_id : '';
  const capability = typeof input.capability === 'string' ? input.capability : '';
  reportChange(sink, executeVerdict(live.output as Record<string, unknown>), executeVerdict(output), capability, hostId, input);
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

function compareGrants(live: LiveDecision, candidate: CandidatePolicy, sink: ComparisonSink): void {
  const input = live.input;
  let output: unknown;
  try {
    output = candidate.decideGrants(input as unknown as GrantsInput);
  } catch (error) {
    sink.failed(input, `the candidate could not decide: ${describeThrown(error)}`);
    return;
  }
  const decisions = (live.output as { decisions: Array<Record<string, unknown>> }).decisions;
  const paired = pairByCapability(decisions, output);
  if (typeof paired === 'string') {
    sink.failed(input, paired);
    return;
  }
  const host = input.host;
  const hostId = isRecord(host) && typeof host.id === 'string' ? host.id : '';
  for (let i = 0; i < decisions.length; i++) {
    reportChange(sink, grantVerdict(decisions[i]!), grantVerdict(paired[i]!), decisions[i]!.capability as string, hostId, input);
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
