// The decision log: policy decisions recorded with their (redacted) input, so that a candidate
// policy can be previewed against real traffic before it serves (policy/preview.ts). Grant
// decisions are always recorded; execute decisions by a sample (DECISION_LOG_SAMPLE). Records wait
// in a bounded in-process queue and reach the store
// - on the execute hot path's one store command, which takes them over (handOver) as it takes the
//   audit events: no command of their own;
// - otherwise by a timer, `flushMs` (the audit trail's AUDIT_FLUSH_MS) after the first record that
//   nothing carried;
// - and at shutdown (close).
// Recording never blocks or refuses a request, and a record is a sample, not evidence: a full
// queue drops its oldest, a failed append is dropped, both counted (the audit trail is the record
// of what happened; this is the record of what the policy was asked).
//
// Redaction (policy/redaction.ts) happens before anything is queued, so no redacted value is ever
// in memory longer than the decision, nor in the store. A decision whose outcome depends on a
// redacted value cannot be re-run faithfully; the log re-runs the redacted input on the live policy
// once and marks the record when the answer differs, so a preview counts it as one it cannot
// evaluate rather than as a flip.
import { canonicalJson, operatorFromAnswers, type DecisionEntrypoint, type DecisionRecord, type OperatorAnswer, MAX_OPERATOR_ANSWERS } from '../policy/decision-records.ts';
import type { OperatorEvaluator } from '../policy/engine.ts';
import { redactDecision, type Redaction } from '../policy/redaction.ts';
import type { ExecuteInput, ExecuteOutput, GrantsInput, GrantsOutput, PolicyEngine } from '../policy/types.ts';
import { within } from '../common/deadline.ts';
import { LogThrottle, type Logger } from '../logger.ts';
import { MAX_ROUND_TRIP_DECISION_RECORDS, type DecisionRecords } from '../store/store.ts';

/** Records waiting at most; beyond it the oldest is dropped (counted). */
export const DECISION_QUEUE_MAX = 10_000;
/** A failure that can repeat on every flush is logged at most this often. */
const LOG_EVERY_MS = 10_000;

export interface DecisionLogOptions {
  store: DecisionRecords;
  /** Share of execute decisions recorded, 0 to 1. */
  sample: number;
  maxRecords: number;
  redaction: Redaction;
  /** How long a record nothing carried waits for the timer's append. */
  flushMs: number;
  /** How long a flush waits for its appends. */
  writeDeadlineMs: number;
  logger: Logger;
  /** Wall clock for `at` (default Date.now). */
  now?: () => number;
  /** Uniform in [0, 1) (default Math.random); tests fix it. */
  random?: () => number;
}

/** Queued records handed to a store call that appends them (DecisionLog.handOver). */
export interface DecisionHandover {
  records: readonly string[];
  maxRecords: number;
  /** What the append answered: per record whether it was written, or its failure. */
  settle(appended: Promise<boolean[]> | boolean[]): void;
}

/** What the log has done since it started, for metrics and tests. */
export interface DecisionLogCounters {
  recorded: number;
  written: number;
  droppedQueueFull: number;
  droppedWriteFailed: number;
  /** Records marked because their decision changed once redacted (the preview cannot re-run them). */
  redactionDependent: number;
  /** Decisions that could not be recorded at all (a value the record cannot hold); the decision stood. */
  unrecordable: number;
}

export class DecisionLog {
  readonly #options: DecisionLogOptions;
  readonly #now: () => number;
  readonly #random: () => number;
  #queue: string[] = [];
  readonly #inFlight = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | null = null;
  #closed = false;
  readonly #throttle = new LogThrottle(LOG_EVERY_MS);
  readonly counters: DecisionLogCounters = { recorded: 0, written: 0, droppedQueueFull: 0, droppedWriteFailed: 0, redactionDependent: 0, unrecordable: 0 };

  constructor(options: DecisionLogOptions) {
    if (!(options.sample >= 0 && options.sample <= 1)) throw new RangeError(`sample must be in 0..1, got ${options.sample}`);
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#random = options.random ?? Math.random;
  }

