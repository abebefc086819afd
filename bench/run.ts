// `npm run bench`: starts Redis-backed agentgate, a bare Express baseline and the floor (bare Express
// plus one Ed25519 verification per request, bench/floor-server.ts) on loopback, provisions agents
// with constrained grants, and drives POST /capability/execute with a fresh, pre-signed agent JWT per
// request at several concurrencies. Reports req/s, p50/p99 latency, errors and the ratios
// execute/baseline and execute/floor measured in the same run, what each request cost in CPU in
// the server, in Redis and in the load generator (from /proc and INFO cpu), and how many bytes of V8
// heap each server allocated per request (measured inside the server, bench/heap-allocation-probe.ts).
//
// Rounds: at each concurrency the baseline runs once, then the floor and the execute scenarios run
// one after the other, BENCH_ROUNDS times (round 1: floor, allowed, violated, ...; round 2: floor,
// allowed, ...). The servers start once and serve every round; each window gets its own freshly
// signed tokens. Every ratio is taken against the floor of the same round, so a machine that slows
// down for a minute moves both sides of a ratio, and the summary reports each scenario's median
// ratio over the rounds with its spread (the lowest and highest round). Bounded: every window has a
// fixed duration, and the expected wall time is printed before the first one starts.
//
// Decision records (src/services/decision-log.ts): agentgate records every grants decision and a
// sample of execute decisions (DECISION_LOG_SAMPLE, 0.01 by default). To measure what recording
// costs execute, two more agentgate processes serve the same Redis prefix, agents and issuer as the
// first: one with DECISION_LOG_SAMPLE=0 (scenario allowed-unrecorded) and one with
// DECISION_LOG_SAMPLE=1 (allowed-all-recorded). They sit idle except in their own windows, which
// run in every round right after the allowed window, so the three are compared within a round as
// every scenario is compared with the floor. The direct difference (allowed − unrecorded) compares
// two processes, which can differ by more than a 1 % sample costs; the all-recorded difference, a
// hundred times the cost at 0.01, is the steadier measure (bench/RESULTS.md). The `preview` scenario fills the decision stream with
// BENCH_PREVIEW_DECISIONS records before the rounds (copies of records the server wrote,
// bench/decision-records.ts), then in every round runs an allowed window of
// BENCH_PREVIEW_WINDOW_SECONDS during which it previews the artefact agentgate serves against them
// (POST /admin/policy/preview), and splits that window's execute latencies into those that
// completed while the preview ran and the rest (bench/preview-under-load.ts).
//
// Settings (environment): BENCH_DURATION_SECONDS (10), BENCH_CONNECTIONS (16,64), BENCH_ROUNDS (1),
// BENCH_SCENARIOS (allowed,allowed-unrecorded,allowed-all-recorded,violated,replay,batch,preview),
// BENCH_PREVIEW_WINDOW_SECONDS (15), BENCH_PREVIEW_DECISIONS (100000), BENCH_RUNTIMES (24; 24,20
// also runs the Node 20 build), BENCH_WORKERS (agentgate's WORKERS, 1), BENCH_PROFILE_DIR (run agentgate with --cpu-prof,
// profiles there; read them with `node bench/profile-summary.ts <file>`), BENCH_TOKENS_PER_SECOND
// (16000), BENCH_RESULTS_FILE (bench/results/latest.json, the results as JSON), BENCH_GATE_ENV (a
// JSON object of extra environment for agentgate, e.g. '{"METRICS_TOKEN":"..."}' to measure with
// metrics on), BENCH_ALLOCATION_PROFILE_DIR (take a V8 sampling heap profile of every timed window in
// each server that runs the heap probe, objects already collected included, and write it there as
// <window>-<pid>-<n>.heapprofile; read one with `node bench/allocation-summary.ts <file> [top]
// [requests]`, bench/allocation-profile.ts says more; a profiled window's req/s and bytes are not
// for comparison, the sampler costs time and allocates; BENCH_ALLOCATION_SAMPLING_BYTES sets the
// sampling interval, 512 bytes by default), BENCH_WINDOW_CPU_PROFILE_DIR (likewise, a CPU profile of
// each timed window alone, without start-up and idle time: its "(garbage collector)" row is the GC
// share under load; read it with `node bench/profile-summary.ts <file>`).
import { spawn, type ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import { createPublicKey, generateKeyPairSync, KeyObject, randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { hostJwt, newEd25519, type TestKey } from '../test/support/keys.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../test/support/redis.ts';
import { freePort } from '../test/support/net.ts';
import { loadSodium } from '../src/auth/ed25519-verify.ts';
import { presign, type BenchAgent } from './jwt.ts';
import type { HeapProbeReply, HeapProbeRequest } from './heap-allocation-probe.ts';
import { fillDecisionStream, findTemplates, FILL_MIX, type RecordTemplates } from './decision-records.ts';
import { ResponseLog, timedPreview, type LatencyOf, type PreviewOutcome } from './preview-under-load.ts';
import { keyLayout } from '../src/store/redis/keys.ts';

const DURATION_SECONDS = Number(process.env.BENCH_DURATION_SECONDS ?? 10);
const CONCURRENCIES = (process.env.BENCH_CONNECTIONS ?? '16,64').split(',').map(Number);
/** How many times the floor and the execute scenarios run, alternately, at each concurrency. */
const ROUNDS = parseRounds(process.env.BENCH_ROUNDS);
const AGENT_COUNT = 32;
/** Tokens signed per second of a timed window: above any rate this machine reaches, so none repeats. */
const TOKENS_PER_SECOND = Number(process.env.BENCH_TOKENS_PER_SECOND ?? 16_000);
const ADMIN_TOKEN = randomBytes(24).toString('hex');
const CAPABILITY = 'transfer_money';
/** Every execute scenario, in the order each round runs them. */
const KNOWN_SCENARIOS = ['allowed', 'allowed-unrecorded', 'allowed-all-recorded', 'violated', 'replay', 'batch', 'preview'];
/** Which execute scenarios run (all by default). */
const SCENARIOS = parseScenarios(process.env.BENCH_SCENARIOS);
/** The execute scenarios this run drives, in the order each round runs them. */
const EXECUTE_SCENARIOS = KNOWN_SCENARIOS.filter((s) => SCENARIOS.has(s));
/** Untimed executes each agentgate serves before the first round. */
const WARM_UP_SECONDS = Math.min(3, DURATION_SECONDS);
/** The preview scenario's window: long enough to hold a whole preview of 100,000 decisions on this machine class. */
const PREVIEW_WINDOW_SECONDS = Number(process.env.BENCH_PREVIEW_WINDOW_SECONDS ?? 15);
/** How many recorded decisions the preview scenario stores and previews. */
const PREVIEW_DECISIONS = Number(process.env.BENCH_PREVIEW_DECISIONS ?? 100_000);
/**
 * The decision stream's bound for every agentgate of the run (DECISION_LOG_MAX_RECORDS): 10 % above
 * the records the preview reads. At a bound equal to them, the executes recorded while a preview
 * walks from the newest record to the oldest trim the oldest before it gets there, and it reads
 * fewer than it asked for (99,922 of 100,000 in one trial run).
 */
const STREAM_MAX_RECORDS = Math.max(1000, Math.ceil(PREVIEW_DECISIONS * 1.1));
/** The preview starts this far into its window, once the load has reached its pace. */
const PREVIEW_START_AFTER_SECONDS = PREVIEW_WINDOW_SECONDS / 10;
/** The candidate the preview runs: the artefact agentgate serves (the shipped one unless POLICY_WASM_PATH says otherwise). */
const PREVIEW_ARTEFACT_PATH = process.env.POLICY_WASM_PATH ?? 'policies/dist/policy.wasm';
/** Past agentgate's own preview deadline (POLICY_PREVIEW_TIMEOUT_MS, 60 s by default), so its answer, not ours, ends a slow preview. */
const PREVIEW_REQUEST_TIMEOUT_MS = 70_000;
/** Sequential executes sent at most to find one real record of each kind to copy (1 % are recorded by default). */
const TEMPLATE_REQUESTS_MAX = 5_000;
/** The share of execute decisions the first agentgate records, as the second and third are compared with it. */
const PRIMARY_SAMPLE = Number(parseGateEnv(process.env.BENCH_GATE_ENV).DECISION_LOG_SAMPLE ?? process.env.DECISION_LOG_SAMPLE ?? 0.01);
/** The recording cost's target: at the default sample, at most this share of execute's server CPU per request. */
const RECORDING_COST_TARGET_PERCENT = 3;
/** The preview's target: this many seconds for 100,000 decisions. */
const PREVIEW_TARGET_SECONDS = 10;
/** Calls per request in the batch scenario. */
const BATCH_SIZE = 10;
const BATCH_SCENARIO = `execute: batch of ${BATCH_SIZE} allowed calls (${BATCH_SIZE} executes per request)`;
const ALLOWED_SCENARIO = 'execute: allowed, constrained grant';
const UNRECORDED_SCENARIO = 'execute: allowed, nothing recorded (DECISION_LOG_SAMPLE=0)';
const ALL_RECORDED_SCENARIO = 'execute: allowed, every decision recorded (DECISION_LOG_SAMPLE=1)';
const PREVIEW_SCENARIO = `execute: allowed, while a preview reads ${PREVIEW_DECISIONS.toLocaleString('en-US')} recorded decisions (${PREVIEW_WINDOW_SECONDS} s window)`;
/** agentgate's worker processes (its WORKERS setting); 1 runs the single-process server. */
const WORKERS = Number(process.env.BENCH_WORKERS ?? 1);
/** Where the run's results are also written as JSON. */
const RESULTS_FILE = process.env.BENCH_RESULTS_FILE ?? 'bench/results/latest.json';
/** When set, agentgate runs with --cpu-prof and writes its profiles there. */
const PROFILE_DIR = process.env.BENCH_PROFILE_DIR;
/** Extra environment for agentgate (BENCH_GATE_ENV, a JSON object of strings); it wins over the bench's own settings. */
const GATE_ENV = parseGateEnv(process.env.BENCH_GATE_ENV);
/** The preload that measures a server's heap allocation from inside it, as a URL for `node --import`. */
const HEAP_PROBE_URL = pathToFileURL(path.resolve(import.meta.dirname, 'heap-allocation-probe.ts')).href;
/** When set, every server with the heap probe also takes a sampling heap profile of each window, written there. */
const ALLOCATION_PROFILE_DIR = process.env.BENCH_ALLOCATION_PROFILE_DIR;
/** When set, every server with the heap probe also takes a CPU profile of each window, written there. */
const WINDOW_CPU_PROFILE_DIR = process.env.BENCH_WINDOW_CPU_PROFILE_DIR;
/** The preload that takes those profiles (bench/allocation-profile.ts), as a URL for `node --import`. */
const ALLOCATION_PROFILE_URL = pathToFileURL(path.resolve(import.meta.dirname, 'allocation-profile.ts')).href;

function parseRounds(text: string | undefined): number {
  const rounds = Number(text ?? 1);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`BENCH_ROUNDS must be a whole number of at least 1, not ${text}`);
  return rounds;
}

function parseScenarios(text: string | undefined): Set<string> {
  const names = (text ?? KNOWN_SCENARIOS.join(',')).split(',').map((s) => s.trim()).filter((s) => s !== '');
  const unknown = names.filter((name) => !KNOWN_SCENARIOS.includes(name));
  if (unknown.length > 0) throw new Error(`BENCH_SCENARIOS names ${unknown.join(', ')}, which the bench does not know (it knows ${KNOWN_SCENARIOS.join(', ')})`);
  return new Set(names);
}

function parseGateEnv(text: string | undefined): Record<string, string> {
  if (text === undefined || text === '') return {};
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === 'string')) {
    throw new Error('BENCH_GATE_ENV must be a JSON object whose values are strings');
  }
  return parsed as Record<string, string>;
}
const CONSTRAINTS = { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } };
/** The verifier the floor uses: the fastest agentgate ships, where it loads on this machine. */
const FLOOR_VERIFIER = 'sodium' in loadSodium() ? 'libsodium' : 'node:crypto';

