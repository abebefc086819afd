// `npm run bench:plugins`: how much one agent whose plugin calls always overrun PLUGIN_BUDGET_MS
// slows another agent's plugin executes (SECURITY.md, "One agent cannot starve the others through
// plugin operators"). Starts agentgate (`node src/main.ts`, Redis-backed, default settings: a 50 ms
// budget, 2 plugin workers, 600 executes per agent per minute, 60 s trips) with the busy fixture
// plugin (test/fixtures/plugin-isolation/busy.mjs), registers two autonomous agents from self-made
// host keys, and measures the victim's execute latency, one call every 100 ms (its own full rate):
// first idle, then while the attacker sends an always-overrunning call at its full rate limit. It
// prints both medians and their ratio (the goal is under 2), the victim's non-200 answers, the
// attacker's answers and the worker kills (plugin timeouts, from /metrics).
//
// A second configuration repeats the attack with PLUGIN_TRIP_SECONDS=1, the shortest trip: the
// attacker then costs a worker every second, which measures the pool itself (the standby worker,
// one batch per agent, round-robin) rather than the trip. A third gives the attacker the costliest
// `regex` pattern plugins/regex.ts admits (500 instructions, the finding's shape with a smaller
// count) and a 1024-character argument that keeps every instruction busy: it should never overrun. BENCH_PLUGIN_SAMPLES sets the victim's
// calls per phase (default 100). BENCH_GATE_DIR runs the server from another checkout of agentgate
// (an export of an older commit, say), to measure the same attack before a change.
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { http } from '../test/support/client.ts';
import { agentJwt, hostJwt, newEd25519, type TestKey } from '../test/support/keys.ts';
import { freePort, startupLine } from '../test/support/net.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../test/support/redis.ts';

const SAMPLES = Number(process.env.BENCH_PLUGIN_SAMPLES ?? 100);
/** The default RATE_LIMIT_AGENT_PER_MINUTE: both agents send at exactly this rate. */
const RATE_PER_MINUTE = 600;
const INTERVAL_MS = 60_000 / RATE_PER_MINUTE;
const METRICS_TOKEN = 'bench-metrics-token-0123456789';
const ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef';
/** Far past the 50 ms budget: every attacking call overruns. */
const ATTACK_OPERAND_MS = 5_000;

interface Agent {
  id: string;
  key: TestKey;
  host: TestKey;
}

interface Server {
  child: ChildProcess;
  base: string;
  executeUrl: string;
  prefix: string;
}

