// One worker for candidate policies (candidate-worker.ts), seen from the main thread: a worker
// thread, or a child process of its own. It starts the worker when a request needs it, waits for each
// answer at most the time it is given, and stops the worker when that time runs out, which is the
// only way to stop a candidate's wasm. A worker that crashed, ran out of memory or was stopped is
// replaced by the next request. It serves one request at a time, so nothing can pile up in the
// worker's own message queue.
//
// Why a process at all: a thread shares the process with the event loop, and with it V8's
// garbage-collector helper threads (which run at the process's priority whatever the thread's is) and
// the memory allocator. A preview is seconds of parsing and evaluation that allocates all the while;
// as a thread at the lowest priority it slowed execute's requests while it ran two to seven times more
// than the same work did in a process of its own (bench/RESULTS.md, "A preview in a process of its
// own"). A shadow stays a thread: it evaluates live decisions in small batches as they come, and a
// process would add a copy between processes to each.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describeThrown, NamedError } from '../common/thrown.ts';
import type { FromWorker, ToWorker } from './candidate-worker.ts';

/** The worker's entries sit beside this module (.ts from the sources, .js in the Node 20 build): a thread's, and a process's. */
const EXTENSION = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
const WORKER_URL = new URL(`./candidate-worker${EXTENSION}`, import.meta.url);
const PROCESS_URL = new URL(`./candidate-process${EXTENSION}`, import.meta.url);

/**
 * The thread's JavaScript heap. A candidate's wasm memory lies outside it (memoryMaxPages caps that);
 * inside are one page of records (1000 records of a few KB, each part at most 64 KiB) and a preview's
 * groups, so 256 MB leaves room to spare, and a thread that needs more dies and is replaced instead
 * of swelling the process.
 */
const RESOURCE_LIMITS = { maxOldGenerationSizeMb: 256, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 } as const;

/**
 * The same heap limits for a worker process, as V8 flags. Nothing of this process's own command line
 * is passed on (a preloaded module, an inspector port), only these; nor its NODE_OPTIONS
 * (workerEnvironment).
 */
const PROCESS_EXEC_ARGV = [`--max-old-space-size=${RESOURCE_LIMITS.maxOldGenerationSizeMb}`, `--max-semi-space-size=${RESOURCE_LIMITS.maxYoungGenerationSizeMb / 2}`];

/** Where a candidate runs: a worker thread of this process, or a child process of its own. */
export type CandidateIsolation = 'thread' | 'process';

/** What the runner needs of a worker, thread or process alike. */
interface WorkerHandle {
  send(message: ToWorker): void;
  stop(): Promise<void>;
}

/** A request did not get its answer in time; the thread was stopped. */
export class CandidateTimeoutError extends NamedError {}

/** The thread stopped before it answered: it crashed, ran out of memory, or was terminated. */
export class CandidateWorkerError extends NamedError {}

type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;
export type CandidateRequest = WithoutId<ToWorker>;

interface Pending {
  id: number;
  worker: WorkerHandle;
  timer: NodeJS.Timeout;
  resolve(answer: FromWorker): void;
  reject(error: Error): void;
}

export class CandidateRunner {
  readonly #isolation: CandidateIsolation;
  #worker: WorkerHandle | null = null;
  #pending: Pending | null = null;
  #nextId = 1;

  constructor(isolation: CandidateIsolation) {
    this.#isolation = isolation;
  }