interface Measured {
  scenario: string;
  connections: number;
  /** Which round of this concurrency the row belongs to, from 1 (the baseline runs in round 1 only). */
  round: number;
  requestsPerSecond: number;
  latencyMsP50: number;
  latencyMsP99: number;
  ok2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  /** CPU time per request, µs: the server under test (with its workers), Redis, the load generator. */
  cpuPerRequestUs: { server: number; redis: number; generator: number };
  /** Share of the whole machine's CPU time that was busy during the window, in percent. */
  machineBusyPercent: number;
  /**
   * Bytes of V8 heap the server's main thread allocated over the window, per completed request,
   * measured inside the server (bench/heap-allocation-probe.ts); null where the probe cannot run
   * (agentgate in cluster mode or on the Node 20 build).
   */
  allocatedBytesPerRequest: number | null;
}

/** One round at one concurrency: the rows it ran, in order (round 1 starts with the baseline). */
interface Round {
  runtime: string;
  connections: number;
  round: number;
  results: Measured[];
  /** The preview scenario's preview, when it ran. */
  preview?: PreviewRun;
}

/** A preview under load: what it answered, and execute's latency while it ran and while it did not. */
interface PreviewRun {
  windowSeconds: number;
  preview: PreviewOutcome;
  /** The preview window's requests that completed while the preview ran, and the rest of that window's. */
  executeDuringPreview: LatencyOf;
  executeOutsidePreview: LatencyOf;
}

/** What recording decisions costs execute at one concurrency, over the rounds; every difference is taken within a round. */
interface RecordingCost {
  runtime: string;
  connections: number;
  rounds: number;
  /** The share of executes recorded in the allowed scenario (DECISION_LOG_SAMPLE of the first agentgate). */
  sample: number;
  /** Server CPU µs per request: allowed (at `sample`), allowed-unrecorded (0) and allowed-all-recorded (1). */
  serverCpuUsPerRequest: { atSample: Spread; unrecorded: Spread; allRecorded: Spread | null };
  /** Redis CPU µs per request, the same three. */
  redisCpuUsPerRequest: { atSample: Spread; unrecorded: Spread; allRecorded: Spread | null };
  /** (atSample − unrecorded) ÷ atSample × 100, per round: the cost measured directly (target ≤ 3 %). */
  costPercentAtSample: Spread;
  /** allRecorded − unrecorded, µs of server CPU per recorded decision, per round. */
  serverCpuUsPerRecordedDecision: Spread | null;
  /** sample × serverCpuUsPerRecordedDecision ÷ atSample × 100, per round: the cost derived from recording every decision. */
  derivedCostPercentAtSample: Spread | null;
  targetPercent: number;
}

/** The previews under load at one concurrency, over the rounds. */
interface PreviewSummary {
  runtime: string;
  connections: number;
  rounds: number;
  requested: number;
  /** Per round, as the preview answered (null where it failed). */
  evaluated: (number | null)[];
  errors: (number | null)[];
  statuses: number[];
  withinWindow: boolean[];
  seconds: Spread;
  targetSeconds: number;
  /** Execute's p99 while the preview ran over its p99 in the rest of the same window. */
  p99DuringOverOutside: Spread | null;
  /** The preview window's p99 (autocannon's, whole window) over the allowed window's of the same round, which had no preview. */
  p99OverAllowedWindow: Spread | null;
  /** The preview window's req/s over the allowed window's of the same round. */
  requestsPerSecondOverAllowedWindow: Spread | null;
}

/** A value over the rounds: its median, its lowest and highest round, and each round's value. */
interface Spread {
  median: number;
  min: number;
  max: number;
  /** In round order; null for a round where the value is undefined (a floor p99 of 0 ms, say). */
  perRound: (number | null)[];
}

