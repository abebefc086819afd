// The candidate worker: a thread that loads one candidate policy artefact and runs it for the main
// thread (candidates.ts), either over pages of recorded decisions (a preview) or over batches of live
// decisions (a shadow). It exists so that a candidate's wasm never runs on the event loop: a
// candidate that takes long, or never finishes, is stopped by terminating this thread, which no code
// can do to synchronous wasm running on the event loop itself.
//
// It answers every request with exactly one message carrying the request's id, and handles requests
// one at a time in the order they came, so an answer always describes the candidate its request saw.
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { describeThrown } from '../common/thrown.ts';
import { loadCandidateEngine, type WasmPolicyEngine } from './engine.ts';
import { compareWithCandidate, DecisionPreview, type ComparisonSink, type DecisionChange, type LiveDecision, type PreviewReport } from './preview.ts';
import { recordFromText, type DecisionRecord, type StoredRecordText } from './decision-records.ts';

export type ToWorker =
  /** Loads a candidate, replacing the loaded one only when it loads. With `preview`, a new preview tally starts. */
  | { type: 'load'; id: number; artefact: Uint8Array; memoryMaxPages?: number; preview?: { examplesPerGroup?: number; maxGroups?: number } }
  /** Adds records to the preview tally. */
  | { type: 'page'; id: number; records: ReadonlyArray<DecisionRecord | StoredRecordText> }
  /** Ends the preview: answers its report and unloads the candidate. */
  | { type: 'report'; id: number }
  /** Runs the candidate on live decisions, one result per decision in the same order. */
  | { type: 'shadow'; id: number; observations: readonly LiveDecision[] };

export type FromWorker =
  | { type: 'loaded'; id: number; sha256: string }
  | { type: 'load_failed'; id: number; message: string }
  | { type: 'page_done'; id: number }
  | { type: 'report'; id: number; report: PreviewReport }
  | { type: 'shadow_results'; id: number; results: ShadowResult[] }
  /** The request could not be handled at all (no candidate loaded, no preview running, a bug). */
  | { type: 'failed'; id: number; message: string };

/** How the candidate answered one live decision. */
export type ShadowResult =
  | { error: string }
  /** `agreed` decisions unchanged (a grants decision holds one per request), and every changed one. */
  | { agreed: number; changes: ShadowChange[] };

export interface ShadowChange {
  direction: Exclude<DecisionChange, 'unchanged'>;
  capability: string;
  host_id: string;
  rule: string;
}

const port = parentPort;
if (port === null) throw new Error('candidate-worker.ts runs only as a worker thread');

/**
 * The nice value a candidate's thread runs at: the lowest priority. A preview or a shadow is work
 * beside the requests, never before them, so on a busy machine the scheduler gives the event loop,
 * Redis and everything else the CPU first, and the candidate what is left: a preview then takes
 * longer and a shadow drops observations (counted), rather than execute waiting for either.
 */
const CANDIDATE_NICE = 19;

/**
 * Lowers this thread's priority, not the process's: on Linux the nice value belongs to a thread, and
 * setpriority given a thread id changes that thread only. Node has no call for the thread id, but
 * /proc/thread-self names it. Elsewhere, or if it fails, the thread keeps the process's priority.
 */
function lowerThisThreadsPriority(): void {
  try {
    const threadId = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(threadId) && threadId > 0 && threadId !== process.pid) setPriority(threadId, CANDIDATE_NICE);
  } catch {
    // Not Linux, or not permitted: the candidate shares the CPU as the process does.
  }
}
lowerThisThreadsPriority();
const post = (message: FromWorker) => port.postMessage(message);

let candidate: WasmPolicyEngine | null = null;
let preview: DecisionPreview | null = null;

/** Collects one live decision's comparison; reset and reused for every decision of a batch. */
class ResultSink implements ComparisonSink {
  agreed = 0;
  changes: ShadowChange[] = [];
  error: string | null = null;

  compared(change: DecisionChange, capability: string, hostId: string, rule: string): void {
    if (change === 'unchanged') this.agreed++;
    else this.changes.push({ direction: change, capability, host_id: hostId, rule });
  }

  failed(_input: Record<string, unknown>, error: string): void {
    this.error = error;
  }

  take(): ShadowResult {
    const result: ShadowResult = this.error === null ? { agreed: this.agreed, changes: this.changes } : { error: this.error };
    this.agreed = 0;
    this.changes = [];
    this.error = null;
    return result;
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A store's text of a record (it has `json` and no `entrypoint`), parsed here rather than on the event loop. */
const isStoredText = (v: unknown): v is StoredRecordText => isRecord(v) && typeof v.json === 'string' && typeof v.id === 'string' && v.entrypoint === undefined;

async function handle(message: ToWorker): Promise<FromWorker> {
  const id = message.id;
  switch (message.type) {
    case 'load': {
      let loaded: WasmPolicyEngine;
      try {
        loaded = await loadCandidateEngine(message.artefact, message.memoryMaxPages);
      } catch (error) {
        return { type: 'load_failed', id, message: error instanceof Error ? error.message : describeThrown(error) };
      }
      candidate = loaded;
      preview = message.preview === undefined ? null : new DecisionPreview(loaded, message.preview);
      return { type: 'loaded', id, sha256: loaded.info().sha256 };
    }
    case 'page': {
      if (preview === null) return { type: 'failed', id, message: 'no preview is running' };
      // Bounded by the page, which the main thread cut to at most 1000 records.
      for (const record of message.records) preview.add(isStoredText(record) ? recordFromText(record) : record);
      return { type: 'page_done', id };
    }
    case 'report': {
      if (preview === null) return { type: 'failed', id, message: 'no preview is running' };
      const report = preview.report();
      // The preview is over: its candidate's memory (up to memoryMaxPages) is not kept for nothing.
      preview = null;
      candidate = null;
      return { type: 'report', id, report };
    }
    case 'shadow': {
      if (candidate === null) return { type: 'failed', id, message: 'no candidate is loaded' };
      return { type: 'shadow_results', id, results: runShadow(candidate, message.observations) };
    }
    default:
      return { type: 'failed', id, message: 'unknown request' };
  }
}

function runShadow(engine: WasmPolicyEngine, observations: readonly LiveDecision[]): ShadowResult[] {
  const sink = new ResultSink();
  // Bounded by the batch, which the main thread cut to a fixed size.
  return observations.map((observation): ShadowResult => {
    if (!isRecord(observation) || !isRecord(observation.input)) return { error: 'the observation holds no input object' };
    try {
      compareWithCandidate(observation, engine, sink);
    } catch (error) {
      // compareWithCandidate catches what the candidate throws; this is an observation it could not
      // read at all (operator answers of the wrong shape, say). It is one error, not the batch's end.
      sink.failed(observation.input, `the observation could not be compared: ${describeThrown(error)}`);
    }
    return sink.take();
  });
}

// One request at a time, in order: a load is asynchronous (the wasm compiles), and a request that
// came after it must see the candidate it loaded.
let queue: Promise<void> = Promise.resolve();
port.on('message', (message: ToWorker) => {
  queue = queue.then(async () => {
    let answer: FromWorker;
    try {
      answer = await handle(message);
    } catch (error) {
      answer = { type: 'failed', id: isRecord(message) && typeof message.id === 'number' ? message.id : -1, message: describeThrown(error) };
    }
    post(answer);
  });
});
