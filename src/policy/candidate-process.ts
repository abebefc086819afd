// The entry of a candidate worker process (candidate-runner.ts starts it for previews). It lowers the
// priority of every thread of the process before anything else loads, so that loading the worker,
// the Redis client and the candidate's wasm happens at the lowest priority too, and then runs the
// worker (candidate-worker.ts), which serves the parent over the process's IPC channel.
import { lowerThisProcesssPriority } from './candidate-priority.ts';

lowerThisProcesssPriority();
await import('./candidate-worker.ts');