/** A scenario over the rounds at one concurrency; every ratio is to the floor of the same round. */
interface ScenarioSummary {
  runtime: string;
  scenario: string;
  connections: number;
  rounds: number;
  requestsPerSecond: Spread;
  latencyMsP99: Spread;
  throughputRatioToFloor: Spread;
  /** The scenario's p99 over the floor's p99 of the same round (higher is worse). */
  p99RatioToFloor: Spread | null;
  allocatedBytesPerRequest: Spread | null;
  /** The scenario's allocated bytes per request over the floor's of the same round (target: ≤ 2). */
  allocationRatioToFloor: Spread | null;
  /** Batch scenario only: executes per second (BATCH_SIZE per request), and that over the allowed single execute of the same round. */
  executesPerSecond?: Spread;
  executesRatioToSingle?: Spread;
}

/**
 * CPU seconds (user + system) used so far by `pid` and its live descendants, from /proc (Linux;
 * NaN elsewhere). Workers are descendants, so cluster mode is counted whole.
 */
function processTreeCpuSeconds(pid: number): number {
  try {
    // /proc/<pid>/stat counts in USER_HZ ticks, 100 per second on Linux (getconf CLK_TCK).
    const ticksPerSecond = 100;
    const stats = new Map<number, { ppid: number; ticks: number }>();
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        // Fields after the command name, which is in parentheses and may contain spaces.
        const text = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
        stats.set(Number(entry), { ppid: Number(fields[1]), ticks: Number(fields[11]) + Number(fields[12]) });
      } catch {
        // The process exited while we looked.
      }
    }
    let ticks = 0;
    const pending = [pid];
    while (pending.length > 0) {
      const current = pending.pop()!;
      ticks += stats.get(current)?.ticks ?? 0;
      for (const [child, stat] of stats) if (stat.ppid === current) pending.push(child);
    }
    return ticks / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Busy and total CPU time of the whole machine so far, in clock ticks (Linux; NaN elsewhere). */
function machineCpuTicks(): { busy: number; total: number } {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.reduce((a, b) => a + b, 0);
    // idle and iowait are the third and fourth fields.
    return { busy: total - fields[3]! - fields[4]!, total };
  } catch {
    return { busy: Number.NaN, total: Number.NaN };
  }
}

async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const read = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? Number.NaN);
  return read('used_cpu_user') + read('used_cpu_sys');
}

/**
 * What a timed window is measured with: the CPU of the server's process tree, Redis's CPU, and the
 * server's heap probe (its IPC channel; undefined when it runs without the probe).
 */
interface Probes {
  serverPid: number;
  redis: Redis;
  heapProbe: ChildProcess | undefined;
}

/** A server the bench started: its process, its port, and whether it answers heap probe requests. */
interface StartedServer {
  child: ChildProcess;
  port: number;
  heapProbe: boolean;
}

/**
 * Which Node runs agentgate: `24` is the pinned Node running the TypeScript sources; `20` is the
 * Node at BENCH_NODE20 (default /usr/bin/node) running the compiled build (`npm run build`).
 */
const RUNTIMES = (process.env.BENCH_RUNTIMES ?? '24').split(',').map((r) => r.trim());

function gateCommand(runtime: string): { node: string; script: string; env: Record<string, string> } {
  if (runtime === '24') return { node: process.execPath, script: 'src/main.ts', env: {} };
  if (runtime === '20') return { node: process.env.BENCH_NODE20 ?? '/usr/bin/node', script: 'dist/src/main.js', env: { PLUGINS_DIR: 'dist/plugins' } };
  throw new Error(`unknown runtime ${runtime} in BENCH_RUNTIMES (use 24 and/or 20)`);
}

/**
 * Starts a server and waits until it says where it listens. With `heapProbe`, the server runs with
 * bench/heap-allocation-probe.ts preloaded and an IPC channel to this process, which the probe
 * answers on (only the probe listens there; nothing else in the server knows about the channel).
 */
function startProcess(script: string, env: Record<string, string>, node = process.execPath, nodeArgs: string[] = [], heapProbe = false): Promise<StartedServer> {
  return new Promise((resolve, reject) => {
    // The allocation profiler is imported after the probe, so at the end of a window the probe reads
    // the heap before the profiler stops and serialises its profile.
    const windowProfiles = ALLOCATION_PROFILE_DIR || WINDOW_CPU_PROFILE_DIR;
    const preloads = heapProbe ? ['--import', HEAP_PROBE_URL, ...(windowProfiles ? ['--import', ALLOCATION_PROFILE_URL] : [])] : [];
    const args = [...preloads, ...nodeArgs, script];
    const child = spawn(node, args, { env: { ...process.env, ...env }, stdio: heapProbe ? ['ignore', 'pipe', 'inherit', 'ipc'] : ['ignore', 'pipe', 'inherit'] });
    // A child that never says where it listens (LOG_LEVEL above info hides agentgate's start-up
    // line, say) is killed, not left serving as an orphan after the benchmark gives up.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${script} did not start within 15 s (agentgate needs LOG_LEVEL info or debug to say where it listens)`));
    }, 15_000);
    let partialLine = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      const lines = (partialLine + chunk.toString()).split('\n');
      partialLine = lines.pop() ?? '';
      for (const line of lines) {
        const port = listeningPort(line);
        if (port !== undefined) {
          clearTimeout(timer);
          resolve({ child, port, heapProbe });
        } else if (line && !/"level":"(info|debug)"/.test(line)) {
          // Warnings and errors from the child are passed on; its routine log lines are not.
          process.stderr.write(`${line}\n`);
        }
      }
    });
    child.on('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
}

/** The port a child says it listens on: the bench servers' `{"listening": port}`, or agentgate's start-up line. */
function listeningPort(line: string): number | undefined {
  if (!line.includes('listening')) return undefined;
  try {
    const entry = JSON.parse(line) as { listening?: unknown; msg?: unknown; port?: unknown };
    if (typeof entry.listening === 'number') return entry.listening;
    if (entry.msg === 'agentgate listening' && typeof entry.port === 'number') return entry.port;
  } catch {
    // Not a JSON line.
  }
  return undefined;
}

/** Sends the server's heap probe a request and waits for its answer (bounded: a probe that does not answer fails the run). */
function askHeapProbe(child: ChildProcess, request: HeapProbeRequest): Promise<HeapProbeReply> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: unknown) => {
      if (typeof message !== 'object' || message === null || !('heapProbe' in message)) return;
      clearTimeout(timer);
      child.off('message', onMessage);
      const reply = message as HeapProbeReply;
      if (reply.heapProbe === 'error') reject(new Error(`heap probe of process ${child.pid}: ${reply.message}`));
      else resolve(reply);
    };
    const timer = setTimeout(() => {
      child.off('message', onMessage);
      reject(new Error(`heap probe of process ${child.pid} did not answer ${request.heapProbe} within 15 s`));
    }, 15_000);
    child.on('message', onMessage);
    child.send(request);
  });
}

async function post(url: string, token: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  return { status: res.status, json: await res.json() };
}

async function provision(base: string): Promise<BenchAgent[]> {
  const host = await newEd25519();
  // transfer_money needs presence, so no host default grants it: the admin approves each agent.
  const created = await post(`${base}/admin/hosts`, ADMIN_TOKEN, { public_key: host.publicJwk, default_capabilities: [], user_id: 'bench' });
  if (created.status !== 201) throw new Error(`host provisioning failed: ${JSON.stringify(created)}`);
  const agents: BenchAgent[] = [];
  for (let i = 0; i < AGENT_COUNT; i++) {
    const key: TestKey = await newEd25519();
    const token = await hostJwt(host, base, { agentKey: key });
    const reg = await post(`${base}/agent/register`, token, { name: `bench-${i}`, mode: 'delegated', capabilities: [{ name: CAPABILITY, constraints: CONSTRAINTS }] });
    if (reg.status !== 200 || reg.json.status !== 'pending') throw new Error(`agent provisioning failed: ${JSON.stringify(reg)}`);
    const approved = await post(`${base}/admin/agents/${reg.json.agent_id}/approve`, ADMIN_TOKEN, { user_id: 'bench' });
    if (approved.status !== 200 || approved.json.status !== 'active') throw new Error(`agent approval failed: ${JSON.stringify(approved)}`);
    agents.push({ id: reg.json.agent_id, privateKey: KeyObject.from(key.privateKey as Parameters<typeof KeyObject.from>[0]), hostThumbprint: host.thumbprint });
  }
  return agents;
}

