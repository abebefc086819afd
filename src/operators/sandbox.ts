// Plugin operators run in worker threads with a time budget they cannot exceed (DESIGN §6, issue
// 12). A plugin's `evaluate` is synchronous JavaScript: on the event loop, one slow call (a
// backtracking pattern, a loop over a long argument) would stop every other request, and nothing
// can interrupt it there. In a worker it can be stopped: when a decision's calls run past
// PLUGIN_BUDGET_MS, the worker is terminated and replaced, and the calls it did not answer count as
// violations. The event loop never waits on a plugin, it only awaits a message.
//
// Cost: one message round trip per execute whose grants use a plugin operator, about 64 µs of CPU
// across both threads at 32 calls in flight (`npm run bench:parts`, bench/RESULTS.md); executes
// that use only built-in operators never come here.
import { Worker } from 'node:worker_threads';
import { LogThrottle, type Logger } from '../logger.ts';
import { noMetrics, type Metrics } from '../metrics/metrics.ts';
import { isPluginFailure, type OperatorOutcome } from './outcome.ts';
import type { PluginCall } from './plugin-calls.ts';
import type { FromWorker, ToWorker, WorkerModule } from './sandbox-worker.ts';

export interface SandboxOptions {
  /** How long one decision's plugin calls may take together, from the moment a worker starts them. */
  budgetMs: number;
  workers: number;
  /** Decisions that may wait for a worker; beyond it evaluate() rejects with SandboxUnavailableError. */
  queueMax: number;
  /** How long a decision may wait for a worker before it is refused; default 20 budgets, at least 1 s. */
  queueWaitMaxMs?: number;
  logger: Logger;
  /** Counts every plugin failure by operator and kind (the log line for them is throttled). */
  metrics?: Metrics;
}

/** No worker could take the calls in time (queue full, or workers restarting): a 503, not a violation. */
export class SandboxUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxUnavailableError';
  }
}

interface Batch {
  calls: PluginCall[];
  resolve(outcomes: OperatorOutcome[]): void;
  reject(error: Error): void;
  /** Refuses the batch if no worker has taken it in time. */
  waitTimer?: NodeJS.Timeout;
}

interface Slot {
  worker: Worker | null;
  ready: boolean;
  /** The batch this worker runs now, with the id it was sent under and its budget timer. */
  running: { id: number; batch: Batch; budgetTimer: NodeJS.Timeout } | null;
  /** Consecutive deaths without a completed batch: drives the restart back-off. */
  deaths: number;
  retired: boolean;
}

