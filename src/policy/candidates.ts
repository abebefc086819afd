// Candidate policy artefacts, evaluated off the main thread for two uses:
// - a preview: the candidate runs over recorded decisions (decision-records.ts), pulled page by page
//   from a store, and one report says what it would change (preview.ts);
// - a shadow: the candidate sees every live decision after the live policy made it, and a tally says
//   how often, and where, it would have decided otherwise.
// Both use preview.ts's comparison, so a preview and a shadow can never disagree about what a change is.
//
// The wasm runs in workers (candidate-runner.ts): previews in a child process, each shadow in a
// worker thread, so a candidate that is slow, loops, crashes or answers garbage costs its own worker
// and never the event loop: a preview rejects, a shadow counts errors. The live decision never waits
// for a shadow: observe() only queues (bounded), and the queue leaves in batches, one message per batch.
import { LogThrottle, type Logger } from '../logger.ts';
import { describeThrown, NamedError } from '../common/thrown.ts';
import type { DecisionEntrypoint, DecisionRecord, OperatorAnswer, StoredRecordText } from './decision-records.ts';
import { PolicyLoadError } from './engine.ts';
import { CandidateRunner, CandidateTimeoutError, CandidateWorkerError } from './candidate-runner.ts';

export { CandidateTimeoutError, CandidateWorkerError } from './candidate-runner.ts';
import type { FromWorker, ShadowChange, ShadowResult } from './candidate-worker.ts';
import { checkPreviewOptions, type PreviewReport } from './preview.ts';
import type { DecisionStreamAddress } from '../store/store.ts';

/**
 * What a preview reads: records, or a store's texts of them, which the worker parses (so a preview
 * of 100,000 records does not parse them on the event loop).
 */
export type PreviewItem = DecisionRecord | StoredRecordText;

/**
 * Where a preview's records come from: pages this process reads and sends (the memory store), or
 * the stream the preview's process reads itself on a connection of its own (the Redis store).
 */
export type PreviewSource = AsyncIterable<ReadonlyArray<PreviewItem>> | { stream: DecisionStreamAddress; limit: number };

export interface ShadowObservation {
  entrypoint: DecisionEntrypoint;
  /** The live decision's input, unredacted. observe() keeps it until its batch is sent: do not change it afterwards. */
  input: Record<string, unknown>;
  /** The live policy's output. */
  output: unknown;
  /** Execute: the plugin operator answers the live decision used, so the shadow re-runs it without the sandbox. */
  operatorAnswers?: OperatorAnswer[];
}

export interface ShadowDisagreement {
  entrypoint: DecisionEntrypoint;
  /**
   * As preview.ts counts changes: allow_to_deny and deny_to_allow are flips; `other` is a grants
   * decision that moved between 'approval' and 'deny' (neither side allows). A decision both sides
   * allow, or refuse in the same way, is an agreement even when the details differ (another
   * grant_id, other violations or reasons).
   */
  direction: 'allow_to_deny' | 'deny_to_allow' | 'other';
  capability: string;
  host_id: string;
  /** Why the refusing side refuses: the shadow's reason for allow_to_deny and other, the live one's for deny_to_allow. */
  rule: string;
  /** As observed (the caller redacts before keeping it). */
  input: Record<string, unknown>;
}

export interface ShadowTally {
  sha256: string;
  /** When the shadow was loaded, ISO 8601. */
  loaded_at: string;
  /** Observations offered while this shadow was loaded. */
  observed: number;
  /** Observations the shadow settled: compared, or counted in `errors`. */
  evaluated: number;
  /** Decisions the shadow decided as the live policy did (a grants observation holds one per request). */
  agreed: number;
  /** Decisions the shadow decided otherwise; onDisagreement was called for each. */
  disagreed: number;
  /** Observations that never reached the shadow: the queue was full (the shadow was slow, or its worker was restarting). */
  dropped: number;
  /** Observations the shadow could not settle: it threw, answered malformed, timed out or crashed, or needed an unrecorded operator answer. */
  errors: number;
  /** Observations waiting for the shadow now. */
  queued: number;
  /** Observations the shadow is evaluating now. */
  running: number;
  /** Disagreements by capability: at most 1000 capabilities, the rest under "(other)". */
  by_capability: Record<string, { allow_to_deny: number; deny_to_allow: number; other: number }>;
}

