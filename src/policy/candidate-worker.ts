// The candidate worker: a thread or a process that loads one candidate policy artefact and runs it
// for the main thread (candidates.ts), either over pages of recorded decisions (a preview) or over
// batches of live decisions (a shadow). It exists so that a candidate's wasm never runs on the event
// loop: a candidate that takes long, or never finishes, is stopped by terminating this thread or
// process, which no code can do to synchronous wasm running on the event loop itself.
//
// It answers every request with exactly one message carrying the request's id, and handles requests
// one at a time in the order they came, so an answer always describes the candidate its request saw.
import { parentPort, Worker } from 'node:worker_threads';
import { describeThrown } from '../common/thrown.ts';
import { lowerThisThreadsPriority } from './candidate-priority.ts';
import { loadCandidateEngine, type WasmPolicyEngine } from './engine.ts';
import { compareWithCandidate, DecisionPreview, type ComparisonSink, type DecisionChange, type LiveDecision, type PreviewReport } from './preview.ts';
import { recordFromText, type DecisionRecord, type StoredRecordText } from './decision-records.ts';
import type { DecisionStreamReader } from '../store/redis/decision-records.ts';
import type { DecisionStreamAddress } from '../store/store.ts';

export type ToWorker =
  /** Loads a candidate, replacing the loaded one only when it loads. With `preview`, a new preview tally starts. */
  | { type: 'load'; id: number; artefact: Uint8Array; memoryMaxPages?: number; preview?: { examplesPerGroup?: number; maxGroups?: number } }
  /** Adds records to the preview tally. */
  | { type: 'page'; id: number; records: ReadonlyArray<DecisionRecord | StoredRecordText> }
  /** Reads the newest `limit` records from the stream itself, on a connection of its own, and adds them to the preview tally. */
  | { type: 'read'; id: number; stream: DecisionStreamAddress; limit: number }
  /** Ends the preview: answers its report and unloads the candidate. */
  | { type: 'report'; id: number }
  /** Runs the candidate on live decisions, one result per decision in the same order. */
  | { type: 'shadow'; id: number; observations: readonly LiveDecision[] };

export type FromWorker =
  | { type: 'loaded'; id: number; sha256: string }
  | { type: 'load_failed'; id: number; message: string }
  | { type: 'page_done'; id: number }
  | { type: 'read_done'; id: number }
  /** The stream could not be read because the store cannot be reached; the preview is over. */
  | { type: 'read_failed'; id: number; message: string }
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

/** How often a worker process checks that the process that started it is still there. */
const PARENT_CHECK_MS = 500;

/** The watchdog's entry sits beside this module (.ts from the sources, .js in the Node 20 build). */
const WATCHDOG_URL = new URL(`./candidate-watchdog${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/**
 * Ends this process when the process that started it is gone, so that a preview never outlives the
 * server it was for. The channel closing says so, but only to an event loop that turns, and a
 * candidate spinning in wasm never lets this one turn; so a thread of its own also watches.
 */
function exitWithParent(): void {
  process.on('disconnect', () => process.exit(0));
  const watchdog = new Worker(WATCHDOG_URL, { workerData: { parentPid: process.ppid, intervalMs: PARENT_CHECK_MS } });
  // The channel keeps this process alive while its parent is there; the watchdog never does.
  watchdog.unref();
}

/** Where requests come from and answers go: the parent thread's port, or the parent process's IPC channel. */
interface Channel {
  onMessage(listener: (message: ToWorker) => void): void;
  post(message: FromWorker): void;
}

function openChannel(): Channel {
  const port = parentPort;
  if (port !== null) {
    lowerThisThreadsPriority();
    return { onMessage: (listener) => port.on('message', listener), post: (message) => port.postMessage(message) };
  }
  const send = process.send?.bind(process);
  if (send === undefined) throw new Error('candidate-worker.ts runs only as a worker thread or a forked process');
  // The process's priority was lowered by its entry (candidate-process.ts), before this module loaded.
  exitWithParent();
  return {
    onMessage: (listener) => process.on('message', (message) => listener(message as ToWorker)),
    post: (message) => {
      send(message);
    },
  };
}

const channel = openChannel();
const post = (message: FromWorker) => channel.post(message);

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
      addRecords(preview, message.records);
      return { type: 'page_done', id };
    }
    case 'read': {
      if (preview === null) return { type: 'failed', id, message: 'no preview is running' };
      return await readStream(preview, message.stream, message.limit, id);
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

/** Bounded by the page: a store reads at most 1000 records at a time, and the main thread cuts what it sends to as many. */
function addRecords(preview: DecisionPreview, records: ReadonlyArray<DecisionRecord | StoredRecordText>): void {
  for (const record of records) preview.add(isStoredText(record) ? recordFromText(record) : record);
}

/**
 * Records per read of the stream. Redis serves a read whole before the next command of any client,
 * 0.46 ms for 1000 records (about 0.8 MB), with the commands of the requests being served queued
 * behind it; 250 a read holds them a quarter as long, and a preview took no longer in all
 * (bench/RESULTS.md, "A preview in a process of its own").
 */
const STREAM_PAGE = 250;

/**
 * Reads the stream page by page and previews each page before the next is read. The reader is
 * loaded only here, so a shadow's thread never loads the Redis client. Bounded by `limit` (the walk)
 * and by the caller's deadline, which stops this process.
 */
async function readStream(preview: DecisionPreview, stream: DecisionStreamAddress, limit: number, id: number): Promise<FromWorker> {
  const [{ openDecisionStreamReader }, { decisionPages }, { isRedisUnavailable }] = await Promise.all([
    import('../store/redis/decision-records.ts'),
    import('../store/decision-pages.ts'),
    import('../store/redis/connection.ts'),
  ]);
  let reader: DecisionStreamReader;
  try {
    reader = await openDecisionStreamReader(stream);
  } catch (error) {
    // Connecting failed (it says where and why): the store cannot be reached from here.
    return { type: 'read_failed', id, message: describeThrown(error) };
  }
  try {
    for await (const page of decisionPages(reader, limit, STREAM_PAGE)) addRecords(preview, page);
    return { type: 'read_done', id };
  } catch (error) {
    // An outage is the store's; anything else (an error reply, a bug) is not dressed up as one, as
    // the store's own calls are not (store/guard.ts).
    const message = describeThrown(error);
    return isRedisUnavailable(error) ? { type: 'read_failed', id, message } : { type: 'failed', id, message: `reading the recorded decisions failed: ${message}` };
  } finally {
    await reader.close();
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
channel.onMessage((message) => {
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