/** Something that runs alongside a window's load (the preview scenario's preview), and the window's length. */
interface WindowExtras {
  durationSeconds: number;
  /** Started as the load starts, with autocannon's instance to listen to; the window's measurement waits for it. It must not reject. */
  alongside: (instance: EventEmitter) => Promise<void>;
  /** Set by drive when the load has ended (performance.now() ms). */
  loadEndedAtMs?: number;
}

async function drive(scenario: string, url: string, connections: number, round: number, bodies: string[], tokens: string[], probe: Probes, extras?: WindowExtras): Promise<Measured> {
  let next = 0;
  // The heap window opens once the probe has answered, so it covers all of the timed window; it
  // closes as soon as autocannon has finished. Requests still in flight when autocannon stops (at
  // most one per connection) are in the heap's count but not in the completed requests it is
  // divided by: a few in the thousands a window serves.
  const windowLabel = `c${connections}-r${round}-${scenario.replace(/\s*\[.*$/, '')}`;
  if (probe.heapProbe) await askHeapProbe(probe.heapProbe, { heapProbe: 'start', label: windowLabel });
  const before = { server: processTreeCpuSeconds(probe.serverPid), redis: await redisCpuSeconds(probe.redis), generator: process.cpuUsage(), machine: machineCpuTicks() };
  // autocannon's instance is both its event emitter and the promise of its result (@types/autocannon
  // declares the two apart).
  const instance = autocannon({
    url,
    connections,
    duration: extras?.durationSeconds ?? DURATION_SECONDS,
    requests: [
      {
        method: 'POST',
        setupRequest: (request) => {
          const i = next++;
          request.headers = { 'content-type': 'application/json', authorization: `Bearer ${tokens[i % tokens.length]}` };
          request.body = bodies[i % bodies.length];
          return request;
        },
      },
    ],
  }) as unknown as EventEmitter & Promise<autocannon.Result>;
  const alongside = extras?.alongside(instance);
  const result = await instance;
  if (extras) extras.loadEndedAtMs = performance.now();
  const heap = probe.heapProbe ? await askHeapProbe(probe.heapProbe, { heapProbe: 'stop' }) : undefined;
  if ((ALLOCATION_PROFILE_DIR || WINDOW_CPU_PROFILE_DIR) && probe.heapProbe) {
    process.stderr.write(`window profile of ${windowLabel} (process ${probe.serverPid}): ${result.requests.total} requests completed\n`);
  }
  if (next > tokens.length && tokens.length > 1) process.stderr.write(`warning: ${scenario} used ${next} requests but only ${tokens.length} tokens were signed\n`);
  // Everything is read when the load ends, before waiting for what ran alongside: a preview that
  // outlasts the window must not add its tail to the window's CPU per request.
  const generator = process.cpuUsage(before.generator);
  const machine = machineCpuTicks();
  const serverSeconds = processTreeCpuSeconds(probe.serverPid) - before.server;
  const redisSeconds = (await redisCpuSeconds(probe.redis)) - before.redis;
  await alongside;
  const perRequestUs = (seconds: number) => Math.round((seconds * 1e6) / Math.max(1, result.requests.total));
  return {
    scenario,
    connections,
    round,
    // Completed requests over the window's measured length. autocannon's requests.average is the
    // mean of its per-second samples, which undercounts when a partial second is sampled.
    requestsPerSecond: Math.round(result.requests.total / result.duration),
    latencyMsP50: result.latency.p50,
    latencyMsP99: result.latency.p99,
    ok2xx: result['2xx'],
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    cpuPerRequestUs: {
      server: perRequestUs(serverSeconds),
      redis: perRequestUs(redisSeconds),
      generator: perRequestUs((generator.user + generator.system) / 1e6),
    },
    machineBusyPercent: Math.round((100 * (machine.busy - before.machine.busy)) / (machine.total - before.machine.total)),
    allocatedBytesPerRequest: heap?.heapProbe === 'stopped' ? Math.round(heap.allocatedBytes / Math.max(1, result.requests.total)) : null,
  };
}

/** Enough tokens for the run at up to `ceilingPerSecond`; a 5% replay mix repeats earlier ones. */
function tokensFor(agents: BenchAgent[], aud: string, ceilingPerSecond: number, replayShare = 0, seconds = DURATION_SECONDS): string[] {
  const fresh = presign(agents, ceilingPerSecond * seconds, aud);
  if (replayShare === 0) return fresh;
  return fresh.map((token, i) => (i > 100 && i % Math.round(1 / replayShare) === 0 ? fresh[i - 50]! : token));
}

/**
 * What the run will take, printed before it starts: the timed windows, plus signing their tokens
 * (timed here on a throwaway key), plus start-up, provisioning and filling the decision stream. The
 * baseline runs once per concurrency; the floor and each execute scenario once per round, the
 * preview's window longer than the others.
 */
function expectedWallTime(): string {
  const previewWindows = SCENARIOS.has('preview') ? RUNTIMES.length * CONCURRENCIES.length * ROUNDS : 0;
  const roundWindows = EXECUTE_SCENARIOS.length - (SCENARIOS.has('preview') ? 1 : 0);
  const shortWindows = RUNTIMES.length * CONCURRENCIES.length * (1 + ROUNDS * (1 + roundWindows));
  const timedSeconds = shortWindows * DURATION_SECONDS + previewWindows * PREVIEW_WINDOW_SECONDS;
  const signedSeconds = RUNTIMES.length * CONCURRENCIES.length * ROUNDS * (1 + roundWindows) * DURATION_SECONDS + previewWindows * PREVIEW_WINDOW_SECONDS;
  const tokens = signedSeconds * TOKENS_PER_SECOND;
  const sampleAgent: BenchAgent = { id: 'agt_wall_time_sample', privateKey: generateKeyPairSync('ed25519').privateKey, hostThumbprint: 'sample' };
  // The first tokens pay for compiling the signing code and preparing the key; the second batch is timed.
  presign([sampleAgent], 200, 'http://127.0.0.1/');
  const sampleTokens = 1000;
  const startedAt = performance.now();
  presign([sampleAgent], sampleTokens, 'http://127.0.0.1/');
  const signingMicrosecondsPerToken = ((performance.now() - startedAt) * 1000) / sampleTokens;
  const signingSeconds = (tokens * signingMicrosecondsPerToken) / 1e6;
  // Start-up and provisioning of agentgate, its 32 agents and the floor: about 10 s per runtime
  // here, 3 s more for each agentgate that samples differently, each agentgate's warm-up, and
  // filling the decision stream about 3 s per 100,000 records.
  const extraGates = (SCENARIOS.has('allowed-unrecorded') ? 1 : 0) + (SCENARIOS.has('allowed-all-recorded') ? 1 : 0);
  const setupSeconds = RUNTIMES.length * (10 + 3 * extraGates + (1 + extraGates) * WARM_UP_SECONDS + (SCENARIOS.has('preview') ? (3 * PREVIEW_DECISIONS) / 100_000 : 0));
  const minutes = (seconds: number) => `${Math.floor(Math.round(seconds) / 60)} min ${Math.round(seconds) % 60} s`;
  const windows = previewWindows === 0 ? `${shortWindows} timed windows of ${DURATION_SECONDS} s` : `${shortWindows} timed windows of ${DURATION_SECONDS} s and ${previewWindows} of ${PREVIEW_WINDOW_SECONDS} s (with a preview)`;
  return `Expected wall time: about ${minutes(timedSeconds + signingSeconds + setupSeconds)}: ${windows} `
    + `(${RUNTIMES.length} runtime(s) × ${CONCURRENCIES.length} concurrencies × (1 baseline + ${ROUNDS} round(s) × ${1 + EXECUTE_SCENARIOS.length} floor and execute windows)) = ${minutes(timedSeconds)}, `
    + `signing ${tokens.toLocaleString('en-US')} tokens ≈ ${minutes(signingSeconds)} (${signingMicrosecondsPerToken.toFixed(0)} µs each), start-up, provisioning, warm-up and filling ≈ ${minutes(setupSeconds)}.`;
}