const MAX_RESTART_DELAY_MS = 5_000;
/** One log line per operator and failure kind per this window, with a count of the ones it stood for. */
const FAILURE_LOG_WINDOW_MS = 10_000;
/** The worker entry sits beside this module (.ts from the sources, .js in the Node 20 build). */
const WORKER_URL = new URL(`./sandbox-worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

export class PluginSandbox {
  readonly #options: Required<SandboxOptions>;
  #modules: readonly WorkerModule[] = [];
  #slots: Slot[] = [];
  readonly #queue: Batch[] = [];
  #nextId = 1;
  #closed = false;
  readonly #failureLog = new LogThrottle(FAILURE_LOG_WINDOW_MS);

  constructor(options: SandboxOptions) {
    this.#options = { queueWaitMaxMs: Math.max(1000, 20 * options.budgetMs), ...options, metrics: options.metrics ?? noMetrics };
  }

  /**
   * Starts workers for this plugin set and waits until they have imported it; throws, changing
   * nothing, when they cannot. The previous workers finish the batch they run, then stop.
   */
  async setModules(modules: readonly WorkerModule[]): Promise<void> {
    const fresh = modules.length === 0 ? [] : Array.from({ length: this.#options.workers }, () => this.#newSlot());
    try {
      await Promise.all(fresh.map((slot) => this.#start(slot, modules)));
    } catch (error) {
      for (const slot of fresh) this.#retire(slot);
      throw error;
    }
    const previous = this.#slots;
    this.#modules = modules;
    this.#slots = fresh;
    for (const slot of previous) this.#retire(slot);
    this.#dispatch();
  }

  /**
   * The outcome of each call, in order. Calls that ran past the budget come back as `timeout`.
   * Rejects (SandboxUnavailableError) only when no worker could take the calls in time.
   */
  evaluate(calls: PluginCall[]): Promise<OperatorOutcome[]> {
    if (calls.length === 0) return Promise.resolve([]);
    if (this.#closed) return Promise.reject(new SandboxUnavailableError('the plugin sandbox is closed'));
    if (this.#slots.length === 0) return Promise.resolve(calls.map((): OperatorOutcome => ({ kind: 'refused' })));
    if (this.#queue.length >= this.#options.queueMax) {
      return Promise.reject(new SandboxUnavailableError(`more than ${this.#options.queueMax} decisions wait for plugin operators`));
    }
    return new Promise<OperatorOutcome[]>((resolve, reject) => {
      const batch: Batch = { calls, resolve, reject };
      batch.waitTimer = setTimeout(() => {
        const index = this.#queue.indexOf(batch);
        if (index === -1) return;
        this.#queue.splice(index, 1);
        reject(new SandboxUnavailableError(`no plugin worker was free within ${this.#options.queueWaitMaxMs} ms`));
      }, this.#options.queueWaitMaxMs);
      this.#queue.push(batch);
      this.#dispatch();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const batch of this.#queue.splice(0)) {
      clearTimeout(batch.waitTimer);
      batch.reject(new SandboxUnavailableError('the plugin sandbox is closed'));
    }
    const slots = this.#slots;
    this.#slots = [];
    await Promise.all(slots.map((slot) => this.#retire(slot, true)));
  }

  #newSlot(): Slot {
    return { worker: null, ready: false, running: null, deaths: 0, retired: false };
  }

  /** Spawns the slot's worker and resolves once it has loaded `modules` (rejects if it cannot). */
  #start(slot: Slot, modules: readonly WorkerModule[]): Promise<void> {
    const worker = new Worker(WORKER_URL, { workerData: { modules } });
    worker.unref();
    slot.worker = worker;
    slot.ready = false;
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      worker.on('message', (message: FromWorker) => {
        if (message.type === 'ready') {
          slot.ready = true;
          settled = true;
          resolve();
          this.#dispatch();
        } else if (message.type === 'load_failed') {
          settled = true;
          reject(new Error(`the plugin worker could not load the plugins: ${message.message}`));
          void worker.terminate();
        } else if (message.type === 'result') {
          this.#finish(slot, message.id, message.outcomes);
        } else if (message.type === 'stray_rejection') {
          this.#options.logger.error('a plugin left a promise rejection unhandled in the plugin worker; it keeps serving', { error: message.message });
        }
      });
      // An exception a plugin threw outside evaluate (a timer, say) ends the worker: it is replaced.
      worker.on('error', (error) => {
        if (!settled) {
          settled = true;
          reject(error);
        }
        this.#died(slot, worker, `the plugin worker crashed: ${error.message}`);
      });
      worker.on('exit', (code) => {
        if (!settled) {
          settled = true;
          reject(new Error(`the plugin worker exited with code ${code} while loading`));
        }
        this.#died(slot, worker, `the plugin worker exited with code ${code}`);
      });
    });
  }

  /** Hands queued batches to idle, ready workers of the current set. */
  #dispatch(): void {
    for (const slot of this.#slots) {
      if (this.#queue.length === 0) return;
      if (!slot.ready || slot.running || !slot.worker) continue;
      const batch = this.#queue.shift()!;
      clearTimeout(batch.waitTimer);
      const id = this.#nextId++;
      const budgetTimer = setTimeout(() => this.#overBudget(slot, id), this.#options.budgetMs);
      slot.running = { id, batch, budgetTimer };
      const message: ToWorker = { type: 'batch', id, calls: batch.calls.map((c) => [c.name, c.operand, c.actual]) };
      try {
        slot.worker.postMessage(message);
      } catch (error) {
        // A value that cannot be cloned cannot come from JSON; treat it like a crash of this batch.
        this.#finish(slot, id, batch.calls.map(() => ({ kind: 'crashed', message: (error as Error).message })));
      }
    }
  }

  #finish(slot: Slot, id: number, outcomes: OperatorOutcome[]): void {
    const running = slot.running;
    if (!running || running.id !== id) return;
    clearTimeout(running.budgetTimer);
    slot.running = null;
    slot.deaths = 0;
    this.#report(running.batch.calls, outcomes);
    running.batch.resolve(outcomes);
    if (slot.retired) void this.#retire(slot);
    else this.#dispatch();
  }

  /** The batch ran past its budget: stop the worker (the only way to stop synchronous code). */
  #overBudget(slot: Slot, id: number): void {
    const running = slot.running;
    if (!running || running.id !== id) return;
    const budgetMs = this.#options.budgetMs;
    // Detach the stuck worker first, so finishing (which dispatches the next batch) cannot send it more.
    this.#replace(slot);
    this.#finish(slot, id, running.batch.calls.map((): OperatorOutcome => ({ kind: 'timeout', budgetMs })));
  }

  #died(slot: Slot, worker: Worker, message: string): void {
    if (slot.worker !== worker) return;
    slot.worker = null;
    slot.ready = false;
    const running = slot.running;
    if (running) this.#finish(slot, running.id, running.batch.calls.map((): OperatorOutcome => ({ kind: 'crashed', message })));
    slot.deaths++;
    if (!slot.retired && !this.#closed) {
      this.#options.logger.error('plugin worker stopped; starting another', { error: message, restarts: slot.deaths });
      this.#replace(slot);
    }
  }

  /** Terminates the slot's worker (if any) and starts a new one after a back-off that grows with deaths. */
  #replace(slot: Slot): void {
    const old = slot.worker;
    slot.worker = null;
    slot.ready = false;
    if (old) void old.terminate();
    if (slot.retired || this.#closed) return;
    const delayMs = slot.deaths <= 1 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** (slot.deaths - 2));
    const modules = this.#modules;
    setTimeout(() => {
      if (slot.retired || this.#closed || slot.worker) return;
      this.#start(slot, modules).catch((error: unknown) => {
        this.#options.logger.error('plugin worker could not start; will retry', { error: (error as Error).message });
      });
    }, delayMs).unref();
  }

  /** Stops the slot's worker once it is idle (at once when `now`). */
  async #retire(slot: Slot, now = false): Promise<void> {
    slot.retired = true;
    if (slot.running && !now) return;
    if (slot.running) {
      clearTimeout(slot.running.budgetTimer);
      slot.running.batch.reject(new SandboxUnavailableError('the plugin sandbox is closed'));
      slot.running = null;
    }
    const worker = slot.worker;
    slot.worker = null;
    slot.ready = false;
    if (worker) await worker.terminate();
  }

  /**
   * Counts every plugin failure and logs them, rate-limited per operator and kind (a failing plugin
   * fails on every call). Operator names are the registry's: only plugin operators come here.
   */
  #report(calls: readonly PluginCall[], outcomes: readonly OperatorOutcome[]): void {
    outcomes.forEach((outcome, i) => {
      if (!isPluginFailure(outcome)) return;
      const operator = calls[i]?.name ?? 'unknown';
      this.#options.metrics.pluginFailure(operator, outcome.kind);
      const suppressed = this.#failureLog.admit(`${operator}:${outcome.kind}`);
      if (suppressed === null) return;
      this.#options.logger.warn('plugin operator failed; the argument counts as a violation', {
        operator, outcome, ...(suppressed > 0 ? { similarFailuresNotLogged: suppressed } : {}),
      });
    });
  }
}
