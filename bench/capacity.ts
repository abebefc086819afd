// `node bench/capacity.ts`: the Redis numbers a capacity model of agentgate needs, measured on a real
// Redis and printed as a markdown report:
//   1. Redis CPU per execute, for the execute script, for the rate-limit calls, and for both
//      pipelined as the app sends them; once as Redis accounts it per command (INFO commandstats)
//      and once as the whole process's CPU (INFO cpu), which also counts reading and writing sockets.
//   2. Bytes per replay record (the jti key each execute writes), per key and as the growth of
//      used_memory, which includes the hash tables' own memory.
//   3. Bytes per agent (its hash, grants, session, indexes and rate-limit keys).
//   4. Whether the execute script stays within one hash slot.
// It starts its own redis-server on a free port, with no persistence, so that no other client's
// traffic pollutes the statistics, and kills it at the end. BENCH_CAPACITY_CALLS sets the calls per
// CPU phase (default 50,000) and BENCH_CAPACITY_RECORDS the replay records of the memory phase
// (default 100,000).
import { randomUUID } from 'node:crypto';
import { cpus } from 'node:os';
import { Redis } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { budgetKey } from '../src/ratelimit/limits.ts';
import { keyLayout } from '../src/store/redis/keys.ts';
import { Client } from '../test/support/client.ts';
import { sleep, startThrowawayRedis } from '../test/support/redis.ts';
import { startTestServer } from '../test/support/server.ts';

const CALLS = Number(process.env.BENCH_CAPACITY_CALLS ?? 50_000);
const MEMORY_RECORDS = Number(process.env.BENCH_CAPACITY_RECORDS ?? 100_000);
const IN_FLIGHT = 32;
const WARM_UP = 2_000;
const SAMPLE = 1_000;
// The default replay TTL: (JWT_MAX_LIFETIME_SECONDS 60 + 2 × JWT_CLOCK_SKEW_SECONDS 30) × 1000.
const JTI_TTL_MS = 120_000;
const CONSTRAINED = { name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } } };
// The shortest prefix the test server's clean-up accepts (it deletes only under `agt-test:`). Key
// names are part of every record's size, so a short prefix keeps the records close to production's
// default prefix `ag:`; the report also measures one record under `ag:` itself.
const PREFIX = 'agt-test:';
// Commands a client sends that run the Lua scripts. Redis also counts every command a script calls
// in INFO commandstats, under that command's own name, and that time is already part of the
// calling EVALSHA's time; so only these are summed as "Redis CPU", the others are shown for detail.
const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);
// This bench's own statistics calls during a phase, left out of its table. Redis 7 names a
// subcommand's statistics `config|resetstat`, so the part before `|` is what is compared.
const MEASUREMENT_COMMANDS = new Set(['info', 'config']);

