// The watchdog of a candidate worker process, a thread that candidate-worker.ts starts in it: it
// kills the process once the process has been handed to another parent, which is what happens to a
// process whose parent exited. It is a thread because the process's own event loop may never turn
// again: a candidate spinning in wasm holds it.
import { workerData } from 'node:worker_threads';

const { parentPid, intervalMs } = workerData as { parentPid: number; intervalMs: number };
setInterval(() => {
  if (process.ppid !== parentPid) process.kill(process.pid, 'SIGKILL');
}, intervalMs);
