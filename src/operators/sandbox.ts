// Plugin operators run in worker threads with a time budget they cannot exceed (DESIGN §6). A
// plugin's `evaluate` is synchronous JavaScript: on the event loop, one slow call (a backtracking
// pattern, a loop over a long argument) would stop every other request, and nothing can interrupt
// it there. In a worker it can be stopped: when a decision's calls run past PLUGIN_BUDGET_MS, the
// worker is terminated and replaced, and the calls it did not answer count as violations. The event
// loop never waits on a plugin, it only awaits a message.
//
// One agent must not degrade the others through the pool (SECURITY.md, "Plugins cannot stop the
// server"), so an overrun costs the agent that caused it:
// - each grant whose calls overran is tripped (trips.ts): for PLUGIN_TRIP_SECONDS its plugin calls are
//   violations without reaching a worker, so an agent repeating an overrunning call at its full rate
//   limit costs one worker per trip, not one per request. Only a batch whose worker was computing
//   is blamed: a cheap call that overran because the machine starved its worker trips nothing and
//   runs once more on another worker;
// - an agent has at most one batch running at a time, and waiting batches are dispatched round-robin
//   across agents, so one busy agent can neither hold every worker nor the head of the queue, and it
//   may hold at most half the queue;
// - a warm standby worker takes a terminated worker's place at once, and its own replacement starts
//   in the background, so a kill never leaves the pool a worker short while a thread starts.
//
// Cost: one message round trip per execute whose grants use a plugin operator, 20-65 µs of CPU
// across the threads at 32 calls in flight depending on the machine (`npm run bench:parts`,
// bench/RESULTS.md); executes that use only built-in operators never come here. A batch still
// running an eighth into its budget also pays one CPU reading of its worker. The pool holds
// PLUGIN_WORKERS + 1 threads.
import { Worker } from 'node:worker_threads';
import { LogThrottle, type Logger } from '../logger.ts';
import { noMetrics, type Metrics } from '../metrics/metrics.ts';
import { isPluginFailure, type OperatorOutcome } from './outcome.ts';
import type { PluginCall } from './plugin-calls.ts';
import type { FromWorker, ToWorker, WorkerModule } from './sandbox-worker.ts';
import { TripTable } from './trips.ts';
import { NamedError } from '../common/thrown.ts';

export interface SandboxOptions {
  /** How long one decision's plugin calls may take together, from the moment a worker starts them. */
  budgetMs: number;
  /** Workers serving at once (a warm standby comes on top). */
  workers: number;
  /** Decisions that may wait for a worker; beyond it evaluate() rejects with SandboxUnavailableError. */
  queueMax: number;
  /** Decisions one agent may have waiting; default half of queueMax (at least 1), so no agent fills the queue. */
  agentQueueMax?: number;
  /** How long a decision may wait for a worker before it is refused; default 20 budgets, at least 1 s. */
  queueWaitMaxMs?: number;
  /** How long a grant whose plugin calls overran the budget has them refused without running (PLUGIN_TRIP_SECONDS). */
  tripMs: number;
  /** How many tripped grants are remembered (default trips.ts MAX_TRIPPED_GRANTS). */
  maxTrippedGrants?: number;
  /** The clock trips are measured on (Date.now by default; tests move it instead of waiting). */
  nowMs?: () => number;
  logger: Logger;
  /** Counts every plugin failure by operator and kind (the log line for them is throttled). */
  metrics?: Metrics;
}

/** No worker could take the calls in time (queue full, or workers restarting): a 503, not a violation. */
export class SandboxUnavailableError extends NamedError {}

interface Batch {
  /** The calling agent: the unit of fairness (one running batch each, round-robin between them). */
  agentId: string;
  calls: readonly PluginCall[];
  resolve(outcomes: OperatorOutcome[]): void;
  reject(error: Error): void;
  /** Refuses the batch if no worker has taken it in time. */
  waitTimer?: NodeJS.Timeout;
  /** Set once the batch overran on a worker that was not computing and was queued again. */
  retried?: boolean;
}