async function main(): Promise<void> {
  const startedAtMilliseconds = Date.now();
  process.stdout.write(`${expectedWallTime()}\n\n`);
  const redisUrl = await redisUrlForTests();
  const baseline = await startProcess('bench/baseline-server.ts', { PORT: '0' }, process.execPath, [], true);
  const redis = new Redis(redisUrl, { commandTimeout: 5000, maxRetriesPerRequest: 1 });
  const rounds: Round[] = [];
  try {
    for (const runtime of RUNTIMES) rounds.push(...(await benchRuntime(runtime, redisUrl, baseline, redis)));
  } finally {
    baseline.child.kill('SIGTERM');
    redis.disconnect();
  }
  await report(rounds, (Date.now() - startedAtMilliseconds) / 1000);
}

async function benchRuntime(runtime: string, redisUrl: string, baseline: StartedServer, redis: Redis): Promise<Round[]> {
  const command = gateCommand(runtime);
  const nodeArgs = PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : [];
  // The heap probe measures one process's heap: in cluster mode the requests are served by workers
  // it cannot see, and Node 20 (the compiled build) cannot load a TypeScript preload. There the
  // allocation columns stay empty rather than report the primary's idle heap.
  const gateHeapProbe = runtime === '24' && WORKERS === 1;
  // A throwaway prefix the test support may delete afterwards (it refuses any other).
  const prefix = uniquePrefix('bench');
  const gatePort = await freePort();
  // The benchmark signs for the address it calls; the default issuer is a host name (localhost).
  const issuer = `http://127.0.0.1:${gatePort}`;
  // Every agentgate of the run serves one prefix and one issuer, as instances behind one address
  // would: the agents provisioned on the first are the others' too, and one token is good for any.
  const startGate = async (port: number, sample: Record<string, string>) => startProcess(command.script, {
    ...command.env,
    PORT: String(port), ISSUER: issuer, REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, ADMIN_TOKEN, LOG_LEVEL: 'info',
    RATE_LIMIT_AGENT_PER_MINUTE: '10000000', RATE_LIMIT_HOST_PER_MINUTE: '10000000', WORKERS: String(WORKERS),
    DECISION_LOG_MAX_RECORDS: String(STREAM_MAX_RECORDS),
    ...GATE_ENV,
    ...sample,
  }, command.node, nodeArgs, gateHeapProbe);
  const gates: StartedServer[] = [];
  const rounds: Round[] = [];
  const label = (s: string) => `${s} [Node ${runtime}${WORKERS > 1 ? `, ${WORKERS} workers` : ''}]`;
  const probesOf = (server: StartedServer): Probes => ({ serverPid: server.child.pid!, redis, heapProbe: server.heapProbe ? server.child : undefined });
  const baselineProbe = probesOf(baseline);
  let floor: StartedServer | undefined;
  try {
    // One at a time, so no two start-ups race to create what the first one stores (shared secrets).
    const gate = await startGate(gatePort, {});
    gates.push(gate);
    const unrecorded = SCENARIOS.has('allowed-unrecorded') ? await startGate(await freePort(), { DECISION_LOG_SAMPLE: '0' }) : undefined;
    if (unrecorded) gates.push(unrecorded);
    const allRecorded = SCENARIOS.has('allowed-all-recorded') ? await startGate(await freePort(), { DECISION_LOG_SAMPLE: '1' }) : undefined;
    if (allRecorded) gates.push(allRecorded);
    const base = `http://127.0.0.1:${gate.port}`;
    const gateProbe = probesOf(gate);
    // JWT audiences come from what the server advertises, as a real client's would.
    const discovery = await (await fetch(`${base}/.well-known/agent-configuration`)).json() as { issuer: string; default_location: string; endpoints: { batch_execute: string } };
    const agents = await provision(discovery.issuer);
    // The floor verifies with the same agents' keys, so it checks the very tokens execute gets.
    const floorKeys = Object.fromEntries(agents.map((a) => [a.id, createPublicKey(a.privateKey).export({ format: 'jwk' }).x]));
    floor = await startProcess('bench/floor-server.ts', { PORT: '0', FLOOR_KEYS: JSON.stringify(floorKeys) }, process.execPath, [], true);
    const floorProbe = probesOf(floor);
    const allowed = [JSON.stringify({ capability: CAPABILITY, arguments: { amount: 250, currency: 'USD' } })];
    const violating = [JSON.stringify({ capability: CAPABILITY, arguments: { amount: 5000, currency: 'GBP' } })];
    const batch = [JSON.stringify({ requests: Array.from({ length: BATCH_SIZE }, (_, i) => ({ id: `call-${i}`, capability: CAPABILITY, arguments: { amount: 250 + i, currency: 'USD' } })) })];
    const url = discovery.default_location;
    const batchUrl = `${discovery.issuer}${discovery.endpoints.batch_execute}`;
    // The same execute path on another agentgate of the run (the tokens' audience stays the first's).
    const urlOn = (server: StartedServer) => { const other = new URL(url); other.port = String(server.port); return other.href; };
    const artefact = SCENARIOS.has('preview') ? new Uint8Array(readFileSync(PREVIEW_ARTEFACT_PATH)) : undefined;
    if (artefact) {
      const streamKey = keyLayout(prefix).decisionStream;
      const templates = await recordTemplates(redis, streamKey, url, agents, allowed[0]!, violating[0]!);
      const startedAtMs = performance.now();
      await fillDecisionStream(redis, streamKey, templates, PREVIEW_DECISIONS, STREAM_MAX_RECORDS);
      process.stdout.write(`Decision stream filled with ${PREVIEW_DECISIONS.toLocaleString('en-US')} copies of records the server wrote (${FILL_MIX}) in ${((performance.now() - startedAtMs) / 1000).toFixed(1)} s; ${(await redis.xlen(streamKey)).toLocaleString('en-US')} records stored.\n\n`);
    }
    // Every agentgate serves some untimed executes first, so none meets its first timed window
    // cold: the allowed window and its unrecorded and all-recorded twins compare warm processes.
    for (const server of gates) await warmUp(urlOn(server), CONCURRENCIES[0]!, allowed[0]!, tokensFor(agents, url, TOKENS_PER_SECOND, 0, WARM_UP_SECONDS));
    for (const connections of CONCURRENCIES) {
      // The baseline shares nothing with the servers the rounds compare, so it runs once per
      // concurrency, at the start of round 1, for the ratio-to-baseline column.
      const baselineRow = await drive(`baseline: bare Express JSON POST [Node ${process.versions.node.split('.')[0]}]`, `http://127.0.0.1:${baseline.port}/capability/execute`, connections, 1, allowed, ['unused'], baselineProbe);
      for (let round = 1; round <= ROUNDS; round++) {
        const results: Measured[] = round === 1 ? [baselineRow] : [];
        const thisRound: Round = { runtime, connections, round, results };
        // Each window signs its own tokens just before it starts (tokensFor): no round replays
        // another's, and none is near its expiry when it is sent.
        results.push(await drive(`floor: bare Express JSON POST + one Ed25519 verification (${FLOOR_VERIFIER}) [Node ${process.versions.node.split('.')[0]}]`, `http://127.0.0.1:${floor.port}/capability/execute`, connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), floorProbe));
        if (SCENARIOS.has('allowed')) results.push(await drive(label(ALLOWED_SCENARIO), url, connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
        if (unrecorded) results.push(await drive(label(UNRECORDED_SCENARIO), urlOn(unrecorded), connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), probesOf(unrecorded)));
        if (allRecorded) results.push(await drive(label(ALL_RECORDED_SCENARIO), urlOn(allRecorded), connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), probesOf(allRecorded)));
        if (SCENARIOS.has('violated')) results.push(await drive(label('execute: constraint violated (403 expected)'), url, connections, round, violating, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
        if (SCENARIOS.has('replay')) results.push(await drive(label('execute: allowed with 5% replays (401 expected)'), url, connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND, 0.05), gateProbe));
        if (SCENARIOS.has('batch')) {
          // A batch answers 200 whatever its items did, so one is checked here before the window.
          const sample = await post(batchUrl, tokensFor(agents, url, 1)[0]!, JSON.parse(batch[0]!));
          if (sample.status !== 200 || !sample.json.responses.every((r: { status: string }) => r.status === 'completed')) {
            throw new Error(`batch sanity check failed: ${JSON.stringify(sample)}`);
          }
          results.push(await drive(label(BATCH_SCENARIO), batchUrl, connections, round, batch, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
        }
        if (artefact) {
          const { row, run } = await driveWithPreview(label(PREVIEW_SCENARIO), url, connections, round, allowed, tokensFor(agents, url, TOKENS_PER_SECOND, 0, PREVIEW_WINDOW_SECONDS), gateProbe, base, artefact);
          results.push(row);
          thisRound.preview = run;
        }
        rounds.push(thisRound);
      }
    }
  } finally {
    // Requests still in flight may write keys until the processes have exited; delete after that.
    floor?.child.kill('SIGTERM');
    await Promise.all(gates.map((server) => {
      const exited = new Promise((resolve) => server.child.once('exit', resolve));
      server.child.kill('SIGTERM');
      return exited;
    }));
    await deletePrefix(redisUrl, prefix).catch(() => {});
  }
  return rounds;
}

/** Drives a server for WARM_UP_SECONDS without measuring anything; the answers are not looked at. */
async function warmUp(url: string, connections: number, body: string, tokens: string[]): Promise<void> {
  let next = 0;
  await autocannon({
    url, connections, duration: WARM_UP_SECONDS,
    requests: [{ method: 'POST', setupRequest: (request) => ({ ...request, headers: { 'content-type': 'application/json', authorization: `Bearer ${tokens[next++ % tokens.length]}` }, body }) }],
  });
}

/**
 * One real record of each kind to copy: sequential executes, allowed and refused in turn, until
 * the server has stored a recorded one of each (a grants decision was recorded when the agents
 * were provisioned). Bounded by TEMPLATE_REQUESTS_MAX; the stream is looked at every 50 requests,
 * and each execute carries the records the ones before it queued.
 */
async function recordTemplates(redis: Redis, streamKey: string, url: string, agents: BenchAgent[], allowedBody: string, violatingBody: string): Promise<RecordTemplates> {
  const tokens = presign(agents, TEMPLATE_REQUESTS_MAX, url);
  let found: Partial<RecordTemplates> = {};
  for (let i = 0; i < TEMPLATE_REQUESTS_MAX; i++) {
    await post(url, tokens[i]!, JSON.parse(i % 2 === 0 ? allowedBody : violatingBody));
    if (i % 50 !== 49) continue;
    found = await findTemplates(redis, streamKey, 1000);
    if (found.allowedExecute && found.refusedExecute && found.grants) return found as RecordTemplates;
  }
  const missing = (['allowedExecute', 'refusedExecute', 'grants'] as const).filter((kind) => !found[kind]);
  throw new Error(`after ${TEMPLATE_REQUESTS_MAX} executes the decision stream holds no ${missing.join(' and no ')} record to copy (is DECISION_LOG_SAMPLE 0?)`);
}

/**
 * The preview scenario's window: allowed executes for PREVIEW_WINDOW_SECONDS, and one preview of
 * PREVIEW_DECISIONS recorded decisions sent PREVIEW_START_AFTER_SECONDS into it. The window's row
 * is measured as any other; the run says what the preview answered and how execute's latency
 * differed while it ran.
 */
async function driveWithPreview(scenario: string, url: string, connections: number, round: number, bodies: string[], tokens: string[], probe: Probes, base: string, artefact: Uint8Array): Promise<{ row: Measured; run: PreviewRun }> {
  const responses = new ResponseLog();
  let timed: Awaited<ReturnType<typeof timedPreview>> | undefined;
  let loadStartedAtMs = 0;
  const extras: WindowExtras = {
    durationSeconds: PREVIEW_WINDOW_SECONDS,
    alongside: async (instance) => {
      loadStartedAtMs = performance.now();
      responses.listenTo(instance);
      await new Promise((resolve) => setTimeout(resolve, PREVIEW_START_AFTER_SECONDS * 1000));
      timed = await timedPreview(base, ADMIN_TOKEN, artefact, PREVIEW_DECISIONS, PREVIEW_REQUEST_TIMEOUT_MS);
    },
  };
  const row = await drive(scenario, url, connections, round, bodies, tokens, probe, extras);
  const { outcome, startedAtMs, endedAtMs } = timed!;
  const split = responses.split(startedAtMs, endedAtMs);
  return {
    row,
    run: {
      windowSeconds: PREVIEW_WINDOW_SECONDS,
      preview: { ...outcome, startedAfterSeconds: Math.round((startedAtMs - loadStartedAtMs) / 10) / 100, withinWindow: endedAtMs <= extras.loadEndedAtMs! },
      executeDuringPreview: split.during,
      executeOutsidePreview: split.outside,
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** The median and range of per-round values; null when no round has a value. */
function spreadOf(perRound: (number | null)[]): Spread | null {
  const values = perRound.filter((v): v is number => v !== null && Number.isFinite(v));
  if (values.length === 0) return null;
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), perRound };
}

/** `a / b`, or null when it has no meaning (a missing value or a zero floor). */
function ratio(a: number | null, b: number | null): number | null {
  return a === null || b === null || b === 0 ? null : a / b;
}

const isFloor = (row: Measured) => row.scenario.startsWith('floor:');
const isBaseline = (row: Measured) => row.scenario.startsWith('baseline:');
/** The scenario's row in a round, by its label without the runtime. */
const rowOf = (round: Round, scenario: string) => round.results.find((row) => row.scenario.startsWith(`${scenario} [`));
const isAllowedSingle = (row: Measured) => row.scenario.startsWith(`${ALLOWED_SCENARIO} [`);

/**
 * The floor and each execute scenario over the rounds of one runtime and concurrency. Each round's
 * ratio is the scenario's value over the floor's value of that same round; the median and the
 * spread are then taken over those ratios, not over the raw values.
 */
function summarize(rounds: Round[]): ScenarioSummary[] {
  const summaries: ScenarioSummary[] = [];
  for (const group of groupsOf(rounds)) {
    const first = group[0]!;
    const scenarios = first.results.filter((row) => !isBaseline(row)).map((row) => row.scenario);
    for (const scenario of scenarios) {
      const pairs = group.map((round) => ({ row: round.results.find((r) => r.scenario === scenario), floor: round.results.find(isFloor), single: round.results.find(isAllowedSingle) }));
      const rows = pairs.map((p) => p.row).filter((row): row is Measured => row !== undefined);
      const summary: ScenarioSummary = {
        runtime: first.runtime,
        scenario,
        connections: first.connections,
        rounds: rows.length,
        requestsPerSecond: spreadOf(rows.map((r) => r.requestsPerSecond))!,
        latencyMsP99: spreadOf(rows.map((r) => r.latencyMsP99))!,
        throughputRatioToFloor: spreadOf(pairs.map((p) => ratio(p.row?.requestsPerSecond ?? null, p.floor?.requestsPerSecond ?? null)))!,
        p99RatioToFloor: spreadOf(pairs.map((p) => ratio(p.row?.latencyMsP99 ?? null, p.floor?.latencyMsP99 ?? null))),
        allocatedBytesPerRequest: spreadOf(rows.map((r) => r.allocatedBytesPerRequest)),
        allocationRatioToFloor: spreadOf(pairs.map((p) => ratio(p.row?.allocatedBytesPerRequest ?? null, p.floor?.allocatedBytesPerRequest ?? null))),
      };
      if (scenario.startsWith(BATCH_SCENARIO)) {
        summary.executesPerSecond = spreadOf(rows.map((r) => r.requestsPerSecond * BATCH_SIZE))!;
        const toSingle = spreadOf(pairs.map((p) => ratio(p.row ? p.row.requestsPerSecond * BATCH_SIZE : null, p.single?.requestsPerSecond ?? null)));
        if (toSingle) summary.executesRatioToSingle = toSingle;
      }
      summaries.push(summary);
    }
  }
  return summaries;
}

/** The rounds by runtime and concurrency, in the order run. */
function groupsOf(rounds: Round[]): Round[][] {
  const groups = new Map<string, Round[]>();
  for (const round of rounds) {
    const key = `${round.runtime} ${round.connections}`;
    groups.set(key, [...(groups.get(key) ?? []), round]);
  }
  return [...groups.values()];
}

/**
 * What recording costs execute, per runtime and concurrency, where the allowed and allowed-
 * unrecorded scenarios both ran: each round's difference is taken within that round (the three
 * windows run one after the other), then the median and spread over the rounds.
 */
function recordingCosts(rounds: Round[]): RecordingCost[] {
  const costs: RecordingCost[] = [];
  for (const group of groupsOf(rounds)) {
    const rows = group.map((round) => ({ atSample: rowOf(round, ALLOWED_SCENARIO), unrecorded: rowOf(round, UNRECORDED_SCENARIO), allRecorded: rowOf(round, ALL_RECORDED_SCENARIO) }));
    if (rows.some((r) => !r.atSample || !r.unrecorded)) continue;
    const cpu = (row: Measured | undefined, of: 'server' | 'redis') => (row ? row.cpuPerRequestUs[of] : null);
    const perRecordedDecision = rows.map((r) => (r.allRecorded ? r.allRecorded.cpuPerRequestUs.server - r.unrecorded!.cpuPerRequestUs.server : null));
    const withAllRecorded = rows.every((r) => r.allRecorded);
    costs.push({
      runtime: group[0]!.runtime,
      connections: group[0]!.connections,
      rounds: group.length,
      sample: PRIMARY_SAMPLE,
      serverCpuUsPerRequest: {
        atSample: spreadOf(rows.map((r) => cpu(r.atSample, 'server')))!, unrecorded: spreadOf(rows.map((r) => cpu(r.unrecorded, 'server')))!,
        allRecorded: withAllRecorded ? spreadOf(rows.map((r) => cpu(r.allRecorded, 'server'))) : null,
      },
      redisCpuUsPerRequest: {
        atSample: spreadOf(rows.map((r) => cpu(r.atSample, 'redis')))!, unrecorded: spreadOf(rows.map((r) => cpu(r.unrecorded, 'redis')))!,
        allRecorded: withAllRecorded ? spreadOf(rows.map((r) => cpu(r.allRecorded, 'redis'))) : null,
      },
      costPercentAtSample: spreadOf(rows.map((r) => (100 * (r.atSample!.cpuPerRequestUs.server - r.unrecorded!.cpuPerRequestUs.server)) / r.atSample!.cpuPerRequestUs.server))!,
      serverCpuUsPerRecordedDecision: withAllRecorded ? spreadOf(perRecordedDecision) : null,
      derivedCostPercentAtSample: withAllRecorded ? spreadOf(rows.map((r, i) => (100 * PRIMARY_SAMPLE * perRecordedDecision[i]!) / r.atSample!.cpuPerRequestUs.server)) : null,
      targetPercent: RECORDING_COST_TARGET_PERCENT,
    });
  }
  return costs;
}

/** The previews under load, per runtime and concurrency, each compared with the allowed window of its own round. */
function previewSummaries(rounds: Round[]): PreviewSummary[] {
  const summaries: PreviewSummary[] = [];
  for (const group of groupsOf(rounds)) {
    const runs = group.filter((round) => round.preview !== undefined);
    if (runs.length === 0) continue;
    const pairs = runs.map((round) => ({ run: round.preview!, row: rowOf(round, PREVIEW_SCENARIO), allowed: rowOf(round, ALLOWED_SCENARIO) }));
    summaries.push({
      runtime: group[0]!.runtime,
      connections: group[0]!.connections,
      rounds: runs.length,
      requested: PREVIEW_DECISIONS,
      evaluated: pairs.map((p) => p.run.preview.evaluated),
      errors: pairs.map((p) => p.run.preview.errors),
      statuses: pairs.map((p) => p.run.preview.status),
      withinWindow: pairs.map((p) => p.run.preview.withinWindow),
      seconds: spreadOf(pairs.map((p) => p.run.preview.seconds))!,
      targetSeconds: PREVIEW_TARGET_SECONDS,
      p99DuringOverOutside: spreadOf(pairs.map((p) => ratio(p.run.executeDuringPreview.latencyMsP99, p.run.executeOutsidePreview.latencyMsP99))),
      p99OverAllowedWindow: spreadOf(pairs.map((p) => ratio(p.row?.latencyMsP99 ?? null, p.allowed?.latencyMsP99 ?? null))),
      requestsPerSecondOverAllowedWindow: spreadOf(pairs.map((p) => ratio(p.row?.requestsPerSecond ?? null, p.allowed?.requestsPerSecond ?? null))),
    });
  }
  return summaries;
}

/** `median [min–max]`, each with `digits` decimals (thousands separated when there are none). */
function formatSpread(spread: Spread | null, digits: number): string {
  if (spread === null) return 'n/a';
  const format = (value: number) => (digits === 0 ? Math.round(value).toLocaleString('en-US') : value.toFixed(digits));
  return `${format(spread.median)} [${format(spread.min)}–${format(spread.max)}]`;
}

/** Each round's value, with `digits` decimals. */
function perRoundOf(spread: Spread | null, digits: number): string {
  return spread === null ? 'n/a' : spread.perRound.map((v) => (v === null ? 'n/a' : v.toFixed(digits))).join(', ');
}

/** The recording cost in words, with its arithmetic. */
function recordingCostLines(c: RecordingCost): string[] {
  const server = c.serverCpuUsPerRequest;
  const lines = [
    `Recording's cost at ${c.connections} connections [Node ${c.runtime}], ${c.rounds} round(s). Server CPU µs per allowed execute, per round: `
      + `recorded at DECISION_LOG_SAMPLE=${c.sample}: ${perRoundOf(server.atSample, 0)}; nothing recorded: ${perRoundOf(server.unrecorded, 0)}`
      + `${server.allRecorded ? `; every decision recorded: ${perRoundOf(server.allRecorded, 0)}` : ''}. Redis CPU µs per request, the same: `
      + `${perRoundOf(c.redisCpuUsPerRequest.atSample, 0)}; ${perRoundOf(c.redisCpuUsPerRequest.unrecorded, 0)}${c.redisCpuUsPerRequest.allRecorded ? `; ${perRoundOf(c.redisCpuUsPerRequest.allRecorded, 0)}` : ''}.`,
    `  Measured at ${c.sample}: (recorded − nothing recorded) ÷ recorded = ${formatSpread(c.costPercentAtSample, 1)} % of execute's server CPU per request `
      + `(per round ${perRoundOf(c.costPercentAtSample, 1)}; target ≤ ${c.targetPercent} %).`,
  ];
  if (c.serverCpuUsPerRecordedDecision && c.derivedCostPercentAtSample) {
    const perDecision = c.serverCpuUsPerRecordedDecision.median;
    lines.push(`  Every decision recorded − nothing recorded = ${formatSpread(c.serverCpuUsPerRecordedDecision, 1)} µs per recorded decision; `
      + `at ${c.sample} that is ${c.sample} × ${perDecision.toFixed(1)} = ${(c.sample * perDecision).toFixed(2)} µs per request, `
      + `${formatSpread(c.derivedCostPercentAtSample, 2)} % of execute's server CPU (target ≤ ${c.targetPercent} %).`);
  }
  return lines;
}

/** The previews under load in words. */
function previewLines(p: PreviewSummary, rounds: Round[]): string[] {
  const runs = rounds.filter((r) => r.runtime === p.runtime && r.connections === p.connections && r.preview).map((r) => r.preview!);
  const list = (values: (number | boolean | null)[]) => values.map((v) => (v === null ? 'n/a' : typeof v === 'boolean' ? (v ? 'yes' : 'no') : v.toLocaleString('en-US'))).join(', ');
  const latency = (pick: (run: PreviewRun) => LatencyOf, of: 'latencyMsP50' | 'latencyMsP99') => runs.map((run) => pick(run)[of] ?? 'n/a').join(', ');
  const failures = runs.filter((run) => run.preview.status !== 200).map((run) => `${run.preview.status}: ${run.preview.message}`);
  return [
    `Preview under load at ${p.connections} connections [Node ${p.runtime}], ${p.rounds} round(s): ${p.requested.toLocaleString('en-US')} recorded decisions asked for, `
      + `status ${list(p.statuses)}, evaluated ${list(p.evaluated)}, errors ${list(p.errors)}; took ${formatSpread(p.seconds, 1)} s (per round ${perRoundOf(p.seconds, 1)}; target < ${p.targetSeconds} s), `
      + `sent ${PREVIEW_START_AFTER_SECONDS} s into a ${PREVIEW_WINDOW_SECONDS} s window of allowed executes; answered within the window: ${list(p.withinWindow)}.`,
    `  Execute in that window, per round, requests that completed while the preview ran / the rest: `
      + `p50 ${latency((r) => r.executeDuringPreview, 'latencyMsP50')} / ${latency((r) => r.executeOutsidePreview, 'latencyMsP50')} ms, `
      + `p99 ${latency((r) => r.executeDuringPreview, 'latencyMsP99')} / ${latency((r) => r.executeOutsidePreview, 'latencyMsP99')} ms `
      + `(${runs.map((r) => r.executeDuringPreview.requests).join(', ')} / ${runs.map((r) => r.executeOutsidePreview.requests).join(', ')} requests); p99 ratio ${formatSpread(p.p99DuringOverOutside, 2)}.`,
    `  The whole window against the allowed window of the same round (no preview): p99 ${formatSpread(p.p99OverAllowedWindow, 2)} ×, req/s ${formatSpread(p.requestsPerSecondOverAllowedWindow, 2)} ×.`,
    ...(failures.length > 0 ? [`  Failed previews: ${failures.join('; ')}.`] : []),
  ];
}

async function report(rounds: Round[], wallSeconds: number): Promise<void> {
  const results = rounds.flatMap((round) => round.results);
  const summary = summarize(rounds);
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
  const lines = [
    `Machine: ${machine}. Duration ${DURATION_SECONDS} s per row; ${ROUNDS} round(s) at each concurrency; load generator (autocannon) on the same machine. Wall time ${Math.round(wallSeconds)} s.`,
    '',
    '| scenario | connections | req/s | p50 ms | p99 ms | 2xx | non-2xx | errors | ratio to baseline | ratio to floor | CPU µs/req: server, Redis, generator | machine busy % | round | heap allocated bytes/req |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const round of rounds) {
    for (const r of round.results) {
      // Ratios are against the floor of the same round and the baseline of the same concurrency
      // (measured once, in round 1).
      const baselineRow = rounds.find((other) => other.runtime === round.runtime && other.connections === round.connections && other.round === 1)?.results.find(isBaseline);
      const floorRow = round.results.find(isFloor);
      const toBaseline = baselineRow ? (r.requestsPerSecond / baselineRow.requestsPerSecond).toFixed(2) : '';
      const toFloor = isBaseline(r) || !floorRow ? '' : (r.requestsPerSecond / floorRow.requestsPerSecond).toFixed(2);
      lines.push(`| ${r.scenario} | ${r.connections} | ${r.requestsPerSecond} | ${r.latencyMsP50} | ${r.latencyMsP99} | ${r.ok2xx} | ${r.non2xx} | ${r.errors + r.timeouts} | ${toBaseline} | ${toFloor} | ${r.cpuPerRequestUs.server}, ${r.cpuPerRequestUs.redis}, ${r.cpuPerRequestUs.generator} | ${r.machineBusyPercent} | ${r.round} | ${r.allocatedBytesPerRequest ?? 'n/a'} |`);
    }
  }
  lines.push(
    '',
    `Summary: the median over ${ROUNDS} round(s) at each concurrency, [lowest–highest round]. Every ratio is the scenario's value over the floor's in the same round`,
    `(req/s: higher is better; p99 and allocation: lower is better; the allocation target is execute ≤ 2 × the floor).`,
    '',
    '| scenario, over the rounds | connections | rounds | req/s | p99 ms | req/s ÷ floor | p99 ÷ floor | heap allocated bytes/req | allocation ÷ floor |',
    '|---|---|---|---|---|---|---|---|---|',
  );
  for (const s of summary) {
    lines.push(`| ${s.scenario} | ${s.connections} | ${s.rounds} | ${formatSpread(s.requestsPerSecond, 0)} | ${formatSpread(s.latencyMsP99, 0)} | ${formatSpread(s.throughputRatioToFloor, 2)} | ${formatSpread(s.p99RatioToFloor, 2)} | ${formatSpread(s.allocatedBytesPerRequest, 0)} | ${formatSpread(s.allocationRatioToFloor, 2)} |`);
  }
  // Batches deliver BATCH_SIZE executes per request: compared with the single execute of the same round.
  for (const s of summary) {
    if (!s.executesPerSecond) continue;
    const single = summary.find((other) => other.runtime === s.runtime && other.connections === s.connections && other.scenario.startsWith(`${ALLOWED_SCENARIO} [`));
    const medianOf = ROUNDS > 1 ? `, median of ${s.rounds} rounds` : '';
    const toSingle = s.executesRatioToSingle && single ? `, ${formatSpread(s.executesRatioToSingle, 2)} × single execute of the same round (${Math.round(single.requestsPerSecond.median)}/s)` : '';
    lines.push('', `Batch of ${BATCH_SIZE} at ${s.connections} connections${medianOf}: ${Math.round(s.executesPerSecond.median)} executes/s${toSingle}.`);
  }
  const costs = recordingCosts(rounds);
  for (const c of costs) lines.push('', ...recordingCostLines(c));
  const previews = previewSummaries(rounds);
  for (const p of previews) lines.push('', ...previewLines(p, rounds));
  process.stdout.write(`${lines.join('\n')}\n`);
  const settings = {
    durationSeconds: DURATION_SECONDS, connections: CONCURRENCIES, rounds: ROUNDS, scenarios: EXECUTE_SCENARIOS, runtimes: RUNTIMES, workers: WORKERS, tokensPerSecond: TOKENS_PER_SECOND,
    decisionLogSample: PRIMARY_SAMPLE, previewWindowSeconds: PREVIEW_WINDOW_SECONDS, previewDecisions: PREVIEW_DECISIONS, previewStartAfterSeconds: PREVIEW_START_AFTER_SECONDS, previewArtefact: PREVIEW_ARTEFACT_PATH,
    wallSeconds: Math.round(wallSeconds),
  };
  // `machine` and `results` (every row, in the order run) keep the shape older readers know; the
  // rounds (each with its preview, if one ran), the summary, the recording costs and the previews'
  // summary are added beside them.
  await mkdir(path.dirname(RESULTS_FILE), { recursive: true });
  await writeFile(RESULTS_FILE, JSON.stringify({ machine, results, settings, rounds, summary, recordingCost: costs, previews }, null, 2));
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
