// Preloaded, after bench/heap-allocation-probe.ts, into the benchmark's servers when
// BENCH_ALLOCATION_PROFILE_DIR or BENCH_WINDOW_CPU_PROFILE_DIR is set (bench/run.ts).
//
// BENCH_ALLOCATION_PROFILE_DIR: takes a V8 sampling heap profile over each timed window, so the bytes the probe counts can be traced to the code that allocates them. It
// listens on the same IPC channel as the probe, to the same `{heapProbe: 'start'}` and
// `{heapProbe: 'stop'}` messages, and never answers them (the probe does). The profile keeps the
// samples of objects the garbage collector has already freed (includeObjectsCollectedByMajorGC and
// ...MinorGC): a request's garbage is exactly what the benchmark wants to see, and a profile of the
// live heap alone would show almost none of it.
//
// Each window's profile is written to the directory as `<label>-<pid>-<window>.heapprofile` (the
// label is what the benchmark sends with `start`, else the script's name). Read one with
// `node bench/allocation-summary.ts <file>` (self size per function and per stack), or load it in
// Chrome DevTools' Memory tab.
//
// The sampler costs the server time (a sample every BENCH_ALLOCATION_SAMPLING_BYTES bytes, 512 by
// default) and allocates a little itself, so a window profiled this way is for reading, not for its
// req/s or bytes per request.
//
// BENCH_WINDOW_CPU_PROFILE_DIR: a CPU profile of the main thread over each timed window only, as
// `<label>-<pid>-<window>.cpuprofile` (read it with `node bench/profile-summary.ts <file>`). Unlike
// BENCH_PROFILE_DIR (--cpu-prof, the whole process from start-up to exit), it leaves out start-up,
// provisioning and the idle time between windows, so its "(garbage collector)" share is the share
// under load. The two kinds of profile can be taken in one run, but each costs the other time.
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import path from 'node:path';
import cluster from 'node:cluster';
import { isMainThread } from 'node:worker_threads';

const directory = process.env.BENCH_ALLOCATION_PROFILE_DIR;
const cpuDirectory = process.env.BENCH_WINDOW_CPU_PROFILE_DIR;
const samplingInterval = Number(process.env.BENCH_ALLOCATION_SAMPLING_BYTES ?? 512);

/** Posts an inspector command and waits for its answer. */
function post<T>(session: Session, method: string, params: object = {}): Promise<T> {
  return new Promise((resolve, reject) => {
    session.post(method, params, (err, result) => (err ? reject(err) : resolve(result as T)));
  });
}

/** The label a start message carries (bench/run.ts sends the scenario's short name), made file-name safe. */
function labelOf(message: object): string {
  const label = (message as { label?: unknown }).label;
  const text = typeof label === 'string' && label !== '' ? label : path.basename(process.argv[1] ?? 'server', '.ts');
  return text.replace(/[^A-Za-z0-9_.-]+/g, '-').slice(0, 60);
}

if ((directory || cpuDirectory) && isMainThread && !cluster.isWorker && typeof process.send === 'function') {
  for (const dir of [directory, cpuDirectory]) if (dir) mkdirSync(dir, { recursive: true });
  const session = new Session();
  session.connect();
  let window = 0;
  let label: string | undefined;
  let started: Promise<unknown> | undefined;
  const report = (what: string) => (err: unknown) => process.stderr.write(`window profile: cannot ${what}: ${String(err)}\n`);
  process.on('message', (message: unknown) => {
    if (typeof message !== 'object' || message === null || !('heapProbe' in message)) return;
    const kind = (message as { heapProbe: unknown }).heapProbe;
    if (kind === 'start') {
      label = labelOf(message);
      window++;
      const starts: Promise<unknown>[] = [];
      if (directory) {
        starts.push(post(session, 'HeapProfiler.startSampling', {
          samplingInterval,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true,
        }).catch(report('start heap sampling')));
      }
      if (cpuDirectory) starts.push(post(session, 'Profiler.enable').then(() => post(session, 'Profiler.start')).catch(report('start the CPU profiler')));
      started = Promise.all(starts);
    } else if (kind === 'stop' && started !== undefined) {
      const name = `${label}-${process.pid}-${window}`;
      started = undefined;
      if (cpuDirectory) {
        const file = path.join(cpuDirectory, `${name}.cpuprofile`);
        post<{ profile: unknown }>(session, 'Profiler.stop')
          .then(({ profile }) => writeFileSync(file, JSON.stringify(profile)))
          .catch(report(`write ${file}`));
      }
      if (directory) {
        const file = path.join(directory, `${name}.heapprofile`);
        post<{ profile: unknown }>(session, 'HeapProfiler.stopSampling')
          .then(({ profile }) => writeFileSync(file, JSON.stringify(profile)))
          .catch(report(`write ${file}`));
      }
    }
  });
}