  /** Whether to record the execute decision about to be made: asked first, so only a recorded one pays for its operator answers. */
  samplesExecute(): boolean {
    const { sample } = this.#options;
    return sample > 0 && (sample >= 1 || this.#random() < sample);
  }

  get queued(): number {
    return this.#queue.length;
  }

  /**
   * Records one decision. `replay` re-runs a redacted input on the live policy (see the header);
   * it is called only when the redaction took something out. Never throws.
   */
  record(entrypoint: DecisionEntrypoint, sha256: string, input: object, output: unknown, operatorAnswers: OperatorAnswer[] | undefined, replay: Replay): void {
    if (this.#closed) return;
    try {
      const redacted = redactDecision(this.#options.redaction, entrypoint, input as Record<string, unknown>, output, operatorAnswers);
      const record: DecisionRecord = { at: new Date(this.#now()).toISOString(), entrypoint, sha256, input: redacted.input, output: redacted.output };
      if (redacted.operatorAnswers !== undefined && redacted.operatorAnswers.length > 0) record.operatorAnswers = redacted.operatorAnswers;
      if (redactionTookSomething(input, redacted.input) && replay(record) !== verdictOf(entrypoint, output)) {
        record.redactionDependent = true;
        this.counters.redactionDependent++;
      }
      this.#enqueue(JSON.stringify(record));
    } catch (err) {
      this.counters.unrecordable++;
      this.#logThrottled('record', 'a policy decision could not be recorded; the decision stands', { entrypoint, err });
    }
  }

  /**
   * Hands up to MAX_ROUND_TRIP_DECISION_RECORDS queued records to a store call the caller makes
   * anyway (execute's round trip), or null when none wait.
   */
  handOver(): DecisionHandover | null {
    if (this.#queue.length === 0) return null;
    const records = this.#queue.length <= MAX_ROUND_TRIP_DECISION_RECORDS ? this.#queue : this.#queue.slice(0, MAX_ROUND_TRIP_DECISION_RECORDS);
    this.#queue = records === this.#queue ? [] : this.#queue.slice(MAX_ROUND_TRIP_DECISION_RECORDS);
    if (this.#queue.length === 0) this.#disarm();
    return {
      records,
      maxRecords: this.#options.maxRecords,
      settle: (appended) => {
        const settled = Promise.resolve(appended).then(
          (written) => this.#settle(records.length, written, undefined),
          (err: unknown) => this.#settle(records.length, [], err),
        );
        this.#inFlight.add(settled);
        void settled.finally(() => this.#inFlight.delete(settled));
      },
    };
  }

  /** Appends everything queued and waits (bounded by the write deadline) for every append in flight. */
  async flush(): Promise<void> {
    // Bounded: each pass takes up to MAX_ROUND_TRIP_DECISION_RECORDS of a queue of at most DECISION_QUEUE_MAX.
    for (let handover = this.handOver(); handover !== null; handover = this.handOver()) {
      let appended: Promise<boolean[]>;
      try {
        appended = this.#options.store.appendDecisionRecords(handover.records, handover.maxRecords);
      } catch (err) {
        appended = Promise.reject(err);
      }
      handover.settle(appended);
    }
    if (this.#inFlight.size === 0) return;
    try {
      await within(Promise.allSettled([...this.#inFlight]), this.#options.writeDeadlineMs, 'decision log flush');
    } catch (err) {
      this.#logThrottled('flush', 'decision records are still being written after the deadline', { err });
    }
  }

  async close(): Promise<void> {
    this.#disarm();
    await this.flush();
    this.#closed = true;
  }

  #enqueue(json: string): void {
    this.counters.recorded++;
    if (this.#queue.length >= DECISION_QUEUE_MAX) {
      this.#queue.shift();
      this.counters.droppedQueueFull++;
      this.#logThrottled('full', 'the decision log queue is full; the oldest records are dropped', {});
    }
    this.#queue.push(json);
    if (this.#timer === null) {
      this.#timer = setTimeout(() => {
        this.#timer = null;
        void this.flush();
      }, this.#options.flushMs);
      this.#timer.unref();
    }
  }

  #settle(count: number, written: boolean[], err: unknown): void {
    let ok = 0;
    for (let i = 0; i < count; i++) if (written[i] === true) ok++;
    this.counters.written += ok;
    this.counters.droppedWriteFailed += count - ok;
    if (count > ok) this.#logThrottled('write', 'decision records could not be written; they are dropped', { dropped: count - ok, ...(err === undefined ? {} : { err }) });
  }

  #disarm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #logThrottled(key: string, message: string, fields: Record<string, unknown>): void {
    const suppressed = this.#throttle.admit(key);
    if (suppressed !== null) this.#options.logger.warn(message, suppressed > 0 ? { ...fields, suppressed } : fields);
  }
}

/** Re-runs a redacted record on the live policy; answers its verdict (verdictOf), or null when it cannot. */
export type Replay = (record: DecisionRecord) => string | null;

/**
 * A decision's outcome in one string: execute's allow and grant, or each grants decision's verdict
 * by capability. Two decisions with the same string would read the same in a preview.
 */
export function verdictOf(entrypoint: DecisionEntrypoint, output: unknown): string | null {
  if (typeof output !== 'object' || output === null) return null;
  if (entrypoint === 'agentgate/execute') {
    const o = output as Partial<ExecuteOutput>;
    return o.allow === true ? `allow:${o.grant_id ?? ''}` : 'deny';
  }
  const decisions = (output as Partial<GrantsOutput>).decisions;
  if (!Array.isArray(decisions)) return null;
  return decisions.map((d) => `${d.capability}=${d.decision}`).sort().join(',');
}

/** Whether the redaction changed the input at all: only then can a re-run tell anything. */
function redactionTookSomething(input: object, redacted: Record<string, unknown>): boolean {
  return canonicalJson(input) !== canonicalJson(redacted);
}

/**
 * The policy engine as services use it, with its decisions recorded (grant decisions always,
 * execute decisions by the log's sample) and offered to the observer (a shadow policy), which sees
 * every decision. Nothing here changes a decision: the engine's answer or exception passes through,
 * and a failure to record or observe is the log's or the observer's own.
 */
export function recordingPolicy(engine: PolicyEngine, log: DecisionLog, observer?: DecisionObserver): PolicyEngine {
  const replayOn = (record: DecisionRecord): string | null => {
    try {
      const output = record.entrypoint === 'agentgate/execute'
        ? engine.decideExecute(record.input as unknown as ExecuteInput, operatorFromAnswers(record.operatorAnswers ?? []))
        : engine.decideGrants(record.input as unknown as GrantsInput);
      return verdictOf(record.entrypoint, output);
    } catch {
      return null;
    }
  };
  return {
    decideGrants(input: GrantsInput): GrantsOutput {
      const output = engine.decideGrants(input);
      log.record('agentgate/grants', engine.info().sha256, input, output, undefined, replayOn);
      if (observer?.active()) observeSafely(observer, { entrypoint: 'agentgate/grants', input: input as unknown as Record<string, unknown>, output });
      return output;
    },
    decideExecute(input: ExecuteInput, operator?: OperatorEvaluator): ExecuteOutput {
      const recorded = log.samplesExecute();
      const observed = observer?.active() === true;
      if (!recorded && !observed) return engine.decideExecute(input, operator);
      const answers: OperatorAnswer[] = [];
      const answering: OperatorEvaluator | undefined = operator === undefined ? undefined : (name, operand, actual) => {
        const answer = operator(name, operand, actual);
        if (answers.length < MAX_OPERATOR_ANSWERS) answers.push([name, operand, actual, answer === true]);
        return answer;
      };
      const output = engine.decideExecute(input, answering);
      if (recorded) log.record('agentgate/execute', engine.info().sha256, input, output, answers, replayOn);
      if (observed) observeSafely(observer!, { entrypoint: 'agentgate/execute', input: input as unknown as Record<string, unknown>, output, operatorAnswers: answers });
      return output;
    },
    info: () => engine.info(),
  };
}

type Observation = { entrypoint: DecisionEntrypoint; input: Record<string, unknown>; output: unknown; operatorAnswers?: OperatorAnswer[] };

/** What watches every live decision (a shadow policy): it must never throw nor wait. */
export interface DecisionObserver {
  active(): boolean;
  observe(observation: Observation): void;
}

/** An observer's failure is its own: the decision it watched stands. */
function observeSafely(observer: DecisionObserver, observation: Observation): void {
  try {
    observer.observe(observation);
  } catch {
    // Ignored on purpose: the shadow counts its own failures (policy/candidates.ts).
  }
}