const redis = await startThrowawayRedis();
const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
// The server is started inside the try, so that a server that fails to start still stops Redis.
try {
  // Budgets high enough that no call is refused: the phases spend each about 104,000 times, in well under
  // the minute the budgets are counted over (10,000,000 a minute is the most the config accepts).
  const server = await startTestServer({
    store: 'redis', redisUrl: redis.url, redisPrefix: PREFIX,
    env: { RATE_LIMIT_AGENT_PER_MINUTE: '10000000', RATE_LIMIT_HOST_PER_MINUTE: '10000000' },
  });
  try {
    const agent = await new Client(server).activeAgent([CONSTRAINED]);
    const deps = server.app.deps;
    const snapshot = (await deps.store.getAgent(agent.id))!;
    const hostId = snapshot.agent.hostId;
    const roundTrip = () => deps.store.executeRoundTrip({
      agentId: agent.id, keyVersion: snapshot.agent.keyVersion, jti: randomUUID(), jtiTtlMs: JTI_TTL_MS,
      capabilities: [CONSTRAINED.name], nowMs: Date.now(), sessionTtlMs: 3_600_000,
    });
    // The two budgets every execute spends (src/services/execute.ts). A capability with a budget of
    // its own adds a third call of the same limiter script; transfer_money has none in the catalog.
    const budgets = () => Promise.all([deps.limits.consume('agent', agent.id), deps.limits.consume('host', hostId)]);
    const serverInfo = parseInfo(await admin.info('server'));
    const allocator = parseInfo(await admin.info('memory')).get('mem_allocator');

    const lines: string[] = [
      '# agentgate on Redis: capacity measurements',
      '',
      `Command: \`node_modules/.bin/node bench/capacity.ts\` (BENCH_CAPACITY_CALLS=${CALLS}, BENCH_CAPACITY_RECORDS=${MEMORY_RECORDS}).`,
      `Machine: ${cpus()[0]?.model.trim() || 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}, ` +
        `Redis ${serverInfo.get('redis_version')} (${allocator}), a throwaway redis-server on port ${redis.port} ` +
        `with \`--save '' --appendonly no\`; calls go through agentgate's own ioredis connection (auto-pipelining on).`,
      '',
    ];

    // ---- 1. Redis CPU per execute ------------------------------------------------------------------

    // Redis's cron and idle event loop cost a little CPU with no traffic at all; it is counted in the
    // used_cpu deltas below and not subtracted, so this line says how much of them it can be.
    const idleBefore = redisCpuSeconds(parseInfo(await admin.info('cpu')));
    const idleStarted = performance.now();
    await sleep(1000);
    const idleUsPerSecond = ((redisCpuSeconds(parseInfo(await admin.info('cpu'))) - idleBefore) * 1e6) / ((performance.now() - idleStarted) / 1000);

    const whole = () => Promise.all([roundTrip(), budgets()]);
    // The last row sends one execute at a time: ioredis still writes its script and its two budget
    // calls together, but Redis reads only those three commands per wake-up, which is what a lightly
    // loaded instance sends; it shows what the deeper pipelines of the other rows save on the network.
    const phases = [
      await measurePhase('execute script (executeRoundTrip)', roundTrip, CALLS, IN_FLIGHT),
      await measurePhase('rate limits (agent + host budgets)', budgets, CALLS, IN_FLIGHT),
      await measurePhase('script and rate limits pipelined, as the app sends them', whole, CALLS, IN_FLIGHT),
      await measurePhase('the same, one execute at a time', whole, Math.round(CALLS / 5), 1),
    ];
    lines.push(
      '## 1. Redis CPU per execute',
      '',
      `Each phase: ${WARM_UP} warm-up calls (they load the scripts: EVALSHA, NOSCRIPT, then EVAL once), \`CONFIG RESETSTAT\`, ` +
        'then the calls of the row. "commandstats" sums the usec of the script commands the client sent ' +
        '(a script\'s usec includes the commands it calls, and excludes parsing requests and writing replies); ' +
        '"process CPU" is the delta of `used_cpu_sys + used_cpu_user` from INFO cpu, all of Redis\'s work including the network.',
      '',
      '| phase | calls | in flight | Redis µs/execute (commandstats) | Redis µs/execute (process CPU) | client executes/s | commands per read (pipeline depth) |',
      '|---|---|---|---|---|---|---|',
      ...phases.map((p) => `| ${p.label} | ${p.calls} | ${p.inFlight} | ${p.scriptUsPerCall.toFixed(2)} | ${p.cpuUsPerCall.toFixed(2)} | ` +
        `${Math.round(p.callsPerSecond)} | ${p.commandsPerRead.toFixed(1)} |`),
      '',
      `Redis idle CPU: ${idleUsPerSecond.toFixed(0)} µs per second of wall time, at most ` +
        `${Math.max(...phases.map((p) => (idleUsPerSecond * p.seconds) / p.calls)).toFixed(3)} µs per call of any phase (included above, not subtracted).`,
      '',
    );
    for (const phase of phases) {
      lines.push(
        `Commands of "${phase.label}" (INFO commandstats; "per execute" = calls / ${phase.calls}):`,
        '',
        '| command | calls | per execute | usec_per_call | usec per execute | sent by |',
        '|---|---|---|---|---|---|',
        ...phase.commands.map((c) => `| ${c.name} | ${c.calls} | ${(c.calls / phase.calls).toFixed(2)} | ${c.usecPerCall.toFixed(2)} | ${(c.usec / phase.calls).toFixed(2)} | ` +
          `${SCRIPT_COMMANDS.has(c.name) ? 'agentgate (a script)' : 'a script (time inside the script\'s)'} |`),
        '',
      );
    }

    // ---- 2. Bytes per replay record ----------------------------------------------------------------

    const layout = keyLayout(PREFIX);
    // Glob characters cannot occur in an agent id or in the layout, so the key pattern is used as is.
    const jtiKeys = await scanKeys(layout.agentJti(agent.id, '*'), SAMPLE);
    const jtiSizes = await memoryUsage(jtiKeys);
    const jtiTypes = new Set(await Promise.all(jtiKeys.slice(0, 20).map((k) => admin.type(k))));
    const jtiTtls = await Promise.all(jtiKeys.slice(0, 20).map((k) => admin.pttl(k)));
    // The same record under the default production prefix `ag:`, written the way the script writes it.
    const productionKey = keyLayout('ag:').agentJti(agent.id, randomUUID());
    await admin.set(productionKey, '1', 'PX', JTI_TTL_MS, 'NX');
    const [productionBytes] = await memoryUsage([productionKey]);
    await admin.del(productionKey);

    // used_memory before and after MEMORY_RECORDS more executes. Redis resizes its key tables by
    // doubling and rehashes them incrementally; waiting a second lets the cron finish a rehash, so
    // neither snapshot holds two tables at once. Nothing may expire in between (the oldest record is
    // younger than its TTL for the whole run); the expired_keys delta is printed to show that.
    await sleep(1000);
    const before = await memorySnapshot();
    const memoryStarted = performance.now();
    await drive(MEMORY_RECORDS, IN_FLIGHT, roundTrip);
    const memorySeconds = (performance.now() - memoryStarted) / 1000;
    await sleep(1000);
    const after = await memorySnapshot();
    const added = after.keys - before.keys;
    const perRecord = (after.usedMemory - before.usedMemory) / added;
    const tablesPerRecord = (after.tables - before.tables) / added;
    lines.push(
      '## 2. Bytes per replay record',
      '',
      `Replay records are separate string keys, one per jti (\`${layout.agentJti('<agent>', '<jti>')}\`, value "1", \`SET ... PX ttl NX\` in the execute script), ` +
        `not members of a per-agent structure: TYPE of 20 sampled keys = ${[...jtiTypes].join(', ')}; their PTTL ${Math.min(...jtiTtls)}–${Math.max(...jtiTtls)} ms (TTL ${JTI_TTL_MS} ms). ` +
        `Key length here: ${Buffer.byteLength(jtiKeys[0] ?? '')} bytes (agent id ${agent.id.length} characters, jti a 36-character UUID).`,
      '',
      `- \`MEMORY USAGE key SAMPLES 0\` over ${jtiSizes.length} records: mean ${mean(jtiSizes).toFixed(1)}, min ${Math.min(...jtiSizes)}, max ${Math.max(...jtiSizes)} bytes ` +
        '(key string, value object and dict entry; not the expiry entry nor the hash tables\' buckets).',
      `- The same record under the default prefix \`ag:\` (${Buffer.byteLength(productionKey)}-byte key): ${productionBytes} bytes.`,
      `- \`INFO memory\` used_memory delta over ${added} new records (${Math.round(added / memorySeconds)} executes/s): ` +
        `${(after.usedMemory - before.usedMemory).toLocaleString('en-US')} bytes, **${perRecord.toFixed(1)} bytes per record**, ` +
        `of which ${tablesPerRecord.toFixed(1)} bytes are db 0's key tables, entries and buckets of the main and the expires dict (MEMORY STATS overhead.hashtable.*, ` +
        `${before.tables.toLocaleString('en-US')} → ${after.tables.toLocaleString('en-US')} bytes; keys ${before.keys} → ${after.keys}, with expiry ${before.expires} → ${after.expires}; ` +
        `expired during the phase: ${after.expired - before.expired}).`,
      '',
    );

    // ---- 3. Bytes per agent ------------------------------------------------------------------------

    // Every key this server wrote except the replay records, named by shape rather than by id.
    const everyKey = await scanKeys(`${PREFIX}*`, Number.POSITIVE_INFINITY, (k) => !k.includes(':jti:'));
    const inventory = await Promise.all(everyKey.sort().map(async (key) => {
      const [bytes] = await memoryUsage([key]);
      const shape = key.replaceAll(agent.id, '<agent>').replaceAll(hostId, '<host>').replaceAll(agent.host.thumbprint, '<host key>')
        .replace(/agentkey:.*$/, 'agentkey:<agent key>').replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, '<jti>')
        .replace(/person:\{[^}]*\}/, 'person:{<person>}');
      const owner = key.includes(agent.id) || key.includes(':agentkey:') ? 'agent' : key.includes(hostId) || key.includes(agent.host.thumbprint) ? 'host' : 'other';
      return { shape, owner, bytes: bytes ?? 0, type: await admin.type(key), encoding: String(await admin.object('ENCODING', key)), ttl: await admin.pttl(key) };
    }));
    const agentBytes = inventory.filter((k) => k.owner === 'agent').reduce((sum, k) => sum + k.bytes, 0);
    lines.push(
      '## 3. Bytes per agent',
      '',
      `Every key of the one provisioned agent, its host and the server after the phases (one grant: ${CONSTRAINED.name} with 2 constraints), ` +
        'by `MEMORY USAGE key SAMPLES 0`; replay records left out.',
      '',
      '| key | owner | type (encoding) | bytes | TTL |',
      '|---|---|---|---|---|',
      ...inventory.map((k) => `| \`${k.shape}\` | ${k.owner} | ${k.type} (${k.encoding}) | ${k.bytes} | ${k.ttl < 0 ? 'none' : `${Math.round(k.ttl / 1000)} s`} |`),
      '',
      `Per agent: **${agentBytes} bytes** over the keys owned by the agent (the rate-limit key only while the agent made a call within the minute), ` +
        'plus one member of its host\'s agent set. Host keys are paid once per host.',
      '',
    );

    // ---- 4. Hash slots -------------------------------------------------------------------------

    const executeKeys = [layout.agent(agent.id), layout.session(agent.id), layout.grants(agent.id), layout.grantsByCapability(agent.id), layout.agentJti(agent.id, randomUUID())];
    const executeSlots = new Set(executeKeys.map(keySlot));
    const limitKeys = inventory.filter((k) => k.shape.includes('rl:')).map((k) => k.shape);
    const agentBudgetSlot = keySlot(`${PREFIX}rl:agent:${budgetKey(agent.id)}`);
    const hostBudgetSlot = keySlot(`${PREFIX}rl:host:${budgetKey(hostId)}`);
    const hostSlot = keySlot(layout.host(hostId));
    lines.push(
      '## 4. Hash slots',
      '',
      'From src/store/redis/keys.ts: every key of one agent is `<prefix>{<agent id>}...`, so only the agent id is hashed, and every key of a host is ' +
        '`<prefix>host:{<host id>}...`; every script in src/store/redis/scripts.ts takes the keys of one agent, of one host, or a single key, so each runs in one slot. ' +
        `The execute script's 5 keys computed here fall in ${executeSlots.size === 1 ? `one slot (${[...executeSlots][0]})` : `${executeSlots.size} slots (a bug)`}. ` +
        `The rate-limit keys (${limitKeys.map((k) => `\`${k}\``).join(', ')}) carry hash tags (src/ratelimit/limits.ts budgetKey): ` +
        `the agent's budget falls in the agent's slot (${agentBudgetSlot === keySlot(executeKeys[0]!) ? `${agentBudgetSlot}, the same` : `${agentBudgetSlot}, not the agent's ${keySlot(executeKeys[0]!)}: a bug`}), ` +
        `the host's budget in the host's slot (${hostBudgetSlot === hostSlot ? `${hostBudgetSlot}, the same` : `${hostBudgetSlot}, not the host's ${hostSlot}: a bug`}). ` +
        'So one execute needs at most two masters, its agent\'s and its host\'s, reached in parallel round trips; every call of one agent lands on one shard, ' +
        'and every call of every agent of one host also spends the host budget on the host\'s shard.',
      '',
    );

    // ---- what it means -----------------------------------------------------------------------------

    const [, , pipelined, oneAtATime] = phases as [Phase, Phase, Phase, Phase];
    const liveRecords = 100_000 * (JTI_TTL_MS / 1000);
    lines.push(
      '## Derived',
      '',
      `- One Redis core (commands run on one thread) at ${pipelined.cpuUsPerCall.toFixed(1)} µs of process CPU per execute: ` +
        `${Math.round(1e6 / pipelined.cpuUsPerCall).toLocaleString('en-US')} executes/s at 100 % ` +
        `(${Math.round(1e6 / pipelined.scriptUsPerCall).toLocaleString('en-US')}/s by commandstats alone, which leaves out the network); ` +
        `${Math.round(1e6 / oneAtATime.cpuUsPerCall).toLocaleString('en-US')} executes/s when every execute arrives alone (${oneAtATime.cpuUsPerCall.toFixed(1)} µs).`,
      `- Replay records at 100,000 executes/s: ${liveRecords.toLocaleString('en-US')} live records (rate × ${JTI_TTL_MS / 1000} s TTL) × ${perRecord.toFixed(0)} bytes = ` +
        `${((liveRecords * perRecord) / 2 ** 30).toFixed(2)} GiB (${((liveRecords * mean(jtiSizes)) / 2 ** 30).toFixed(2)} GiB by MEMORY USAGE alone).`,
      // What this setup leaves out, so that nobody reads the numbers as a ceiling.
      '- Not measured: the AOF that production runs with (docs/design.md) and replicas, which get every write of every execute; ' +
        `and the load generator shares this machine's ${cpus().length} cores with Redis, so Redis may have been preempted mid-command.`,
    );
    process.stdout.write(`${lines.join('\n')}\n`);

    // ---- helpers (closures over the connections above) ---------------------------------------------

    /** Runs `step` `calls` times, `inFlight` at once, the way concurrent requests interleave. */
    async function drive(calls: number, inFlight: number, step: () => Promise<unknown>): Promise<void> {
      let next = 0;
      await Promise.all(Array.from({ length: inFlight }, async () => {
        while (next++ < calls) await step();
      }));
    }

    /** One CPU phase: warm-up, reset of the statistics, `calls` calls, then the deltas. */
    async function measurePhase(label: string, step: () => Promise<unknown>, calls: number, inFlight: number): Promise<Phase> {
      await drive(WARM_UP, inFlight, step);
      await admin.config('RESETSTAT');
      const cpuBefore = redisCpuSeconds(parseInfo(await admin.info('cpu')));
      const readsBefore = Number(parseInfo(await admin.info('stats')).get('total_reads_processed'));
      const started = performance.now();
      await drive(calls, inFlight, step);
      const seconds = (performance.now() - started) / 1000;
      const cpuUs = (redisCpuSeconds(parseInfo(await admin.info('cpu'))) - cpuBefore) * 1e6;
      const reads = Number(parseInfo(await admin.info('stats')).get('total_reads_processed')) - readsBefore;
      const commands = parseCommandStats(await admin.info('commandstats')).filter((c) => !MEASUREMENT_COMMANDS.has(c.name.split('|')[0]!));
      const sent = commands.filter((c) => SCRIPT_COMMANDS.has(c.name));
      return {
        label,
        calls,
        inFlight,
        seconds,
        callsPerSecond: calls / seconds,
        cpuUsPerCall: cpuUs / calls,
        scriptUsPerCall: sent.reduce((sum, c) => sum + c.usec, 0) / calls,
        // The bench's own INFO calls are a handful of reads among tens of thousands.
        commandsPerRead: sent.reduce((sum, c) => sum + c.calls, 0) / reads,
        commands,
      };
    }

    /** Keys matching `pattern` that pass `keep`, up to `limit` of them. */
    async function scanKeys(pattern: string, limit: number, keep: (key: string) => boolean = () => true): Promise<string[]> {
      const found: string[] = [];
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        found.push(...keys.filter(keep));
        cursor = next;
      } while (cursor !== '0' && found.length < limit);
      return found.slice(0, limit);
    }

    /** MEMORY USAGE of each key, pipelined. SAMPLES 0 measures every element of a collection. */
    async function memoryUsage(keys: string[]): Promise<number[]> {
      const pipeline = admin.pipeline();
      for (const key of keys) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
      return ((await pipeline.exec()) ?? []).map(([error, bytes]) => {
        if (error) throw error;
        return Number(bytes);
      });
    }

    async function memorySnapshot() {
      const memory = parseInfo(await admin.info('memory'));
      const keyspace = /keys=(\d+),expires=(\d+)/.exec(parseInfo(await admin.info('keyspace')).get('db0') ?? '');
      const stats = parseInfo(await admin.info('stats'));
      return {
        usedMemory: Number(memory.get('used_memory')),
        keys: Number(keyspace?.[1]),
        expires: Number(keyspace?.[2]),
        expired: Number(stats.get('expired_keys')),
        tables: hashTableOverhead(await admin.call('MEMORY', 'STATS')),
      };
    }
  } finally {
    await server.close();
  }
} finally {
  admin.disconnect();
  await redis.stop();
}