export interface CandidatePoliciesOptions {
  /** Cap on a candidate's linear memory in 64 KiB pages (the engine's default when unset). */
  memoryMaxPages?: number;
  /** Observations waiting for the shadow at most; beyond it they are dropped and counted. */
  shadowQueueMax: number;
  /** How long one preview may run in total, and one shadow batch. */
  previewTimeoutMs: number;
  /** Called on the main thread for every decision the shadow decided otherwise; what it throws is logged and ignored. */
  onDisagreement(disagreement: ShadowDisagreement): void;
  logger: Logger;
}

/** The most records one message to a preview's worker holds: a bigger page is cut. */
const PREVIEW_PAGE_MAX = 1000;
/**
 * The most observations one message to a shadow's worker holds. A batch costs one postMessage
 * (cloned on the main thread) whatever its size, and a batch lost to a timeout or a crash is
 * counted as errors whole, so it stays modest.
 */
const SHADOW_BATCH_MAX = 256;
/** Capabilities tallied by name; the rest are tallied together under OTHER_CAPABILITIES. */
const MAX_TALLY_CAPABILITIES = 1000;
const OTHER_CAPABILITIES = '(other)';
/** Previews waiting behind the running one at most: they run one at a time, in one process. */
const MAX_WAITING_PREVIEWS = 4;
/** A shadow whose worker keeps dying restarts after 1 s, 2 s, 4 s... up to this. */
const MAX_RESTART_DELAY_MS = 60_000;
/** One log line per kind of shadow failure per window, with a count of the ones it stood for. */
const FAILURE_LOG_WINDOW_MS = 60_000;

/** The candidate policies were closed. */
export class CandidatesClosedError extends NamedError {}

/** A preview's process could not read the recorded decisions from the stream it was sent to (Redis unreachable, say). */
export class DecisionSourceError extends NamedError {}

type CapabilityCounts = { allow_to_deny: number; deny_to_allow: number; other: number };

/** A loaded shadow: its thread and queue, and the counts its tally reports (ShadowTally says what each counts). */
interface Shadow extends Pick<ShadowTally, 'observed' | 'evaluated' | 'agreed' | 'disagreed' | 'dropped' | 'errors'> {
  readonly artefact: Uint8Array;
  readonly sha256: string;
  readonly loadedAt: string;
  readonly thread: CandidateRunner;
  readonly queue: ShadowObservation[];
  /** The batch the worker evaluates now: one at a time. */
  running: readonly ShadowObservation[] | null;
  /** False while the worker restarts after a timeout or a crash: observations wait in the queue. */
  ready: boolean;
  flushScheduled: boolean;
  failuresInARow: number;
  restartTimer: NodeJS.Timeout | null;
  readonly byCapability: Map<string, CapabilityCounts>;
}

export class CandidatePolicies {
  readonly #memoryMaxPages: number | undefined;
  readonly #shadowQueueMax: number;
  readonly #timeoutMs: number;
  readonly #onDisagreement: (disagreement: ShadowDisagreement) => void;
  readonly #logger: Logger;
  readonly #failureLog = new LogThrottle(FAILURE_LOG_WINDOW_MS);
  #previewWorker: CandidateRunner | null = null;
  /** Previews run one at a time: each waits for the one before it. */
  #previews: Promise<unknown> = Promise.resolve();
  #previewsWaiting = 0;
  #shadow: Shadow | null = null;
  /** Shadow loads run one at a time, so an older artefact can never replace a newer one. */
  #shadowLoads: Promise<unknown> = Promise.resolve();
  #closed = false;

  constructor(options: CandidatePoliciesOptions) {
    if (!Number.isInteger(options.shadowQueueMax) || options.shadowQueueMax < 0) throw new RangeError(`shadowQueueMax must be an integer of at least 0, got ${options.shadowQueueMax}`);
    if (!(options.previewTimeoutMs > 0) || !Number.isFinite(options.previewTimeoutMs)) throw new RangeError(`previewTimeoutMs must be a positive number, got ${options.previewTimeoutMs}`);
    const pages = options.memoryMaxPages;
    // Checked here, as the engine checks it, so that a bad setting fails at start rather than as every candidate's load error.
    if (pages !== undefined && (!Number.isInteger(pages) || pages < 1 || pages > 65536)) throw new RangeError(`memoryMaxPages must be an integer in 1..65536, got ${pages}`);
    this.#memoryMaxPages = pages;
    this.#shadowQueueMax = options.shadowQueueMax;
    this.#timeoutMs = options.previewTimeoutMs;
    this.#onDisagreement = options.onDisagreement;
    this.#logger = options.logger;
  }