interface Running {
  /** The id the calls were sent under (a late answer to an earlier id is ignored). */
  id: number;
  batch: Batch;
  /** The indexes of the batch's calls sent to the worker; the others were tripped. */
  sent: number[];
  /** An eighth into the budget it takes a CPU sample, then it becomes the end of the budget. */
  budgetTimer: NodeJS.Timeout;
  /**
   * The worker's CPU time an eighth into the budget, read only for a batch still running then (a
   * reading costs about as much as the rest of a quick batch): an overrun trips only a worker that computed.
   */
  cpuEarly?: Promise<CpuSample | null>;
}

/** A worker thread's CPU time (user and system) and when it was read, in milliseconds. */
interface CpuSample {
  cpuMs: number;
  atMs: number;
}

interface Slot {
  worker: Worker | null;
  ready: boolean;
  running: Running | null;
  retired: boolean;
}

const MAX_RESTART_DELAY_MS = 5_000;
/** One log line per operator and failure kind per this window, with a count of the ones it stood for. */
const FAILURE_LOG_WINDOW_MS = 10_000;
/** The worker entry sits beside this module (.ts from the sources, .js in the Node 20 build). */
const WORKER_URL = new URL(`./sandbox-worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);
/** At most this many grant ids in one log line about a trip. */
const LOGGED_GRANTS = 10;
/** The first CPU sample of a batch is taken this far into its budget. */
const EARLY_SAMPLE_SHARE = 1 / 8;
/**
 * An overrunning batch trips its grants only if its worker spent at least this share of the budget
 * on the CPU between the early sample and the end. A call that computes (a loop, an expensive
 * pattern) accumulates CPU time even on a loaded machine (a worker spinning at a fifth of a core
 * still clears this bound); a cheap call that overran because its worker was starved, or because its
 * answer waited behind a busy main thread, accumulates almost none, and its agent is not to blame.
 * In the sandbox tests an overrunning spin ran at a fifth of a core or more even while a new worker
 * started beside it; a call blocked without computing used none.
 */
const COMPUTING_CPU_SHARE_OF_BUDGET = 0.1;
/** How long a CPU sample may take before it counts as unavailable (then the overrun trips: fail closed). */
const CPU_SAMPLE_TIMEOUT_MS = 1_000;
const TRIPPED: OperatorOutcome = { kind: 'tripped' };

export class PluginSandbox {
  readonly #budgetMs: number;
  readonly #workers: number;
  readonly #queueMax: number;
  readonly #agentQueueMax: number;
  readonly #queueWaitMaxMs: number;
  readonly #tripSeconds: number;
  readonly #logger: Logger;
  readonly #metrics: Metrics;
  readonly #trips: TripTable;
  readonly #nowMs: () => number;
  #modules: readonly WorkerModule[] = [];
  /** The workers that serve batches. */
  #slots: Slot[] = [];
  /** A started worker that serves nothing until a serving one is terminated or dies. */
  #spare: Slot | null = null;
  /** Waiting batches per agent; the Map's order is the round-robin order (a served agent moves to the end). */
  readonly #lanes = new Map<string, Batch[]>();
  #queued = 0;
  /** Agents with a batch on a worker now: they get no second one until it ends. */
  readonly #runningAgents = new Set<string>();
  /** Worker deaths (crashes, not budget kills) since the last batch a worker answered: the restart back-off. */
  #deathsInARow = 0;
  #nextId = 1;
  #closed = false;
  readonly #failureLog = new LogThrottle(FAILURE_LOG_WINDOW_MS);

  constructor(options: SandboxOptions) {
    this.#budgetMs = options.budgetMs;
    this.#workers = Math.max(1, options.workers);
    this.#queueMax = options.queueMax;
    this.#agentQueueMax = Math.max(1, options.agentQueueMax ?? Math.floor(options.queueMax / 2));
    this.#queueWaitMaxMs = options.queueWaitMaxMs ?? Math.max(1000, 20 * options.budgetMs);
    this.#tripSeconds = Math.round(options.tripMs / 1000);
    this.#logger = options.logger;
    this.#metrics = options.metrics ?? noMetrics;
    this.#nowMs = options.nowMs ?? Date.now;
    this.#trips = new TripTable({
      durationMs: options.tripMs,
      ...(options.maxTrippedGrants !== undefined ? { maxEntries: options.maxTrippedGrants } : {}),
      ...(options.nowMs ? { nowMs: options.nowMs } : {}),
    });
  }

  /**
   * Starts workers (and a standby) for this plugin set and waits until they have imported it;
   * throws, changing nothing, when they cannot. The previous workers finish the batch they run, then
   * stop. Trips outlive a reload: they are about the grants' operands, which a reload does not change.
   */
  async setModules(modules: readonly WorkerModule[]): Promise<void> {
    const fresh = modules.length === 0 ? [] : Array.from({ length: this.#workers + 1 }, () => newSlot());
    try {
      await Promise.all(fresh.map((slot) => this.#start(slot, modules)));
    } catch (error) {
      for (const slot of fresh) void this.#retire(slot);
      throw error;
    }
    const previous = [...this.#slots, ...(this.#spare ? [this.#spare] : [])];
    this.#modules = modules;
    this.#spare = fresh.pop() ?? null;
    this.#slots = fresh;
    for (const slot of previous) void this.#retire(slot);
    this.#dispatch();
  }

  /**
   * The outcome of each call, in order, for the agent `agentId`. Calls that ran past the budget come
   * back as `timeout`, calls whose grants are all tripped as `tripped`. Rejects
   * (SandboxUnavailableError) only when no worker could take the calls in time.
   */
  evaluate(calls: PluginCall[], agentId: string): Promise<OperatorOutcome[]> {
    if (calls.length === 0) return Promise.resolve([]);
    if (this.#closed) return Promise.reject(new SandboxUnavailableError('the plugin sandbox is closed'));
    if (this.#slots.length === 0) return Promise.resolve(calls.map((): OperatorOutcome => ({ kind: 'refused' })));
    // A batch of tripped calls only is answered at once: it neither waits nor counts against the queue.
    if (calls.every((call) => this.#isTripped(call))) return Promise.resolve(this.#settle(calls, [], []));
    if (this.#queued >= this.#queueMax) {
      return Promise.reject(new SandboxUnavailableError(`more than ${this.#queueMax} decisions wait for plugin operators`));
    }
    if ((this.#lanes.get(agentId)?.length ?? 0) >= this.#agentQueueMax) {
      return Promise.reject(new SandboxUnavailableError(`this agent has ${this.#agentQueueMax} decisions waiting for plugin operators`));
    }
    return new Promise<OperatorOutcome[]>((resolve, reject) => {
      const batch: Batch = { agentId, calls, resolve, reject };
      const lane = this.#lanes.get(agentId);
      if (lane) lane.push(batch);
      else this.#lanes.set(agentId, [batch]);
      this.#waitForWorker(batch);
      this.#dispatch();
    });
  }

  /** Counts a batch just put in its lane as waiting, and refuses it if no worker takes it in time. */
  #waitForWorker(batch: Batch): void {
    this.#queued++;
    batch.waitTimer = setTimeout(() => {
      const lane = this.#lanes.get(batch.agentId);
      const index = lane?.indexOf(batch) ?? -1;
      if (index === -1) return;
      lane!.splice(index, 1);
      if (lane!.length === 0) this.#lanes.delete(batch.agentId);
      this.#queued--;
      batch.reject(new SandboxUnavailableError(`no plugin worker was free within ${this.#queueWaitMaxMs} ms`));
    }, this.#queueWaitMaxMs);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const lane of this.#lanes.values()) {
      for (const batch of lane) {
        clearTimeout(batch.waitTimer);
        batch.reject(new SandboxUnavailableError('the plugin sandbox is closed'));
      }
    }
    this.#lanes.clear();
    this.#queued = 0;
    const slots = [...this.#slots, ...(this.#spare ? [this.#spare] : [])];
    this.#slots = [];
    this.#spare = null;
    await Promise.all(slots.map((slot) => this.#retire(slot, true)));
  }

  /** A call is skipped only while every grant that needs it is tripped; a call of no grant never is. */
  #isTripped(call: PluginCall): boolean {
    return call.grantIds.length > 0 && call.grantIds.every((grantId) => this.#trips.isTripped(grantId));
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
          this.#finish(slot, message.id, message.outcomes, true);
        } else if (message.type === 'stray_rejection') {
          this.#logger.error('a plugin left a promise rejection unhandled in the plugin worker; it keeps serving', { error: message.message });
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

  /** Hands waiting batches to idle, ready workers of the current set, round-robin across agents. */
  #dispatch(): void {
    for (const slot of this.#slots) {
      if (this.#queued === 0) return;
      if (!slot.ready || slot.running || !slot.worker) continue;
      const next = this.#nextBatch();
      if (!next) return;
      this.#send(slot, next.batch, next.sent);
    }
  }

  /**
   * The first waiting batch of the first agent (in round-robin order) with nothing running, and the
   * calls of it to send. A batch whose calls were all tripped while it waited is answered here and
   * the next one taken: each pass removes one batch, so the loop ends within the queue's length.
   */
  #nextBatch(): { batch: Batch; sent: number[] } | null {
    const passes = this.#queued;
    for (let pass = 0; pass < passes; pass++) {
      let agentId: string | undefined;
      for (const [candidate] of this.#lanes) {
        if (!this.#runningAgents.has(candidate)) {
          agentId = candidate;
          break;
        }
      }
      if (agentId === undefined) return null;
      const lane = this.#lanes.get(agentId)!;
      const batch = lane.shift()!;
      // To the end of the round: every other waiting agent is served before this one again.
      this.#lanes.delete(agentId);
      if (lane.length > 0) this.#lanes.set(agentId, lane);
      this.#queued--;
      clearTimeout(batch.waitTimer);
      const sent = batch.calls.flatMap((call, i) => (this.#isTripped(call) ? [] : [i]));
      if (sent.length > 0) return { batch, sent };
      batch.resolve(this.#settle(batch.calls, [], []));
    }
    return null;
  }

  #send(slot: Slot, batch: Batch, sent: number[]): void {
    const id = this.#nextId++;
    const earlyMs = this.#budgetMs * EARLY_SAMPLE_SHARE;
    const worker = slot.worker!;
    // Chained, not two timers: the end comes at least the rest of the budget after the early sample,
    // so the window the CPU is measured over cannot shrink however late the main thread runs them.
    const running: Running = {
      id, batch, sent,
      budgetTimer: setTimeout(() => {
        if (slot.running !== running) return;
        running.cpuEarly = sampleCpu(worker);
        running.budgetTimer = setTimeout(() => this.#overBudget(slot, id), this.#budgetMs - earlyMs);
      }, earlyMs),
    };
    slot.running = running;
    this.#runningAgents.add(batch.agentId);
    const message: ToWorker = { type: 'batch', id, calls: sent.map((i) => [batch.calls[i]!.name, batch.calls[i]!.operand, batch.calls[i]!.actual]) };
    try {
      worker.postMessage(message);
    } catch (error) {
      // A value that cannot be cloned cannot come from JSON; treat it like a crash of this batch.
      this.#finish(slot, id, sent.map((): OperatorOutcome => ({ kind: 'crashed', message: (error as Error).message })), false);
    }
  }

  /** The batch ended (answered, or its worker died): settle it and hand out more work. */
  #finish(slot: Slot, id: number, outcomes: readonly OperatorOutcome[], answered: boolean): void {
    const running = slot.running;
    if (!running || running.id !== id) return;
    clearTimeout(running.budgetTimer);
    slot.running = null;
    this.#runningAgents.delete(running.batch.agentId);
    if (answered) this.#deathsInARow = 0;
    running.batch.resolve(this.#settle(running.batch.calls, running.sent, outcomes));
    if (slot.retired) void this.#retire(slot);
    // Also after a retired slot's batch: its agent may have more waiting for the current workers.
    this.#dispatch();
  }

  /**
   * Every call's outcome: the sent calls' from the worker (a missing answer is a crash, never an
   * allow), the others tripped. Counts and logs the failures.
   */
  #settle(calls: readonly PluginCall[], sent: readonly number[], outcomes: readonly OperatorOutcome[]): OperatorOutcome[] {
    const all = calls.map((): OperatorOutcome => TRIPPED);
    sent.forEach((callIndex, j) => {
      all[callIndex] = outcomes[j] ?? { kind: 'crashed', message: 'the plugin worker sent no answer for this call' };
    });
    this.#report(calls, all);
    return all;
  }

  /**
   * The batch ran past its budget: stop the worker (the only way to stop synchronous code), then
   * judge the overrun (#judgeOverrun) before the batch is answered. Its agent stays counted as
   * running until then, so the agent's next batch meets the trip the judgement may set.
   */
  #overBudget(slot: Slot, id: number): void {
    const running = slot.running;
    if (!running || running.id !== id) return;
    const overranAtMs = this.#nowMs();
    // Read the worker's CPU time before it is terminated: afterwards it cannot be read.
    const cpuAtEnd = slot.worker ? sampleCpu(slot.worker) : Promise.resolve(null);
    // Detach the batch and the stuck worker, so a late answer is ignored and nothing more is sent to it.
    clearTimeout(running.budgetTimer);
    slot.running = null;
    this.#replaceWorker(slot);
    if (slot.retired) void this.#retire(slot);
    void this.#judgeOverrun(running, overranAtMs, running.cpuEarly ?? Promise.resolve(null), cpuAtEnd);
  }

  /**
   * Decides who pays for an overrun, from the worker's CPU time between the early sample and the end
   * (a few microseconds after it; at most CPU_SAMPLE_TIMEOUT_MS):
   * - the worker was computing, or that cannot be told (no CPU reading on this Node version, or it
   *   failed: fail closed): the calls are violations (`timeout`) and their grants are tripped;
   * - it was not (starved by an overloaded machine, or blocked): the batch is not to blame, so it is
   *   queued again, first in the round, and runs once more on another worker; a second overrun is
   *   answered with violations, and trips nothing either way.
   */
  async #judgeOverrun(running: Running, overranAtMs: number, cpuEarly: Promise<CpuSample | null>, cpuAtEnd: Promise<CpuSample | null>): Promise<void> {
    const [early, end] = await Promise.all([cpuEarly, cpuAtEnd]);
    const { batch } = running;
    const computing = early === null || end === null || end.cpuMs - early.cpuMs >= COMPUTING_CPU_SHARE_OF_BUDGET * this.#budgetMs;
    this.#runningAgents.delete(batch.agentId);
    if (computing) {
      this.#trip(batch, running.sent, overranAtMs);
    } else {
      const suppressed = this.#failureLog.admit('overrun:idle');
      if (suppressed !== null) {
        this.#logger.warn('plugin calls overran their budget while their worker was not computing (an overloaded machine?); the worker was replaced and their grants are not tripped', {
          agentId: batch.agentId, retried: batch.retried === true, workerCpuMs: Math.round((end.cpuMs - early.cpuMs) * 10) / 10,
          windowMs: Math.round((end.atMs - early.atMs) * 10) / 10, ...(suppressed > 0 ? { similarNotLogged: suppressed } : {}),
        });
      }
      if (!batch.retried && !this.#closed) {
        batch.retried = true;
        this.#requeueFirst(batch);
        this.#dispatch();
        return;
      }
    }
    const budgetMs = this.#budgetMs;
    batch.resolve(this.#settle(batch.calls, running.sent, running.sent.map((): OperatorOutcome => ({ kind: 'timeout', budgetMs }))));
    this.#dispatch();
  }

  /** Trips every grant whose calls the batch sent to the worker, and says so (rate-limited). */
  #trip(batch: Batch, sent: readonly number[], overranAtMs: number): void {
    const tripped = this.#trips.trip(sent.flatMap((i) => batch.calls[i]!.grantIds), overranAtMs);
    const suppressed = tripped.length > 0 ? this.#failureLog.admit('overrun:tripped') : null;
    if (suppressed === null) return;
    this.#logger.warn('plugin calls overran their budget; the worker was replaced and their grants are tripped', {
      agentId: batch.agentId,
      grants: tripped.slice(0, LOGGED_GRANTS).map((t) => ({ grantId: t.grantId, trippedSeconds: Math.round(t.durationMs / 1000) })),
      tripSeconds: this.#tripSeconds,
      ...(suppressed > 0 ? { similarTripsNotLogged: suppressed } : {}),
    });
  }

  /**
   * Puts a batch back at the head of its agent's lane and that lane first in the round: it already
   * waited its turn once. Rebuilding the round is linear in the waiting agents, and happens only
   * after an overrun. The queue bounds do not apply: the batch was admitted before.
   */
  #requeueFirst(batch: Batch): void {
    const lane = this.#lanes.get(batch.agentId) ?? [];
    lane.unshift(batch);
    const others = [...this.#lanes].filter(([agentId]) => agentId !== batch.agentId);
    this.#lanes.clear();
    this.#lanes.set(batch.agentId, lane);
    for (const [agentId, waiting] of others) this.#lanes.set(agentId, waiting);
    this.#waitForWorker(batch);
  }

  #died(slot: Slot, worker: Worker, message: string): void {
    if (slot.worker !== worker) return;
    slot.worker = null;
    slot.ready = false;
    const running = slot.running;
    if (running) this.#finish(slot, running.id, running.sent.map((): OperatorOutcome => ({ kind: 'crashed', message })), false);
    if (slot.retired || this.#closed) return;
    this.#deathsInARow++;
    this.#logger.error('plugin worker stopped; starting another', { error: message, restarts: this.#deathsInARow });
    if (this.#spare === slot) {
      this.#spare = null;
      this.#startSpare();
    } else {
      this.#replaceWorker(slot);
    }
  }

  /**
   * Terminates a serving slot's worker (if any) and fills its place: the standby takes it at once
   * (serving as soon as it is ready, if it is still starting) and a new standby starts in the
   * background; without a standby, the slot itself restarts after the back-off.
   */
  #replaceWorker(slot: Slot): void {
    const old = slot.worker;
    slot.worker = null;
    slot.ready = false;
    if (old) void old.terminate();
    if (slot.retired || this.#closed) return;
    const index = this.#slots.indexOf(slot);
    if (index === -1) return;
    const spare = this.#spare;
    if (spare) {
      this.#slots[index] = spare;
      this.#spare = null;
      // The old slot is done; a batch it still holds is settled by the caller, then it is retired.
      slot.retired = true;
      this.#startSpare();
      this.#dispatch();
      return;
    }
    this.#later(() => {
      if (slot.retired || this.#closed || slot.worker) return;
      this.#start(slot, this.#modules).catch((error: unknown) => {
        this.#logger.error('plugin worker could not start; will retry', { error: (error as Error).message });
      });
    });
  }

  /** Starts a new standby (after the back-off), unless there is one or the pool has no plugins. */
  #startSpare(): void {
    if (this.#closed || this.#spare || this.#modules.length === 0) return;
    const slot = newSlot();
    this.#spare = slot;
    const modules = this.#modules;
    this.#later(() => {
      if (slot.retired || this.#closed) return;
      this.#start(slot, modules).catch((error: unknown) => {
        this.#logger.error('plugin standby worker could not start; will retry', { error: (error as Error).message });
      });
    });
  }

  /** Runs `start` at once after a budget kill or a first crash, later after repeated crashes (a plugin that kills every worker). */
  #later(start: () => void): void {
    const deaths = this.#deathsInARow;
    const delayMs = deaths <= 1 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** (deaths - 2));
    setTimeout(start, delayMs).unref();
  }

  /** Stops the slot's worker once it is idle (at once when `now`). */
  async #retire(slot: Slot, now = false): Promise<void> {
    slot.retired = true;
    if (slot.running && !now) return;
    if (slot.running) {
      clearTimeout(slot.running.budgetTimer);
      this.#runningAgents.delete(slot.running.batch.agentId);
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
      this.#metrics.pluginFailure(operator, outcome.kind);
      const suppressed = this.#failureLog.admit(`${operator}:${outcome.kind}`);
      if (suppressed === null) return;
      this.#logger.warn('plugin operator failed; the argument counts as a violation', {
        operator, outcome, ...(suppressed > 0 ? { similarFailuresNotLogged: suppressed } : {}),
      });
    });
  }
}

function newSlot(): Slot {
  return { worker: null, ready: false, running: null, retired: false };
}

/**
 * The worker thread's CPU time now, or null when it cannot be read: `Worker#cpuUsage` is missing
 * before Node 24.6 (the Node 20 build), the worker may have gone, or the reading may not come back
 * within CPU_SAMPLE_TIMEOUT_MS. Never rejects.
 */
function sampleCpu(worker: Worker): Promise<CpuSample | null> {
  const atMs = performance.now();
  if (typeof worker.cpuUsage !== 'function') return Promise.resolve(null);
  let reading: Promise<CpuSample | null>;
  try {
    reading = worker.cpuUsage().then((usage) => ({ cpuMs: (usage.user + usage.system) / 1000, atMs }), () => null);
  } catch {
    return Promise.resolve(null);
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), CPU_SAMPLE_TIMEOUT_MS);
    timer.unref();
  });
  return Promise.race([reading, timeout]).finally(() => clearTimeout(timer));
}
