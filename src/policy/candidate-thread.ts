// One worker thread for candidate policies (candidate-worker.ts), seen from the main thread: it
// starts the thread when a request needs it, waits for each answer at most the time it is given,
// and stops the thread when that time runs out, which is the only way to stop a candidate's wasm.
// A thread that crashed, ran out of memory or was stopped is replaced by the next request. It serves
// one request at a time, so nothing can pile up in the thread's own message queue.
import { Worker } from 'node:worker_threads';
import { describeThrown, NamedError } from '../common/thrown.ts';
import type { FromWorker, ToWorker } from './candidate-worker.ts';

/** The worker entry sits beside this module (.ts from the sources, .js in the Node 20 build). */
const WORKER_URL = new URL(`./candidate-worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/**
 * The thread's JavaScript heap. A candidate's wasm memory lies outside it (memoryMaxPages caps that);
 * inside are one page of records (1000 records of a few KB, each part at most 64 KiB) and a preview's
 * groups, so 256 MB leaves room to spare, and a thread that needs more dies and is replaced instead
 * of swelling the process.
 */
const RESOURCE_LIMITS = { maxOldGenerationSizeMb: 256, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 } as const;

/** A request did not get its answer in time; the thread was stopped. */
export class CandidateTimeoutError extends NamedError {}

/** The thread stopped before it answered: it crashed, ran out of memory, or was terminated. */
export class CandidateWorkerError extends NamedError {}

type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;
export type CandidateRequest = WithoutId<ToWorker>;

interface Pending {
  id: number;
  worker: Worker;
  timer: NodeJS.Timeout;
  resolve(answer: FromWorker): void;
  reject(error: Error): void;
}

export class CandidateThread {
  #worker: Worker | null = null;
  #pending: Pending | null = null;
  #nextId = 1;

  /**
   * Sends one request and resolves with its answer. Rejects with CandidateTimeoutError (and stops the
   * thread) when no answer comes within `timeoutMs`, with CandidateWorkerError when the thread stops
   * first, and with an Error when the request cannot be sent (a value that cannot be cloned).
   */
  request(body: CandidateRequest, timeoutMs: number, timeoutMessage: string): Promise<FromWorker> {
    if (this.#pending !== null) return Promise.reject(new Error('a candidate thread serves one request at a time'));
    let worker: Worker;
    try {
      worker = this.#worker ?? this.#spawn();
    } catch (error) {
      return Promise.reject(new CandidateWorkerError(`the candidate worker could not start: ${describeThrown(error)}`, { cause: error }));
    }
    const id = this.#nextId++;
    return new Promise<FromWorker>((resolve, reject) => {
      const timer = setTimeout(() => this.#timedOut(id, worker, timeoutMessage), Math.max(0, timeoutMs));
      this.#pending = { id, worker, timer, resolve, reject };
      try {
        worker.postMessage({ ...body, id } as ToWorker);
      } catch (error) {
        // Nothing reached the thread, which goes on serving.
        this.#settle(id, worker)?.reject(new Error(`the request could not be sent to the candidate worker: ${describeThrown(error)}`, { cause: error }));
      }
    });
  }

  /** Stops the thread now; a request it was answering rejects with CandidateWorkerError. */
  async terminate(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    if (worker === null) return;
    this.#settle(this.#pending?.id ?? -1, worker)?.reject(new CandidateWorkerError('the candidate worker was stopped'));
    await worker.terminate();
  }

  #spawn(): Worker {
    const worker = new Worker(WORKER_URL, { resourceLimits: RESOURCE_LIMITS });
    // Neither an idle thread nor a stuck one keeps the process alive.
    worker.unref();
    worker.on('message', (message: FromWorker) => {
      const id = typeof message === 'object' && message !== null ? message.id : undefined;
      if (typeof id === 'number') this.#settle(id, worker)?.resolve(message);
    });
    worker.on('error', (error) => this.#died(worker, `the candidate worker crashed: ${describeThrown(error)}`));
    worker.on('exit', (code) => this.#died(worker, `the candidate worker exited with code ${code}`));
    this.#worker = worker;
    return worker;
  }

  /** The pending request if it is request `id` on `worker`, taken off with its timer cleared; else null (a late answer). */
  #settle(id: number, worker: Worker): Pending | null {
    const pending = this.#pending;
    if (pending === null || pending.id !== id || pending.worker !== worker) return null;
    clearTimeout(pending.timer);
    this.#pending = null;
    return pending;
  }

  #timedOut(id: number, worker: Worker, message: string): void {
    const pending = this.#settle(id, worker);
    if (pending === null) return;
    // Detached first, so the next request starts a fresh thread and a late answer is ignored.
    if (this.#worker === worker) this.#worker = null;
    void worker.terminate();
    pending.reject(new CandidateTimeoutError(message));
  }

  #died(worker: Worker, message: string): void {
    if (this.#worker === worker) this.#worker = null;
    this.#settle(this.#pending?.id ?? -1, worker)?.reject(new CandidateWorkerError(message));
  }
}