  /**
   * Sends one request and resolves with its answer. Rejects with CandidateTimeoutError (and stops the
   * thread) when no answer comes within `timeoutMs`, with CandidateWorkerError when the thread stops
   * first, and with an Error when the request cannot be sent (a value that cannot be cloned).
   */
  request(body: CandidateRequest, timeoutMs: number, timeoutMessage: string): Promise<FromWorker> {
    if (this.#pending !== null) return Promise.reject(new Error('a candidate worker serves one request at a time'));
    let worker: WorkerHandle;
    try {
      worker = this.#worker ?? (this.#isolation === 'thread' ? this.#spawnThread() : this.#spawnProcess());
    } catch (error) {
      return Promise.reject(new CandidateWorkerError(`the candidate worker could not start: ${describeThrown(error)}`, { cause: error }));
    }
    const id = this.#nextId++;
    return new Promise<FromWorker>((resolve, reject) => {
      const timer = setTimeout(() => this.#timedOut(id, worker, timeoutMessage), Math.max(0, timeoutMs));
      this.#pending = { id, worker, timer, resolve, reject };
      try {
        worker.send({ ...body, id } as ToWorker);
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
    await worker.stop();
  }

  #spawnThread(): WorkerHandle {
    const thread = new Worker(WORKER_URL, { resourceLimits: RESOURCE_LIMITS });
    const worker: WorkerHandle = {
      send: (message) => thread.postMessage(message),
      stop: async () => {
        await thread.terminate();
      },
    };
    // Neither an idle thread nor a stuck one keeps the process alive.
    thread.unref();
    thread.on('message', (message: unknown) => this.#answered(worker, message));
    thread.on('error', (error) => this.#died(worker, `the candidate worker crashed: ${describeThrown(error)}`));
    thread.on('exit', (code) => this.#died(worker, `the candidate worker exited with code ${code}`));
    this.#worker = worker;
    return worker;
  }

  #spawnProcess(): WorkerHandle {
    // `advanced` serialization carries what a thread's messages carry (an artefact's bytes, say).
    const child: ChildProcess = fork(fileURLToPath(PROCESS_URL), [], { execArgv: PROCESS_EXEC_ARGV, env: workerEnvironment(), serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const worker: WorkerHandle = {
      send: (message) => {
        // A message the channel cannot take (a closed one) fails here and the request with it.
        if (!child.connected) throw new Error('the candidate worker process is not connected');
        child.send(message);
      },
      stop: () => stopProcess(child),
    };
    // Neither an idle process nor a stuck one keeps this process alive; it exits when this one does,
    // as its channel closes.
    child.unref();
    child.channel?.unref();
    child.on('message', (message: unknown) => this.#answered(worker, message));
    child.on('error', (error) => this.#died(worker, `the candidate worker process failed: ${describeThrown(error)}`));
    child.on('exit', (code, signal) => this.#died(worker, `the candidate worker process exited with ${signal ?? `code ${code}`}`));
    this.#worker = worker;
    return worker;
  }

  #answered(worker: WorkerHandle, message: unknown): void {
    const id = typeof message === 'object' && message !== null ? (message as { id?: unknown }).id : undefined;
    if (typeof id === 'number') this.#settle(id, worker)?.resolve(message as FromWorker);
  }

  /** The pending request if it is request `id` on `worker`, taken off with its timer cleared; else null (a late answer). */
  #settle(id: number, worker: WorkerHandle): Pending | null {
    const pending = this.#pending;
    if (pending === null || pending.id !== id || pending.worker !== worker) return null;
    clearTimeout(pending.timer);
    this.#pending = null;
    return pending;
  }

  #timedOut(id: number, worker: WorkerHandle, message: string): void {
    const pending = this.#settle(id, worker);
    if (pending === null) return;
    // Detached first, so the next request starts a fresh worker and a late answer is ignored.
    if (this.#worker === worker) this.#worker = null;
    void worker.stop();
    pending.reject(new CandidateTimeoutError(message));
  }

  #died(worker: WorkerHandle, message: string): void {
    if (this.#worker === worker) this.#worker = null;
    this.#settle(this.#pending?.id ?? -1, worker)?.reject(new CandidateWorkerError(message));
  }
}

/**
 * Stops a worker process: SIGKILL, since a candidate's wasm does not return to the event loop to
 * hear anything gentler. Resolves once it has exited (at once if it had).
 */
function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    // Referenced again while it is being stopped, so that the wait for its exit keeps this process's
    // event loop alive (a shutdown that awaits it would otherwise end before it settles).
    child.ref();
    if (!child.kill('SIGKILL')) resolve();
  });
}

/**
 * The environment a worker process gets: what Node and TLS need, and nothing else, so that the
 * server's secrets (the admin token, the Redis password in REDIS_URL) and its NODE_OPTIONS (a
 * preloaded module, an inspector) stay in the server. What the worker needs of the configuration
 * comes over the IPC channel.
 */
const PASSED_ENVIRONMENT = ['PATH', 'TZ', 'NODE_COMPILE_CACHE', 'NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'SSL_CERT_DIR'] as const;

function workerEnvironment(): NodeJS.ProcessEnv {
  const environment: NodeJS.ProcessEnv = {};
  for (const name of PASSED_ENVIRONMENT) {
    const value = process.env[name];
    if (value !== undefined) environment[name] = value;
  }
  return environment;
}
