// `node bench/revocation-wait.ts` on Node 24 (`npx node bench/revocation-wait.ts` runs the project's own
// when the shell's node is older): what waiting for a replica costs a revocation (DESIGN §10:
// withdrawals of authority wait for WAIT before they are acknowledged). Starts a throwaway Redis
// master with one replica, and two agentgate servers in this process on it, one with
// REDIS_WAIT_REPLICAS=0 (acknowledge at once) and one with the default, auto (which finds the
// replica and waits for it); then measures, in the same run, the latency of revocations
// (POST /agent/revoke with a host JWT, over real HTTP on loopback) made one after another and made
// all at once, and prints a markdown table. Every revocation must answer 200: a 503 would mean the
// replica did not confirm within REDIS_WAIT_TIMEOUT_MS, and is counted in its own column.
//
// Settings (environment): BENCH_SEQUENTIAL (200 revocations one after another per mode),
// BENCH_CONCURRENT (50 revocations at once per mode) and BENCH_CONCURRENT_ROUNDS (3 such batches per
// mode, pooled), BENCH_WARMUP (20 one after another and 20 at once per mode, first, not counted).
// The modes take turns throughout, request by request and batch by batch.
//
// The servers and the client share this process, as the modes do the machine: the difference
// between the rows is the wait, the rest is the same work on the same machine in the same minute.
import { cpus, loadavg } from 'node:os';
import { RedisStore } from '../src/store/redis/redis-store.ts';
import { Client, type TestAgent } from '../test/support/client.ts';
import { queryRedis, startThrowawayRedis, waitFor, type ThrowawayRedis } from '../test/support/redis.ts';
import { startTestServer, type TestServer } from '../test/support/server.ts';

const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 200);
const CONCURRENT = Number(process.env.BENCH_CONCURRENT ?? 50);
const CONCURRENT_ROUNDS = Number(process.env.BENCH_CONCURRENT_ROUNDS ?? 3);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 20);
/** Registrations made at once while provisioning the agents to revoke. */
const REGISTER_BATCH = 10;

type Mode = '0' | 'auto';

interface Bench {
  mode: Mode;
  server: TestServer;
  client: Client;
  /** What the server says withdrawals wait for (the start-up line's words). */
  waitsFor: string;
  /** Active agents not yet revoked, used from the front. */
  agents: TestAgent[];
}

interface Row {
  how: string;
  mode: Mode;
  waitsFor: string;
  latenciesMs: number[];
  non200: number;
  wallMs: number;
}

/** The nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

async function startBench(mode: Mode, redisUrl: string, agentCount: number): Promise<Bench> {
  const server = await startTestServer({ store: 'redis', redisUrl, env: { REDIS_WAIT_REPLICAS: mode } });
  if (!(server.store instanceof RedisStore)) throw new Error('the server did not open a Redis store');
  const client = new Client(server);
  // One linked host whose default capability activates each agent at registration.
  const host = await client.linkedHost(['echo']);
  const agents: TestAgent[] = [];
  while (agents.length < agentCount) {
    const batch = await Promise.all(Array.from({ length: Math.min(REGISTER_BATCH, agentCount - agents.length) }, () =>
      client.register(host, { mode: 'delegated', capabilities: ['echo'] })));
    for (const { res, agent } of batch) {
      if (!agent || res.json.status !== 'active') throw new Error(`registration did not give an active agent: ${res.status} ${res.text}`);
      agents.push(agent);
    }
  }
  return { mode, server, client, waitsFor: server.store.durability(), agents };
}

/** The next agent to revoke and a host JWT for it, signed before any clock starts: the client's work is not the server's. */
async function nextRevocation(bench: Bench): Promise<{ agent: TestAgent; token: string }> {
  const agent = bench.agents.shift();
  if (!agent) throw new Error('ran out of agents to revoke');
  return { agent, token: await bench.client.hostToken(agent.host) };
}

/** One revocation's latency in ms, and whether it was answered 200. */
async function revoke(bench: Bench, { agent, token }: { agent: TestAgent; token: string }): Promise<{ ms: number; ok: boolean }> {
  const startedMs = performance.now();
  const res = await fetch(bench.client.url('/agent/revoke'), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ agent_id: agent.id }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.arrayBuffer();
  return { ms: performance.now() - startedMs, ok: res.status === 200 };
}

/**
 * `count` revocations one after another in each mode, the modes taking turns, so a burst of load on
 * the machine lands on both alike.
 */
async function sequential(benches: readonly Bench[], count: number): Promise<Row[]> {
  const rows = benches.map((bench): Row => ({ how: `${count} one after another`, mode: bench.mode, waitsFor: bench.waitsFor, latenciesMs: [], non200: 0, wallMs: 0 }));
  for (let i = 0; i < count; i++) {
    for (const [index, bench] of benches.entries()) {
      const { ms, ok } = await revoke(bench, await nextRevocation(bench));
      const row = rows[index]!;
      row.latenciesMs.push(ms);
      row.wallMs += ms;
      if (!ok) row.non200++;
    }
  }
  return rows;
}

