// `npm run bench`: starts Redis-backed agentgate, a bare Express baseline and the floor (bare Express
// plus one Ed25519 verification per request, bench/floor-server.ts) on loopback, provisions agents
// with constrained grants, and drives POST /capability/execute with a fresh, pre-signed agent JWT per
// request at several concurrencies. Reports req/s, p50/p99 latency, errors and the ratios
// execute/baseline and execute/floor measured in the same run, and what each request cost in CPU in
// the server, in Redis and in the load generator (from /proc and INFO cpu). Bounded: every run has a
// fixed duration.
//
// Settings (environment): BENCH_DURATION_SECONDS (10), BENCH_CONNECTIONS (16,64), BENCH_SCENARIOS
// (allowed,violated,replay), BENCH_RUNTIMES (24; 24,20 also runs the Node 20 build), BENCH_WORKERS
// (agentgate's WORKERS, 1), BENCH_PROFILE_DIR (run agentgate with --cpu-prof, profiles there; read
// them with `node bench/profile-summary.ts <file>`), BENCH_TOKENS_PER_SECOND (16000),
// BENCH_RESULTS_FILE (bench/results/latest.json, the results as JSON), BENCH_GATE_ENV (a JSON object
// of extra environment for agentgate, e.g. '{"METRICS_TOKEN":"..."}' to measure with metrics on).
import { spawn, type ChildProcess } from 'node:child_process';
import { createPublicKey, KeyObject, randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { hostJwt, newEd25519, type TestKey } from '../test/support/keys.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../test/support/redis.ts';
import { freePort } from '../test/support/net.ts';
import { loadSodium } from '../src/auth/ed25519-verify.ts';
import { presign, type BenchAgent } from './jwt.ts';

const DURATION_SECONDS = Number(process.env.BENCH_DURATION_SECONDS ?? 10);
const CONCURRENCIES = (process.env.BENCH_CONNECTIONS ?? '16,64').split(',').map(Number);
const AGENT_COUNT = 32;
/** Tokens signed per second of a timed window: above any rate this machine reaches, so none repeats. */
const TOKENS_PER_SECOND = Number(process.env.BENCH_TOKENS_PER_SECOND ?? 16_000);
const ADMIN_TOKEN = randomBytes(24).toString('hex');
const CAPABILITY = 'transfer_money';
/** Which execute scenarios run (all by default): allowed, violated, replay, batch. */
const SCENARIOS = new Set((process.env.BENCH_SCENARIOS ?? 'allowed,violated,replay,batch').split(',').map((s) => s.trim()));
/** Calls per request in the batch scenario. */
const BATCH_SIZE = 10;
const BATCH_SCENARIO = `execute: batch of ${BATCH_SIZE} allowed calls (${BATCH_SIZE} executes per request)`;
/** agentgate's worker processes (its WORKERS setting); 1 runs the single-process server. */
const WORKERS = Number(process.env.BENCH_WORKERS ?? 1);
/** Where the run's results are also written as JSON. */
const RESULTS_FILE = process.env.BENCH_RESULTS_FILE ?? 'bench/results/latest.json';
/** When set, agentgate runs with --cpu-prof and writes its profiles there. */
const PROFILE_DIR = process.env.BENCH_PROFILE_DIR;
/** Extra environment for agentgate (BENCH_GATE_ENV, a JSON object of strings); it wins over the bench's own settings. */
const GATE_ENV = parseGateEnv(process.env.BENCH_GATE_ENV);

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

/** What the three parts of a run cost in CPU, read before and after a timed window. */
interface CpuProbe {
  serverPid: number;
  redis: Redis;
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

function startProcess(script: string, env: Record<string, string>, node = process.execPath, nodeArgs: string[] = []): Promise<{ child: ChildProcess; port: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(node, [...nodeArgs, script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
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
          resolve({ child, port });
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

async function drive(scenario: string, url: string, connections: number, bodies: string[], tokens: string[], probe: CpuProbe): Promise<Measured> {
  let next = 0;
  const before = { server: processTreeCpuSeconds(probe.serverPid), redis: await redisCpuSeconds(probe.redis), generator: process.cpuUsage(), machine: machineCpuTicks() };
  const result = await autocannon({
    url,
    connections,
    duration: DURATION_SECONDS,
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
  });
  if (next > tokens.length && tokens.length > 1) process.stderr.write(`warning: ${scenario} used ${next} requests but only ${tokens.length} tokens were signed\n`);
  const generator = process.cpuUsage(before.generator);
  const machine = machineCpuTicks();
  const perRequestUs = (seconds: number) => Math.round((seconds * 1e6) / Math.max(1, result.requests.total));
  return {
    scenario,
    connections,
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
      server: perRequestUs(processTreeCpuSeconds(probe.serverPid) - before.server),
      redis: perRequestUs((await redisCpuSeconds(probe.redis)) - before.redis),
      generator: perRequestUs((generator.user + generator.system) / 1e6),
    },
    machineBusyPercent: Math.round((100 * (machine.busy - before.machine.busy)) / (machine.total - before.machine.total)),
  };
}

/** Enough tokens for the run at up to `ceilingPerSecond`; a 5% replay mix repeats earlier ones. */
function tokensFor(agents: BenchAgent[], aud: string, ceilingPerSecond: number, replayShare = 0): string[] {
  const fresh = presign(agents, ceilingPerSecond * DURATION_SECONDS, aud);
  if (replayShare === 0) return fresh;
  return fresh.map((token, i) => (i > 100 && i % Math.round(1 / replayShare) === 0 ? fresh[i - 50]! : token));
}

async function main(): Promise<void> {
  const redisUrl = await redisUrlForTests();
  const baseline = await startProcess('bench/baseline-server.ts', { PORT: '0' });
  const redis = new Redis(redisUrl, { commandTimeout: 5000, maxRetriesPerRequest: 1 });
  const results: Measured[] = [];
  try {
    for (const runtime of RUNTIMES) results.push(...(await benchRuntime(runtime, redisUrl, { pid: baseline.child.pid!, port: baseline.port }, redis)));
  } finally {
    baseline.child.kill('SIGTERM');
    redis.disconnect();
  }
  report(results);
}

async function benchRuntime(runtime: string, redisUrl: string, baseline: { pid: number; port: number }, redis: Redis): Promise<Measured[]> {
  const command = gateCommand(runtime);
  const nodeArgs = PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : [];
  // A throwaway prefix the test support may delete afterwards (it refuses any other).
  const prefix = uniquePrefix('bench');
  const gatePort = await freePort();
  const gate = await startProcess(command.script, {
    ...command.env,
    // The benchmark signs for the address it calls; the default issuer is a host name (localhost).
    PORT: String(gatePort), ISSUER: `http://127.0.0.1:${gatePort}`, REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, ADMIN_TOKEN, LOG_LEVEL: 'info',
    RATE_LIMIT_AGENT_PER_MINUTE: '10000000', RATE_LIMIT_HOST_PER_MINUTE: '10000000', WORKERS: String(WORKERS),
    ...GATE_ENV,
  }, command.node, nodeArgs);
  const base = `http://127.0.0.1:${gate.port}`;
  const results: Measured[] = [];
  const label = (s: string) => `${s} [Node ${runtime}${WORKERS > 1 ? `, ${WORKERS} workers` : ''}]`;
  const gateProbe = { serverPid: gate.child.pid!, redis };
  const baselineProbe = { serverPid: baseline.pid, redis };
  let floor: { child: ChildProcess; port: number } | undefined;
  try {
    // JWT audiences come from what the server advertises, as a real client's would.
    const discovery = await (await fetch(`${base}/.well-known/agent-configuration`)).json() as { issuer: string; default_location: string; endpoints: { batch_execute: string } };
    const agents = await provision(discovery.issuer);
    // The floor verifies with the same agents' keys, so it checks the very tokens execute gets.
    const floorKeys = Object.fromEntries(agents.map((a) => [a.id, createPublicKey(a.privateKey).export({ format: 'jwk' }).x]));
    floor = await startProcess('bench/floor-server.ts', { PORT: '0', FLOOR_KEYS: JSON.stringify(floorKeys) });
    const floorProbe = { serverPid: floor.child.pid!, redis };
    const allowed = [JSON.stringify({ capability: CAPABILITY, arguments: { amount: 250, currency: 'USD' } })];
    const violating = [JSON.stringify({ capability: CAPABILITY, arguments: { amount: 5000, currency: 'GBP' } })];
    const batch = [JSON.stringify({ requests: Array.from({ length: BATCH_SIZE }, (_, i) => ({ id: `call-${i}`, capability: CAPABILITY, arguments: { amount: 250 + i, currency: 'USD' } })) })];
    for (const connections of CONCURRENCIES) {
      results.push(await drive(`baseline: bare Express JSON POST [Node ${process.versions.node.split('.')[0]}]`, `http://127.0.0.1:${baseline.port}/capability/execute`, connections, allowed, ['unused'], baselineProbe));
      const url = discovery.default_location;
      results.push(await drive(`floor: bare Express JSON POST + one Ed25519 verification (${FLOOR_VERIFIER}) [Node ${process.versions.node.split('.')[0]}]`, `http://127.0.0.1:${floor.port}/capability/execute`, connections, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), floorProbe));
      if (SCENARIOS.has('allowed')) results.push(await drive(label('execute: allowed, constrained grant'), url, connections, allowed, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
      if (SCENARIOS.has('violated')) results.push(await drive(label('execute: constraint violated (403 expected)'), url, connections, violating, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
      if (SCENARIOS.has('replay')) results.push(await drive(label('execute: allowed with 5% replays (401 expected)'), url, connections, allowed, tokensFor(agents, url, TOKENS_PER_SECOND, 0.05), gateProbe));
      if (SCENARIOS.has('batch')) {
        const batchUrl = `${discovery.issuer}${discovery.endpoints.batch_execute}`;
        // A batch answers 200 whatever its items did, so one is checked here before the window.
        const sample = await post(batchUrl, tokensFor(agents, url, 1)[0]!, JSON.parse(batch[0]!));
        if (sample.status !== 200 || !sample.json.responses.every((r: { status: string }) => r.status === 'completed')) {
          throw new Error(`batch sanity check failed: ${JSON.stringify(sample)}`);
        }
        results.push(await drive(label(BATCH_SCENARIO), batchUrl, connections, batch, tokensFor(agents, url, TOKENS_PER_SECOND), gateProbe));
      }
    }
  } finally {
    // Requests still in flight may write keys until the process has exited; delete after that.
    floor?.child.kill('SIGTERM');
    const exited = new Promise((resolve) => gate.child.once('exit', resolve));
    gate.child.kill('SIGTERM');
    await exited;
    await deletePrefix(redisUrl, prefix).catch(() => {});
  }
  return results;
}

function report(results: Measured[]): void {
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
  const lines = [
    `Machine: ${machine}. Duration ${DURATION_SECONDS} s per row; load generator (autocannon) on the same machine.`,
    '',
    '| scenario | connections | req/s | p50 ms | p99 ms | 2xx | non-2xx | errors | ratio to baseline | ratio to floor | CPU µs/req: server, Redis, generator | machine busy % |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const [index, r] of results.entries()) {
    // Ratios are against the baseline and the floor measured just before, at the same concurrency.
    const ratioTo = (kind: string) => {
      const reference = results.slice(0, index + 1).reverse().find((b) => b.connections === r.connections && b.scenario.startsWith(kind));
      return reference ? (r.requestsPerSecond / reference.requestsPerSecond).toFixed(2) : '';
    };
    const toFloor = r.scenario.startsWith('baseline') ? '' : ratioTo('floor:');
    lines.push(`| ${r.scenario} | ${r.connections} | ${r.requestsPerSecond} | ${r.latencyMsP50} | ${r.latencyMsP99} | ${r.ok2xx} | ${r.non2xx} | ${r.errors + r.timeouts} | ${ratioTo('baseline')} | ${toFloor} | ${r.cpuPerRequestUs.server}, ${r.cpuPerRequestUs.redis}, ${r.cpuPerRequestUs.generator} | ${r.machineBusyPercent} |`);
  }
  // Batches deliver BATCH_SIZE executes per request: compared with single executes at the same concurrency.
  for (const r of results.filter((row) => row.scenario.startsWith(BATCH_SCENARIO))) {
    const single = results.find((row) => row.connections === r.connections && row.scenario.startsWith('execute: allowed, constrained grant'));
    const executesPerSecond = r.requestsPerSecond * BATCH_SIZE;
    lines.push('', `Batch of ${BATCH_SIZE} at ${r.connections} connections: ${executesPerSecond} executes/s${single ? `, ${(executesPerSecond / single.requestsPerSecond).toFixed(2)} × single execute (${single.requestsPerSecond}/s)` : ''}.`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  void mkdir(path.dirname(RESULTS_FILE), { recursive: true }).then(() => writeFile(RESULTS_FILE, JSON.stringify({ machine, results }, null, 2)));
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
