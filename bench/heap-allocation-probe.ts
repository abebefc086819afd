// Preloaded into the benchmark's server processes (`node --import <this file>`, bench/run.ts) to
// measure how many bytes of V8 heap the server allocates over one timed window, from inside the
// server. V8 keeps no running total of allocated bytes, so the probe reconstructs it: between two
// garbage collections the used heap only grows by what is allocated, and each collection takes away
// what it frees. So the bytes allocated over a window are
//
//   (used heap at the window's end − used heap at its start)
//     + the sum over the collections in the window of (used heap before − used heap after).
//
// The used heap at the ends comes from v8.getHeapStatistics(), and each collection's before and
// after from v8.GCProfiler, which reads the same statistic (used_heap_size) inside V8's own GC
// prologue and epilogue callbacks. A PerformanceObserver of 'gc' entries would not do: it reports a
// collection's kind and duration, not the heap around it, and it runs later, after more allocation.
//
// What it counts: the main thread's JavaScript heap (objects, strings, closures, the headers and
// bodies Node and Express build). Not counted: memory outside the V8 heap (Buffer backing stores,
// sockets' native memory) and worker threads' own heaps (agentgate's plugin sandbox, idle in the
// benchmark's constrained grant, which uses built-in operators only).
//
// How the benchmark talks to it: over the IPC channel bench/run.ts opens to the process it spawns
// (`stdio: [..., 'ipc']`), with `{heapProbe: 'start'}` and `{heapProbe: 'stop'}` and one answer to
// each. Chosen over a signal and a file because a message carries its answer back with no polling
// and no file to clean up, and over a second HTTP port because nothing shares the server's sockets
// or its HTTP stack. None of it is on the request path: the probe's code runs when a message
// arrives (twice a window) and inside V8's collections (GCProfiler records two heap statistics per
// collection, microseconds each, not per request).
//
// It does nothing in a process without an IPC channel, in a worker thread, or in a cluster worker
// (whose IPC channel belongs to agentgate's cluster primary, not to the benchmark). The channel is
// unref'd, so it never keeps a server alive that would otherwise exit.
import cluster from 'node:cluster';
import v8 from 'node:v8';
import { isMainThread } from 'node:worker_threads';

/**
 * What the benchmark sends. `label` names the window (its scenario); the probe ignores it, and
 * bench/allocation-profile.ts names the window's profile after it.
 */
export type HeapProbeRequest = { heapProbe: 'start'; label?: string } | { heapProbe: 'stop' };

/** What the probe answers: `stopped` carries the window's measurement. */
export type HeapProbeReply =
  | { heapProbe: 'started' }
  | { heapProbe: 'stopped'; allocatedBytes: number; garbageCollections: number; windowMilliseconds: number }
  | { heapProbe: 'error'; message: string };

interface OpenWindow {
  profiler: v8.GCProfiler;
  usedHeapAtStartBytes: number;
  startedAtMilliseconds: number;
}

function isHeapProbeRequest(message: unknown): message is HeapProbeRequest {
  return typeof message === 'object' && message !== null && 'heapProbe' in message && ((message as { heapProbe: unknown }).heapProbe === 'start' || (message as { heapProbe: unknown }).heapProbe === 'stop');
}

function answer(reply: HeapProbeReply): void {
  process.send?.(reply);
}

if (isMainThread && !cluster.isWorker && typeof process.send === 'function') {
  let window: OpenWindow | undefined;
  process.on('message', (message: unknown) => {
    if (!isHeapProbeRequest(message)) return;
    if (message.heapProbe === 'start') {
      // A window left open (a benchmark that died between start and stop) is discarded.
      window?.profiler.stop();
      const profiler = new v8.GCProfiler();
      profiler.start();
      window = { profiler, usedHeapAtStartBytes: v8.getHeapStatistics().used_heap_size, startedAtMilliseconds: performance.now() };
      answer({ heapProbe: 'started' });
      return;
    }
    if (window === undefined) {
      answer({ heapProbe: 'error', message: 'stop without a start' });
      return;
    }
    // The end of the window is read before the profiler is stopped: building its result allocates.
    const usedHeapAtStopBytes = v8.getHeapStatistics().used_heap_size;
    const windowMilliseconds = performance.now() - window.startedAtMilliseconds;
    const profile = window.profiler.stop();
    const usedHeapAtStartBytes = window.usedHeapAtStartBytes;
    window = undefined;
    let collectedBytes = 0;
    for (const collection of profile.statistics) collectedBytes += collection.beforeGC.heapStatistics.usedHeapSize - collection.afterGC.heapStatistics.usedHeapSize;
    answer({
      heapProbe: 'stopped',
      allocatedBytes: usedHeapAtStopBytes - usedHeapAtStartBytes + collectedBytes,
      garbageCollections: profile.statistics.length,
      windowMilliseconds: Math.round(windowMilliseconds),
    });
  });
  process.channel?.unref();
}
