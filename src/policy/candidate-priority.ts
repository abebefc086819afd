// The priority candidate policies run at (candidate-worker.ts, in a thread or a process of its own):
// the lowest. A preview or a shadow is work beside the requests, never before them, so on a busy
// machine the scheduler gives the event loop, Redis and everything else the CPU first, and the
// candidate what is left: a preview then takes longer and a shadow drops observations (counted),
// rather than execute waiting for either.
import { readdirSync, readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';

/** The nice value: the lowest priority there is. */
const CANDIDATE_NICE = 19;

/**
 * Lowers this thread's priority, not the process's: on Linux the nice value belongs to a thread, and
 * setpriority given a thread id changes that thread only. Node has no call for the thread id, but
 * /proc/thread-self names it. Elsewhere, or if it fails, the thread keeps the process's priority.
 */
export function lowerThisThreadsPriority(): void {
  try {
    const threadId = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(threadId) && threadId > 0 && threadId !== process.pid) setPriority(threadId, CANDIDATE_NICE);
  } catch {
    // Not Linux, or not permitted: the candidate shares the CPU as the process does.
  }
}

/**
 * Lowers the priority of every thread of this process: the main thread, and V8's and libuv's, which
 * have all started by the time any of our code runs and would each keep the priority they started
 * with. Threads started later inherit it from the thread that starts them. The loop is bounded by
 * the process's threads, a handful.
 */
export function lowerThisProcesssPriority(): void {
  let threadIds: string[];
  try {
    threadIds = readdirSync('/proc/self/task');
  } catch {
    // Not Linux: lower the main thread, which is what setpriority of a pid does elsewhere.
    threadIds = [String(process.pid)];
  }
  for (const threadId of threadIds) {
    try {
      setPriority(Number(threadId), CANDIDATE_NICE);
    } catch {
      // Not permitted, or the thread has gone: it keeps the priority it has.
    }
  }
}