/**
 * `rounds` batches of `count` revocations sent at once in each mode, the modes taking turns; the
 * latencies of all batches are pooled, and the wall time is the median batch's (first request to
 * last answer).
 */
async function concurrent(benches: readonly Bench[], count: number, rounds: number): Promise<Row[]> {
  const rows = benches.map((bench): Row => ({ how: `${count} at once (×${rounds})`, mode: bench.mode, waitsFor: bench.waitsFor, latenciesMs: [], non200: 0, wallMs: 0 }));
  const walls: number[][] = benches.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (const [index, bench] of benches.entries()) {
      const revocations = [];
      for (let i = 0; i < count; i++) revocations.push(await nextRevocation(bench));
      const startedMs = performance.now();
      const outcomes = await Promise.all(revocations.map((r) => revoke(bench, r)));
      walls[index]!.push(performance.now() - startedMs);
      const row = rows[index]!;
      row.latenciesMs.push(...outcomes.map((o) => o.ms));
      row.non200 += outcomes.filter((o) => !o.ok).length;
    }
  }
  for (const [index, row] of rows.entries()) row.wallMs = percentile([...walls[index]!].sort((a, b) => a - b), 50);
  return rows;
}

function table(rows: readonly Row[]): string {
  const lines = [
    '| revocations | REDIS_WAIT_REPLICAS | withdrawals wait for | median ms | p99 ms | max ms | non-200 | wall ms |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const row of rows) {
    const sorted = [...row.latenciesMs].sort((a, b) => a - b);
    const fixed = (ms: number) => ms.toFixed(1);
    lines.push(`| ${row.how} | ${row.mode} | ${row.waitsFor} | ${fixed(percentile(sorted, 50))} | ${fixed(percentile(sorted, 99))} | ${fixed(sorted.at(-1) ?? Number.NaN)} | ${row.non200} | ${Math.round(row.wallMs)} |`);
  }
  return lines.join('\n');
}

/** A master and its replica, once the replica is linked and has caught up. */
async function masterWithReplica(): Promise<{ master: ThrowawayRedis; replica: ThrowawayRedis }> {
  const master = await startThrowawayRedis(['--repl-diskless-sync-delay', '0']);
  let replica: ThrowawayRedis | undefined;
  try {
    replica = await startThrowawayRedis(['--replicaof', '127.0.0.1', String(master.port)]);
    await waitFor(`replica ${replica.port} linked to master ${master.port}`, 20_000, async () => {
      const info = await queryRedis({ host: '127.0.0.1', port: replica!.port }, (redis) => redis.info('replication'));
      return /^master_link_status:up/m.test(info) ? null : 'master_link_status is not up yet';
    });
    return { master, replica };
  } catch (error) {
    await replica?.stop();
    await master.stop();
    throw error;
  }
}

async function main(): Promise<void> {
  const { master, replica } = await masterWithReplica();
  const benches: Bench[] = [];
  try {
    const perMode = 2 * WARMUP + SEQUENTIAL + CONCURRENT * CONCURRENT_ROUNDS;
    for (const mode of ['0', 'auto'] as const) benches.push(await startBench(mode, master.url, perMode));
    // Both shapes once, uncounted: the first concurrent batch otherwise pays for compiling the
    // code paths and opening the client's connections, and whichever mode ran first looked slower.
    await sequential(benches, WARMUP);
    await concurrent(benches, WARMUP, 1);
    const loadBefore = loadavg()[0]!;
    const rows = [...(await sequential(benches, SEQUENTIAL)), ...(await concurrent(benches, CONCURRENT, CONCURRENT_ROUNDS))];
    const redisVersion = /^redis_version:(.*)$/m.exec(await queryRedis({ host: '127.0.0.1', port: master.port }, (redis) => redis.info('server')))?.[1]?.trim();
    process.stdout.write(
      `Revocation latency (POST /agent/revoke, host JWT, loopback), master with one replica, Redis ${redisVersion ?? '?'}, ` +
        `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, load average ${loadBefore.toFixed(1)} → ${loadavg()[0]!.toFixed(1)}; ` +
        `REDIS_WAIT_TIMEOUT_MS ${benches[0]!.server.config.REDIS_WAIT_TIMEOUT_MS}; ${WARMUP} revocations one after another and ${WARMUP} at once per mode first, not counted. ` +
        'Wall ms: the sum of the latencies one after another; the median batch from its first request to its last answer at once.\n\n' +
        `${table(rows)}\n`,
    );
  } finally {
    await Promise.all(benches.map((b) => b.server.close()));
    await replica.stop();
    await master.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`revocation-wait failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