/** INFO's `name:value` lines. */
function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** Seconds of CPU the Redis process has used, in the kernel and in user space, all threads. */
function redisCpuSeconds(cpu: Map<string, string>): number {
  return Number(cpu.get('used_cpu_sys')) + Number(cpu.get('used_cpu_user'));
}

interface Phase {
  label: string;
  calls: number;
  inFlight: number;
  seconds: number;
  callsPerSecond: number;
  /** Redis process CPU (used_cpu_sys + used_cpu_user) per call, µs. */
  cpuUsPerCall: number;
  /** usec of the script commands the client sent (INFO commandstats) per call. */
  scriptUsPerCall: number;
  commandsPerRead: number;
  commands: CommandStat[];
}

interface CommandStat {
  name: string;
  calls: number;
  usec: number;
  usecPerCall: number;
}

/** `cmdstat_evalsha:calls=3,usec=42,usec_per_call=14.00,...` lines, busiest first. */
function parseCommandStats(text: string): CommandStat[] {
  const stats: CommandStat[] = [];
  for (const [key, value] of parseInfo(text)) {
    if (!key.startsWith('cmdstat_')) continue;
    const field = (name: string) => Number(new RegExp(`(?:^|,)${name}=([\\d.]+)`).exec(value)?.[1] ?? 0);
    stats.push({ name: key.slice('cmdstat_'.length), calls: field('calls'), usec: field('usec'), usecPerCall: field('usec_per_call') });
  }
  return stats.sort((a, b) => b.usec - a.usec);
}

/** Bytes of db 0's key tables (main and expires) from MEMORY STATS, a flat name/value list. */
function hashTableOverhead(reply: unknown): number {
  const flat = reply as unknown[];
  const db = flat[flat.indexOf('db.0') + 1] as unknown[] | undefined;
  if (!db) return 0;
  const value = (name: string) => Number(db[db.indexOf(name) + 1] ?? 0);
  return value('overhead.hashtable.main') + value('overhead.hashtable.expires');
}

function mean(values: number[]): number {
  return values.reduce((sum, v) => sum + v, 0) / values.length;
}

/** The Redis Cluster slot of a key, as Redis computes it (and ioredis, through the same package). */
function keySlot(key: string): number {
  return calculateSlot(key);
}
