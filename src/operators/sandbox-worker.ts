// The plugin worker: a thread that imports the operator plugins and evaluates batches of calls for
// the main thread (sandbox.ts). It exists so that a plugin that loops, backtracks or blocks can be
// stopped: the main thread terminates this thread when a batch runs past its budget, which no
// code can do to synchronous JavaScript running on the event loop itself.
import { parentPort, workerData } from 'node:worker_threads';
import { describeThrown } from '../common/thrown.ts';
import { runOperator, type OperatorOutcome } from './outcome.ts';

export interface WorkerModule {
  name: string;
  /** The exact URL the main thread imported, so both threads run the same version of the file. */
  url: string;
}

export type ToWorker = { type: 'batch'; id: number; calls: Array<[name: string, operand: unknown, actual: unknown]> };

export type FromWorker =
  | { type: 'ready' }
  | { type: 'load_failed'; message: string }
  | { type: 'result'; id: number; outcomes: OperatorOutcome[] }
  | { type: 'stray_rejection'; message: string };

type Evaluate = (operand: unknown, actual: unknown) => unknown;

interface LoadedOperator {
  evaluate: Evaluate;
  /** The plugin's operand schema: a grant made before a reload tightened it is refused, as in process. */
  operandFits(operand: unknown): boolean;
}

const port = parentPort;
if (port === null) throw new Error('sandbox-worker.ts runs only as a worker thread');
const post = (message: FromWorker) => port.postMessage(message);

// A plugin may start a promise it never returns and let it reject. In the worker that would end the
// thread; it says so to the main thread (which logs it) and goes on, since no answer depends on it.
process.on('unhandledRejection', (reason) => post({ type: 'stray_rejection', message: describeThrown(reason) }));

async function load(modules: readonly WorkerModule[]): Promise<Map<string, LoadedOperator>> {
  const byName = new Map<string, LoadedOperator>();
  for (const m of modules) {
    const module = (await import(m.url)) as Record<string, unknown>;
    const exported = (module.default && typeof module.default === 'object' ? module.default : module) as { evaluate?: unknown; operand?: unknown };
    const schema = exported.operand as { safeParse?: (value: unknown) => { success: boolean } } | undefined;
    if (typeof exported.evaluate !== 'function' || typeof schema?.safeParse !== 'function') {
      throw new Error(`${m.url}: evaluate or operand is missing`);
    }
    const safeParse = schema.safeParse.bind(schema);
    byName.set(m.name, {
      evaluate: exported.evaluate as Evaluate,
      operandFits: (operand) => {
        try {
          return safeParse(operand).success === true;
        } catch {
          return false;
        }
      },
    });
  }
  return byName;
}

try {
  const operators = await load((workerData as { modules: WorkerModule[] }).modules);
  port.on('message', (message: ToWorker) => {
    if (message.type !== 'batch') return;
    const outcomes = message.calls.map(([name, operand, actual]): OperatorOutcome => {
      const operator = operators.get(name);
      if (!operator || !operator.operandFits(operand)) return { kind: 'refused' };
      return runOperator(operator.evaluate, operand, actual);
    });
    post({ type: 'result', id: message.id, outcomes });
  });
  post({ type: 'ready' });
} catch (error) {
  post({ type: 'load_failed', message: describeThrown(error) });
}