  /**
   * Runs the candidate over the records of `source` (a page of more than 1000 records is cut) in a
   * worker process and reports what it would change, with the candidate's sha256. Rejects with
   * PolicyLoadError when the bytes are not a policy, with CandidateTimeoutError when the whole
   * preview (reading the records included) takes longer than previewTimeoutMs (its worker is then
   * stopped, and replaced by the next preview), with DecisionSourceError when the worker cannot read
   * the stream it was sent to, and with RangeError for options that bound nothing.
   */
  async preview(artefact: Uint8Array, source: PreviewSource, options: { examplesPerGroup?: number; maxGroups?: number } = {}): Promise<PreviewReport & { sha256: string }> {
    checkPreviewOptions(options);
    if (this.#closed) throw new CandidatesClosedError('candidate policies are closed');
    if (this.#previewsWaiting >= MAX_WAITING_PREVIEWS) throw new Error(`${MAX_WAITING_PREVIEWS} previews are waiting already; try again when one has finished`);
    // A copy: the caller may reuse its buffer, and a view of a larger buffer would clone all of it.
    const bytes = new Uint8Array(artefact);
    this.#previewsWaiting++;
    const run = this.#previews.then(() => {
      this.#previewsWaiting--;
      return this.#runPreview(bytes, source, options);
    });
    this.#previews = run.catch(() => undefined);
    return run;
  }

  /** Loads a shadow, replacing any (its tally starts afresh). Rejects with PolicyLoadError for bytes that are not a policy; the previous shadow then stays. */
  loadShadow(artefact: Uint8Array): Promise<{ sha256: string }> {
    const run = this.#shadowLoads.then(() => this.#loadShadow(new Uint8Array(artefact)));
    this.#shadowLoads = run.catch(() => undefined);
    return run;
  }

  /** Whether a shadow is loaded: asked on every live decision, so it copies nothing. */
  hasShadow(): boolean {
    return this.#shadow !== null;
  }

  /** A copy of the loaded shadow's bytes (for promotion), or null. */
  shadowArtefact(): Uint8Array | null {
    return this.#shadow === null ? null : new Uint8Array(this.#shadow.artefact);
  }

  clearShadow(): void {
    const shadow = this.#shadow;
    this.#shadow = null;
    if (shadow !== null) void this.#retire(shadow);
  }