async function startServer(redisUrl: string, pluginsDir: string, capabilitiesFile: string, env: Record<string, string>): Promise<Server> {
  const port = await freePort();
  const prefix = uniquePrefix('bench');
  const child = spawn(process.execPath, ['src/main.ts'], {
    cwd: process.env.BENCH_GATE_DIR ?? process.cwd(),
    env: {
      ...process.env, PORT: String(port), ISSUER: `http://127.0.0.1:${port}`, REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, ADMIN_TOKEN,
      METRICS_TOKEN, LOG_LEVEL: 'info', PLUGINS_DIR: pluginsDir, CAPABILITIES_FILE: capabilitiesFile, ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await startupLine(child);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  const base = `http://127.0.0.1:${port}`;
  const discovery = (await http('GET', `${base}/.well-known/agent-configuration`)).json as { default_location: string };
  return { child, base, executeUrl: discovery.default_location, prefix };
}

async function stopServer(server: Server, redisUrl: string): Promise<void> {
  const exited = new Promise((r) => server.child.once('exit', r));
  server.child.kill('SIGTERM');
  await exited;
  await deletePrefix(redisUrl, server.prefix).catch(() => {});
}

/** An autonomous agent of a brand-new host key holding `echo` with this constraint on `x`. */
async function register(server: Server, constraint: Record<string, unknown>): Promise<Agent> {
  const host = await newEd25519();
  const key = await newEd25519();
  const res = await http('POST', `${server.base}/agent/register`, {
    token: await hostJwt(host, `${server.base}`, { agentKey: key }),
    json: { name: 'bench-agent', mode: 'autonomous', capabilities: [{ name: 'echo', constraints: { x: constraint } }] },
  });
  if (res.status !== 200 || res.json.status !== 'active') throw new Error(`registration failed: ${res.status} ${res.text}`);
  return { id: res.json.agent_id, key, host };
}

/** One execute, its answer's status and the milliseconds of the HTTP exchange (the JWT is signed before). */
async function execute(server: Server, agent: Agent, x: string): Promise<{ status: number; ms: number }> {
  const token = await agentJwt(agent, server.executeUrl);
  const startedMs = performance.now();
  const res = await http('POST', server.executeUrl, { token, json: { capability: 'echo', arguments: { x } } });
  return { status: res.status, ms: performance.now() - startedMs };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** The victim's calls, one every INTERVAL_MS (sequential: the next waits for the previous answer). */
async function victimPhase(server: Server, victim: Agent, label: string): Promise<Array<{ status: number; ms: number }>> {
  const results: Array<{ status: number; ms: number }> = [];
  for (let i = 0; i < SAMPLES; i++) {
    const startedMs = performance.now();
    results.push(await execute(server, victim, `${label}-${i}`));
    await sleep(INTERVAL_MS - (performance.now() - startedMs));
  }
  return results;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/** Plugin failures by kind (all operators), from /metrics. */
async function pluginFailures(server: Server): Promise<Record<string, number>> {
  const res = await http('GET', `${server.base}/metrics`, { token: METRICS_TOKEN });
  const counts: Record<string, number> = {};
  for (const line of res.text.split('\n')) {
    if (!line.startsWith('agentgate_plugin_operator_failures_total{')) continue;
    const kind = /kind="([a-z_]+)"/.exec(line)?.[1];
    if (kind) counts[kind] = (counts[kind] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return counts;
}

const countBy = (values: readonly number[]) => Object.entries(values.reduce<Record<string, number>>((acc, v) => ({ ...acc, [v]: (acc[v] ?? 0) + 1 }), {}))
  .map(([status, n]) => `${n} × ${status}`).join(', ');

interface Attack {
  constraint: Record<string, unknown>;
  argument: (i: number) => string;
}

/** The busy fixture far past the budget: every call overruns. */
const OVERRUNNING: Attack = { constraint: { busy: ATTACK_OPERAND_MS }, argument: (i) => `attack-${i}` };
/** The costliest pattern the regex operator admits, on an argument that keeps all of it busy. */
const COSTLIEST_REGEX: Attack = { constraint: { regex: '(?i)(?:[a-z]|[0-9]|_){1,249}@' }, argument: () => `${'a'.repeat(1023)}@` };

async function measure(redisUrl: string, pluginsDir: string, capabilitiesFile: string, label: string, env: Record<string, string>, attack: Attack): Promise<string> {
  const server = await startServer(redisUrl, pluginsDir, capabilitiesFile, env);
  try {
    const attacker = await register(server, attack.constraint);
    const victim = await register(server, { busy: 0 });
    for (let i = 0; i < 10; i++) await execute(server, victim, `warm-${i}`);
    const idle = await victimPhase(server, victim, 'idle');

    // The attacker fires one call every INTERVAL_MS without waiting for answers, for as long as the victim measures.
    let attacking = true;
    const attacks: Array<Promise<{ status: number; ms: number }>> = [];
    const attackLoop = (async () => {
      for (let i = 0; attacking && i < 10 * SAMPLES; i++) {
        attacks.push(execute(server, attacker, attack.argument(i)));
        await sleep(INTERVAL_MS);
      }
    })();
    const underAttack = await victimPhase(server, victim, 'attack');
    attacking = false;
    await attackLoop;
    const attackAnswers = await Promise.all(attacks);
    const failures = await pluginFailures(server);

    const idleMedianMs = percentile(idle.map((r) => r.ms), 0.5);
    const attackMedianMs = percentile(underAttack.map((r) => r.ms), 0.5);
    const victimNon200 = [...idle, ...underAttack].filter((r) => r.status !== 200).map((r) => r.status);
    return `| ${label} | ${idleMedianMs.toFixed(2)} | ${percentile(idle.map((r) => r.ms), 0.9).toFixed(2)} | ${attackMedianMs.toFixed(2)} | ` +
      `${percentile(underAttack.map((r) => r.ms), 0.9).toFixed(2)} | **${(attackMedianMs / idleMedianMs).toFixed(2)}** | ${victimNon200.length === 0 ? 'none' : countBy(victimNon200)} | ` +
      `${countBy(attackAnswers.map((r) => r.status))} | ${failures.timeout ?? 0} | ${failures.tripped ?? 0} |`;
  } finally {
    await stopServer(server, redisUrl);
  }
}

async function main(): Promise<void> {
  const redisUrl = await redisUrlForTests();
  const dir = await mkdtemp(join(tmpdir(), 'agentgate-bench-plugins-'));
  try {
    await symlink(resolve('node_modules'), join(dir, 'node_modules'));
    const pluginsDir = join(dir, 'plugins');
    await mkdir(pluginsDir);
    await copyFile('test/fixtures/plugin-isolation/busy.mjs', join(pluginsDir, 'busy.mjs'));
    await copyFile('plugins/regex.ts', join(pluginsDir, 'regex.ts'));
    // `echo` declaring its argument (constraints may name only declared arguments).
    const capabilitiesFile = join(dir, 'capabilities.json');
    await writeFile(capabilitiesFile, JSON.stringify({
      capabilities: [{ name: 'echo', description: 'echoes x', input: { type: 'object', properties: { x: {} } }, handler: { type: 'echo' } }],
    }));
    const rows = [
      await measure(redisUrl, pluginsDir, capabilitiesFile, 'overrunning call, defaults (PLUGIN_TRIP_SECONDS=60)', {}, OVERRUNNING),
      await measure(redisUrl, pluginsDir, capabilitiesFile, 'overrunning call, PLUGIN_TRIP_SECONDS=1 (a kill every second)', { PLUGIN_TRIP_SECONDS: '1' }, OVERRUNNING),
      await measure(redisUrl, pluginsDir, capabilitiesFile, 'costliest admitted regex on 1024 characters, defaults', {}, COSTLIEST_REGEX),
    ];
    console.log(`Machine: ${cpus()[0]?.model.trim() || 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}; ${SAMPLES} victim calls per phase, one every ${INTERVAL_MS} ms; the attacker one every ${INTERVAL_MS} ms. Kills and tripped calls count every plugin failure of the run.`);
    console.log('');
    console.log('| configuration | victim idle median (ms) | idle p90 (ms) | victim under attack median (ms) | under attack p90 (ms) | ratio of medians | victim non-200 | attacker answers | worker kills | tripped calls |');
    console.log('|---|---|---|---|---|---|---|---|---|---|');
    for (const row of rows) console.log(row);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