  /**
   * Offers a live decision to the shadow; a no-op when none is loaded. Never throws and never waits:
   * the observation is queued (or dropped and counted when the queue is full) and the queue leaves
   * for the worker in batches, from a setImmediate, while no batch is running.
   */
  observe(observation: ShadowObservation): void {
    const shadow = this.#shadow;
    if (shadow === null) return;
    shadow.observed++;
    if (shadow.queue.length >= this.#shadowQueueMax) {
      shadow.dropped++;
      return;
    }
    shadow.queue.push(observation);
    if (!shadow.flushScheduled && shadow.running === null && shadow.ready) {
      shadow.flushScheduled = true;
      setImmediate(() => this.#flush(shadow));
    }
  }

  /** The loaded shadow's tally so far, or null when none is loaded. */
  tally(): ShadowTally | null {
    const shadow = this.#shadow;
    if (shadow === null) return null;
    const byCapability: ShadowTally['by_capability'] = {};
    for (const [capability, counts] of shadow.byCapability) {
      // A capability may be named __proto__: defined, not assigned, so it stays a plain member.
      Object.defineProperty(byCapability, capability, { value: { ...counts }, enumerable: true, writable: true, configurable: true });
    }
    return {
      sha256: shadow.sha256,
      loaded_at: shadow.loadedAt,
      observed: shadow.observed,
      evaluated: shadow.evaluated,
      agreed: shadow.agreed,
      disagreed: shadow.disagreed,
      dropped: shadow.dropped,
      errors: shadow.errors,
      queued: shadow.queue.length,
      running: shadow.running?.length ?? 0,
      by_capability: byCapability,
    };
  }

  /** Stops every worker; a running preview rejects, and nothing more is accepted. */
  async close(): Promise<void> {
    this.#closed = true;
    const shadow = this.#shadow;
    this.#shadow = null;
    const previewWorker = this.#previewWorker;
    this.#previewWorker = null;
    await Promise.all([shadow === null ? undefined : this.#retire(shadow), previewWorker?.terminate()]);
  }

  // -------------------------------------------------------------------------------------------
  // Previews
  // -------------------------------------------------------------------------------------------

  async #runPreview(artefact: Uint8Array, source: PreviewSource, options: { examplesPerGroup?: number; maxGroups?: number }): Promise<PreviewReport & { sha256: string }> {
    if (this.#closed) throw new CandidatesClosedError('candidate policies are closed');
    const worker = (this.#previewWorker ??= new CandidateRunner('process'));
    const deadline = new Deadline(this.#timeoutMs, `the preview did not finish within ${this.#timeoutMs} ms; its worker was stopped`);
    const iterator = 'stream' in source ? null : source[Symbol.asyncIterator]();
    let finished = false;
    try {
      const preview = { ...(options.examplesPerGroup === undefined ? {} : { examplesPerGroup: options.examplesPerGroup }), ...(options.maxGroups === undefined ? {} : { maxGroups: options.maxGroups }) };
      const loaded = await worker.request({ type: 'load', artefact, ...this.#memory(), preview }, deadline.remainingMs(), deadline.message);
      if (loaded.type === 'load_failed') throw new PolicyLoadError(loaded.message);
      if (loaded.type !== 'loaded') throw unexpected(loaded);
      if ('stream' in source) await readInWorker(worker, source, deadline);
      else if (iterator !== null) await sendPages(worker, iterator, deadline);
      const answer = await worker.request({ type: 'report' }, deadline.remainingMs(), deadline.message);
      if (answer.type !== 'report') throw unexpected(answer);
      finished = true;
      return { ...answer.report, sha256: loaded.sha256 };
    } finally {
      if (!finished) {
        // Whatever stopped the preview, the next one starts in a fresh process (this one may still be
        // running the candidate), and the page source is told it will not be read further.
        await worker.terminate();
        if (iterator !== null) closeQuietly(iterator);
      }
    }
  }

  #memory(): { memoryMaxPages?: number } {
    return this.#memoryMaxPages === undefined ? {} : { memoryMaxPages: this.#memoryMaxPages };
  }

  // -------------------------------------------------------------------------------------------
  // The shadow
  // -------------------------------------------------------------------------------------------

  async #loadShadow(artefact: Uint8Array): Promise<{ sha256: string }> {
    if (this.#closed) throw new CandidatesClosedError('candidate policies are closed');
    // A thread of its own: the running shadow goes on until this one has loaded, and stays if it cannot.
    const thread = new CandidateRunner('thread');
    let answer: FromWorker;
    try {
      answer = await thread.request({ type: 'load', artefact, ...this.#memory() }, this.#timeoutMs, `loading the shadow took longer than ${this.#timeoutMs} ms; its worker was stopped`);
    } catch (error) {
      await thread.terminate();
      throw error;
    }
    if (answer.type !== 'loaded' || this.#closed) {
      await thread.terminate();
      if (answer.type === 'load_failed') throw new PolicyLoadError(answer.message);
      throw this.#closed ? new CandidatesClosedError('candidate policies are closed') : unexpected(answer);
    }
    const previous = this.#shadow;
    this.#shadow = {
      artefact, sha256: answer.sha256, loadedAt: new Date().toISOString(), thread, queue: [], running: null, ready: true, flushScheduled: false,
      failuresInARow: 0, restartTimer: null, observed: 0, evaluated: 0, agreed: 0, disagreed: 0, dropped: 0, errors: 0, byCapability: new Map(),
    };
    if (previous !== null) void this.#retire(previous);
    return { sha256: answer.sha256 };
  }

  /** Stops a shadow that is no longer the loaded one; its late answers are ignored (#shadow differs). */
  async #retire(shadow: Shadow): Promise<void> {
    if (shadow.restartTimer !== null) clearTimeout(shadow.restartTimer);
    shadow.restartTimer = null;
    shadow.queue.length = 0;
    await shadow.thread.terminate();
  }

  /** Sends the next batch, unless one is running, the worker is restarting, or the shadow was replaced. */
  #flush(shadow: Shadow): void {
    shadow.flushScheduled = false;
    if (this.#shadow !== shadow || !shadow.ready || shadow.running !== null || shadow.queue.length === 0) return;
    const batch = shadow.queue.splice(0, SHADOW_BATCH_MAX);
    shadow.running = batch;
    const message = `a shadow batch of ${batch.length} decisions did not finish within ${this.#timeoutMs} ms; its worker was stopped`;
    shadow.thread.request({ type: 'shadow', observations: batch }, this.#timeoutMs, message).then(
      (answer) => this.#settleBatch(shadow, batch, answer),
      (error: unknown) => this.#batchFailed(shadow, batch, error),
    );
  }

  #settleBatch(shadow: Shadow, batch: readonly ShadowObservation[], answer: FromWorker): void {
    if (this.#shadow !== shadow) return;
    shadow.running = null;
    const results = answer.type === 'shadow_results' && Array.isArray(answer.results) && answer.results.length === batch.length ? answer.results : null;
    if (results === null) {
      this.#countFailedBatch(shadow, batch, answer.type === 'failed' ? answer.message : 'the shadow worker answered something unreadable');
    } else {
      shadow.failuresInARow = 0;
      // Bounded by the batch (SHADOW_BATCH_MAX), and each result's changes by its decision's requests.
      for (let i = 0; i < batch.length; i++) this.#count(shadow, batch[i]!, results[i]);
    }
    this.#flush(shadow);
  }

  #count(shadow: Shadow, observation: ShadowObservation, result: ShadowResult | undefined): void {
    shadow.evaluated++;
    if (!isComparedResult(result)) {
      shadow.errors++;
      return;
    }
    shadow.agreed += result.agreed;
    for (const change of result.changes) {
      shadow.disagreed++;
      countCapability(shadow.byCapability, change);
      this.#tell({ entrypoint: observation.entrypoint, direction: change.direction, capability: change.capability, host_id: change.host_id, rule: change.rule, input: observation.input });
    }
  }

  /** Hands a disagreement to the caller, whose failure must not reach the shadow's bookkeeping. */
  #tell(disagreement: ShadowDisagreement): void {
    try {
      this.#onDisagreement(disagreement);
    } catch (error) {
      const suppressed = this.#failureLog.admit('on-disagreement');
      if (suppressed !== null) this.#logger.error('the shadow disagreement handler threw; the disagreement is still counted', { error: describeThrown(error), ...(suppressed > 0 ? { similarNotLogged: suppressed } : {}) });
    }
  }

  #batchFailed(shadow: Shadow, batch: readonly ShadowObservation[], error: unknown): void {
    if (this.#shadow !== shadow) return;
    shadow.running = null;
    this.#countFailedBatch(shadow, batch, describeThrown(error));
    if (error instanceof CandidateTimeoutError || error instanceof CandidateWorkerError) {
      // The worker is gone with the shadow in it: a fresh one loads it again before the queue goes on.
      shadow.ready = false;
      shadow.failuresInARow++;
      this.#restart(shadow);
    } else {
      // The batch never reached the worker (a value that cannot be cloned); the worker goes on.
      this.#flush(shadow);
    }
  }

  #countFailedBatch(shadow: Shadow, batch: readonly ShadowObservation[], why: string): void {
    shadow.evaluated += batch.length;
    shadow.errors += batch.length;
    const suppressed = this.#failureLog.admit('shadow-batch');
    if (suppressed !== null) {
      this.#logger.warn('the shadow policy could not settle a batch of decisions; they count as errors', {
        sha256: shadow.sha256, decisions: batch.length, error: why, ...(suppressed > 0 ? { similarNotLogged: suppressed } : {}),
      });
    }
  }

  /**
   * Loads the shadow into a fresh worker: at once after a first failure, then after 1 s, 2 s, 4 s...
   * (at most MAX_RESTART_DELAY_MS), so a shadow that kills every worker costs a thread start now and
   * then, not one per batch. The queue waits meanwhile, and drops what does not fit.
   */
  #restart(shadow: Shadow): void {
    const failures = shadow.failuresInARow;
    const delayMs = failures <= 1 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 1000 * 2 ** (failures - 2));
    shadow.restartTimer = setTimeout(() => {
      shadow.restartTimer = null;
      if (this.#shadow !== shadow) return;
      const message = `reloading the shadow took longer than ${this.#timeoutMs} ms; its worker was stopped`;
      shadow.thread.request({ type: 'load', artefact: shadow.artefact, ...this.#memory() }, this.#timeoutMs, message).then(
        (answer) => {
          if (this.#shadow !== shadow) return;
          if (answer.type === 'loaded') {
            shadow.ready = true;
            this.#flush(shadow);
            return;
          }
          shadow.failuresInARow++;
          this.#restart(shadow);
        },
        () => {
          if (this.#shadow !== shadow) return;
          shadow.failuresInARow++;
          this.#restart(shadow);
        },
      );
    }, delayMs);
    shadow.restartTimer.unref();
  }
}

/** The time left of one preview, with the message it fails with once there is none. */
class Deadline {
  readonly #atMs: number;
  readonly message: string;

  constructor(timeoutMs: number, message: string) {
    this.#atMs = performance.now() + timeoutMs;
    this.message = message;
  }

  remainingMs(): number {
    return Math.max(0, this.#atMs - performance.now());
  }

  /** `promise`, or a CandidateTimeoutError once the deadline passes. */
  async race<T>(promise: Promise<T>): Promise<T> {
    const remainingMs = this.remainingMs();
    if (remainingMs === 0) {
      promise.catch(() => undefined);
      throw new CandidateTimeoutError(this.message);
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new CandidateTimeoutError(this.message)), remainingMs);
    });
    try {
      return await Promise.race([promise, late]);
    } finally {
      clearTimeout(timer);
      // A source that fails after the deadline has nobody left to tell.
      promise.catch(() => undefined);
    }
  }
}

/**
 * Feeds the pages to the worker: one chunk is evaluated there while the next page is read from the
 * source, and no more, so a source faster than the candidate never piles records up in the worker.
 */
async function sendPages(worker: CandidateRunner, iterator: AsyncIterator<ReadonlyArray<PreviewItem>>, deadline: Deadline): Promise<void> {
  let inFlight: Promise<void> | null = null;
  // Bounded by the deadline: every turn waits for the source or the worker, at most the time left,
  // and race() fails at once when none is left (even for a source that never waits).
  for (;;) {
    const next = await deadline.race(iterator.next());
    if (next.done === true) break;
    const page: unknown = next.value;
    if (!Array.isArray(page)) throw new TypeError('a page of decision records is not an array');
    // Bounded by the page's length.
    for (let start = 0; start < page.length; start += PREVIEW_PAGE_MAX) {
      if (inFlight !== null) await inFlight;
      const records = (page.length <= PREVIEW_PAGE_MAX ? page : page.slice(start, start + PREVIEW_PAGE_MAX)) as PreviewItem[];
      inFlight = sendChunk(worker, records, deadline);
      // Awaited above or below; this only keeps a failure that comes while the next page is read
      // from being reported as unhandled.
      inFlight.catch(() => undefined);
    }
  }
  if (inFlight !== null) await inFlight;
}

/** Has the worker read the stream itself; it answers once every record it read is in the tally. */
async function readInWorker(worker: CandidateRunner, source: { stream: DecisionStreamAddress; limit: number }, deadline: Deadline): Promise<void> {
  const answer = await worker.request({ type: 'read', stream: source.stream, limit: source.limit }, deadline.remainingMs(), deadline.message);
  if (answer.type === 'read_failed') throw new DecisionSourceError(answer.message);
  if (answer.type !== 'read_done') throw unexpected(answer);
}

async function sendChunk(worker: CandidateRunner, records: ReadonlyArray<PreviewItem>, deadline: Deadline): Promise<void> {
  const answer = await worker.request({ type: 'page', records }, deadline.remainingMs(), deadline.message);
  if (answer.type !== 'page_done') throw unexpected(answer);
}

function closeQuietly(iterator: AsyncIterator<unknown>): void {
  try {
    void iterator.return?.()?.catch(() => undefined);
  } catch {
    // A source that cannot stop cleanly has nothing more to say to a preview that failed anyway.
  }
}

function unexpected(answer: FromWorker): Error {
  return new Error(answer.type === 'failed' ? `the candidate worker failed: ${answer.message}` : `the candidate worker answered ${answer.type} out of turn`);
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A result of our own worker, checked anyway: what it says becomes counts and calls on the main thread. */
function isComparedResult(result: unknown): result is { agreed: number; changes: ShadowChange[] } {
  if (!isRecord(result) || !Number.isInteger(result.agreed) || (result.agreed as number) < 0 || !Array.isArray(result.changes)) return false;
  return (result.changes as unknown[]).every((change) => isRecord(change)
    && (change.direction === 'allow_to_deny' || change.direction === 'deny_to_allow' || change.direction === 'other')
    && typeof change.capability === 'string' && typeof change.host_id === 'string' && typeof change.rule === 'string');
}

function countCapability(byCapability: Map<string, CapabilityCounts>, change: ShadowChange): void {
  const key = byCapability.has(change.capability) || byCapability.size < MAX_TALLY_CAPABILITIES ? change.capability : OTHER_CAPABILITIES;
  let counts = byCapability.get(key);
  if (counts === undefined) {
    counts = { allow_to_deny: 0, deny_to_allow: 0, other: 0 };
    byCapability.set(key, counts);
  }
  counts[change.direction]++;
}
