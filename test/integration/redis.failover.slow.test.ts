// What a Redis failover may and may not do to agentgate's answers (DESIGN §10).
//
// Redis replicates asynchronously: a master acknowledges a write before its replica has it, and a
// failover in between undoes the write. For a revocation that would bring back an agent its host was
// told was gone, so withdrawals of authority wait for a replica (WAIT) and, when none confirms in
// time, are answered 503 service_unavailable ("not yet durable") rather than 200. These tests break a
// real cluster the way production breaks (a frozen replica, a killed master, a replica promoted) and
// check the promises that follow from it:
// - a revocation answered 200 survives the failover of the master that took it;
// - a revocation the replica did not confirm is never answered 200;
// - an agent whose revocation was acknowledged is never allowed, before, during or after;
// - while a slot has no master, every answer that needs it is 503 (never 500, never an allow), and
//   serving resumes within seconds of the promotion;
// - after the failover, withdrawals reach the promoted master: not durable while it has no replica,
//   confirmed once one follows it;
// - losing one master refuses only the agents and hosts whose state lives there (blast radius, with
//   cluster-require-full-coverage no; Redis's default, yes, stops the whole cluster instead);
// - on one Redis without a replica, `auto` waits for nothing, and a required replica that is not
//   there turns every revocation into a 503 that is nonetheless in force: recorded in the audit
//   trail, and repeatable to confirm it, as the answer says.
//
// The servers run in this process (test/support/server.ts) on throwaway topologies
// (test/support/redis-cluster.ts), so the test controls every process it breaks.
import calculateSlot from 'cluster-key-slot';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, type Logger } from '../../src/logger.ts';
import { isRedisUnavailable } from '../../src/store/redis/connection.ts';
import { keyLayout, type KeyLayout } from '../../src/store/redis/keys.ts';
import { RedisStore } from '../../src/store/redis/redis-store.ts';
import { Client, code, type HttpResult, type TestAgent } from '../support/client.ts';
import { startThrowawayCluster, type ThrowawayCluster } from '../support/redis-cluster.ts';
import { queryRedis, redisUrlForTests, sleep, waitFor, type RedisAddress } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

/**
 * How long a withdrawal waits for its replica. Longer than the default (500 ms) so that a healthy
 * replica on a busy two-core machine still confirms in time: a revocation it confirms late would be
 * answered 503, and the test of the 200 path would measure the machine, not the server.
 */
const WAIT_TIMEOUT_MS = 3000;
/** The promise under test: after a promotion, executes are served again within this. */
const RESUME_BOUND_MS = 10_000;
/** A hook that starts six redis-server processes, an in-process server and a failover. */
const SCENARIO_TIMEOUT_MS = 120_000;
/**
 * Megabytes written to the master after its replica froze: more than the loopback socket buffers
 * between them hold (the sender's is at most net.ipv4.tcp_wmem's 4 MiB here, and the frozen
 * receiver's stays at the size it had), well under a replica's output buffer limit (64 MiB soft).
 */
const FILLER_MB = 24;
/** Pause between two requests of one background loop, so the loops do not starve the machine. */
const LOOP_PAUSE_MS = 20;

/** The 503 body of a withdrawal no replica confirmed (src/services/durability.ts). */
const NOT_DURABLE = new RegExp(
  `^the revocation is in force, but no Redis replica confirmed it within ${WAIT_TIMEOUT_MS} ms, so a failover could still undo it; repeat the request to confirm it$`,
);

type Phase = 'replica healthy' | 'replica frozen' | 'master dead' | 'promoting' | 'promoted';

/** One answer, or the failure to get one (status 0), and when it was asked and answered. */
interface Answer {
  agentId: string;
  phase: Phase;
  status: number;
  error: string;
  message: string;
  retryAfter: string | null;
  startMs: number;
  endMs: number;
}

async function answer(agentId: string, phase: Phase, request: () => Promise<HttpResult>): Promise<Answer> {
  const startMs = performance.now();
  try {
    const res = await request();
    const body = (res.json ?? {}) as { error?: unknown; message?: unknown };
    return {
      agentId, phase, status: res.status, error: String(body.error ?? ''), message: String(body.message ?? ''),
      retryAfter: res.headers.get('retry-after'), startMs, endMs: performance.now(),
    };
  } catch (error) {
    return { agentId, phase, status: 0, error: 'no answer', message: (error as Error).message, retryAfter: null, startMs, endMs: performance.now() };
  }
}

/** `status error` counts, for messages and the report: {"503 service_unavailable": 12, ...}. */
function tally(answers: readonly Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) {
    const key = `${a.status} ${a.error}`.trim();
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** Median and slowest of some durations, rounded, for the report. */
function spread(durationsMs: readonly number[]): { medianMs: number; maxMs: number; count: number } {
  const sorted = [...durationsMs].sort((a, b) => a - b);
  return { medianMs: Math.round(sorted[Math.floor(sorted.length / 2)] ?? Number.NaN), maxMs: Math.round(sorted.at(-1) ?? Number.NaN), count: sorted.length };
}

/** Runs `step` over and over, pausing between runs, until stopped; for requests made while the test breaks things. */
function backgroundLoop(step: () => Promise<void>): { stop(): Promise<void> } {
  let running = true;
  const done = (async () => {
    while (running) {
      await step();
      await sleep(LOOP_PAUSE_MS);
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
    },
  };
}

/** A logger that keeps the server's error lines, so a 500 can be explained by what the server logged. */
function keptErrors(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { logger: createLogger('error', (line) => lines.push(line)), lines };
}

/** The port of the master serving each slot, read once from CLUSTER NODES. */
async function slotOwners(cluster: ThrowawayCluster): Promise<(key: string) => number> {
  const masters = (await cluster.topology()).filter((n) => n.role === 'master');
  return (key) => {
    const slot = calculateSlot(key);
    const owner = masters.find((m) => m.slots?.some(([from, to]) => slot >= from && slot <= to));
    if (!owner) throw new Error(`no master serves slot ${slot} (key ${key})`);
    return owner.port;
  };
}

/**
 * Closes a test server whose cluster lost a node, then throws the cluster away, however closing
 * went: no redis-server outlives the test (a test worker may end without running exit hooks). The
 * server's last step deletes the test's keys on every master its client knows, and a killed master
 * refuses that; the cluster goes whole right after, so nothing is left behind. Any other failure to
 * close is the test's.
 */
async function closeAfterLoss(server: TestServer | undefined, cluster: ThrowawayCluster | undefined): Promise<void> {
  try {
    await server?.close().catch((error: unknown) => {
      if (!isRedisUnavailable(error)) throw error;
    });
  } finally {
    await cluster?.stop();
  }
}

/** Where an agent's own records and its host's records live. */
interface Placed {
  agent: TestAgent;
  agentMaster: number;
  hostMaster: number;
}

/**
 * Creates active agents (each under a host of its own), in small concurrent batches, until `enough`
 * says the ones made so far suffice; refuses to go on past `maxAgents`. Agent ids are chosen by the
 * server, so where an agent's slot falls is known only once it exists.
 */
async function placeAgents(
  client: Client, keys: KeyLayout, ownerOf: (key: string) => number, enough: (placed: readonly Placed[]) => boolean, maxAgents: number,
): Promise<Placed[]> {
  const placed: Placed[] = [];
  while (!enough(placed)) {
    if (placed.length >= maxAgents) throw new Error(`${maxAgents} agents created and still not the placement the test needs`);
    const batch = await Promise.all(Array.from({ length: 6 }, () => client.activeAgent(['echo'])));
    for (const agent of batch) {
      const hostId = String(agent.registration.host_id);
      placed.push({ agent, agentMaster: ownerOf(keys.agent(agent.id)), hostMaster: ownerOf(keys.host(hostId)) });
    }
  }
  return placed;
}

/** Repeats `request` while it answers 503 (the topology is still settling), at most boundMs. */
async function pastUnavailability(what: string, boundMs: number, request: () => Promise<HttpResult>): Promise<HttpResult> {
  let last: HttpResult | undefined;
  await waitFor(what, boundMs, async () => {
    last = await request();
    return last.status === 503 ? `still 503: ${last.text}` : null;
  }, 100);
  return last!;
}

describe('a master of a Redis Cluster with replicas dies and its replica is promoted', () => {
  let cluster: ThrowawayCluster | undefined;
  let server: TestServer | undefined;
  const errors = keptErrors();

  /** What the scenario observed; the tests below judge it. */
  const run = {
    masterPort: 0,
    replicaPort: 0,
    /** Revocations answered while the replica was healthy: each should be 200. */
    confirmedRevocations: [] as Answer[],
    /** Revocations answered while the replica was frozen: each should be 503, not durable. */
    unconfirmedRevocations: [] as Answer[],
    /** Executes of the agents whose revocation was answered 200, from then to the end. */
    revokedExecutes: [] as Answer[],
    /** Executes of never-revoked agents on the dying master, from its death to its replacement. */
    controlExecutes: [] as Answer[],
    /** Executes of a never-revoked agent on another master, over the same time (informational). */
    bystanderExecutes: [] as Answer[],
    acknowledged: [] as TestAgent[],
    unacknowledged: [] as TestAgent[],
    controls: [] as TestAgent[],
    bystander: undefined as TestAgent | undefined,
    bystanderMasterPort: 0,
    killedAtMs: 0,
    failAgreedAtMs: 0,
    takeoverAtMs: 0,
    promotedAtMs: 0,
    firstAllowAfterPromotionMs: Number.NaN,
  };

  beforeAll(async () => {
    cluster = await startThrowawayCluster(3, { replicasPerMaster: 1, readyTimeoutMs: 40_000 });
    server = await startTestServer({
      store: 'redis',
      logger: errors.logger,
      env: { REDIS_CLUSTER_NODES: cluster.nodes.map((n) => `${n.host}:${n.port}`).join(','), REDIS_WAIT_TIMEOUT_MS: String(WAIT_TIMEOUT_MS) },
    });
    if (!(server.store instanceof RedisStore)) throw new Error('the test server did not open a Redis store');
    // `auto` found a replica on every master at start-up, so every withdrawal waits for one.
    if (server.store.durability() !== '1 replica on every master') throw new Error(`withdrawals wait for "${server.store.durability()}", not one replica on every master`);

    const client = new Client(server);
    const keys = keyLayout(server.config.REDIS_KEY_PREFIX);
    const ownerOf = await slotOwners(cluster);
    // The test's own slot arithmetic must agree with the cluster's.
    const probe = keys.agent('agt_probe');
    if ((await cluster.keySlot(probe)) !== calculateSlot(probe)) throw new Error('cluster-key-slot and CLUSTER KEYSLOT disagree');

    const masters = (await cluster.topology()).filter((n) => n.role === 'master').map((n) => n.port);
    run.masterPort = masters[0]!;
    const [replicaPort] = await cluster.replicasOf(run.masterPort);
    if (replicaPort === undefined) throw new Error(`master ${run.masterPort} has no replica`);
    run.replicaPort = replicaPort;

    // 10 revoked with the replica healthy, 10 with it frozen, 3 never revoked; and one agent whose
    // own records and host live on other masters, to see what the outage does to it.
    const placed = await placeAgents(client, keys, ownerOf, (p) =>
      p.filter((x) => x.agentMaster === run.masterPort).length >= 23 && p.some((x) => x.agentMaster !== run.masterPort && x.hostMaster !== run.masterPort), 150);
    const onMaster = placed.filter((x) => x.agentMaster === run.masterPort).map((x) => x.agent);
    run.acknowledged = onMaster.slice(0, 10);
    run.unacknowledged = onMaster.slice(10, 20);
    run.controls = onMaster.slice(20, 23);
    const bystander = placed.find((x) => x.agentMaster !== run.masterPort && x.hostMaster !== run.masterPort)!;
    [run.bystander, run.bystanderMasterPort] = [bystander.agent, bystander.agentMaster];
    for (const agent of [...onMaster.slice(0, 23), run.bystander]) {
      const res = await client.execute(agent, 'echo', {});
      if (res.status !== 200) throw new Error(`agent ${agent.id} cannot execute before anything broke: ${res.status} ${res.text}`);
    }

    let phase: Phase = 'replica healthy';
    const revoke = (agent: TestAgent) => answer(agent.id, phase, () => client.hostPost('/agent/revoke', agent.host, { agent_id: agent.id }));
    const execute = (agent: TestAgent) => answer(agent.id, phase, () => client.execute(agent, 'echo', {}));

    // Revoked one at a time while the replica is healthy: each confirmed by WAIT, so each 200.
    for (const agent of run.acknowledged) run.confirmedRevocations.push(await revoke(agent));
    const acknowledged = run.acknowledged.filter((_, i) => run.confirmedRevocations[i]!.status === 200);

    // From now to the end, the agents whose revocation was acknowledged keep trying to execute.
    let next = 0;
    const revokedLoop = backgroundLoop(async () => {
      if (acknowledged.length === 0) return;
      run.revokedExecutes.push(await execute(acknowledged[next++ % acknowledged.length]!));
    });
    try {
      // The replica stops reading its master's stream: the master still takes every write, but
      // nothing it takes now is confirmed, so these revocations must not be answered 200.
      phase = 'replica frozen';
      cluster.pause(run.replicaPort);
      // A frozen replica's socket still takes in what its master sends, so a replica resumed after
      // its master's death would read and apply even these revocations, and the failover would
      // undo nothing. Filler written first fills the socket buffers (the receiver's stays small
      // while nobody reads it), so the revocations stay in the master's own output buffer and die
      // with it, as they would in a real partition: then a 200 for them would have been a lie.
      const fillerTag = run.unacknowledged[0]!.id;
      await queryRedis({ host: '127.0.0.1', port: run.masterPort }, async (redis) => {
        const pipeline = redis.pipeline();
        for (let i = 0; i < FILLER_MB; i++) pipeline.set(`${server!.config.REDIS_KEY_PREFIX}filler:{${fillerTag}}:${i}`, 'x'.repeat(1 << 20));
        await pipeline.exec();
      }, 10_000);
      run.unconfirmedRevocations = await Promise.all(run.unacknowledged.map(revoke));

      phase = 'master dead';
      await cluster.kill(run.masterPort);
      run.killedAtMs = performance.now();
      // One loop per control agent: a refusal while the slot has no master takes over a second
      // (the driver retries CLUSTERDOWN before giving up), so one loop would see few of them.
      const controlLoops = run.controls.map((agent) => backgroundLoop(async () => {
        const outcome = await execute(agent);
        run.controlExecutes.push(outcome);
        if (outcome.status === 200 && Number.isNaN(run.firstAllowAfterPromotionMs) && run.promotedAtMs > 0) {
          run.firstAllowAfterPromotionMs = outcome.endMs - run.promotedAtMs;
        }
      }));
      const bystanderLoop = backgroundLoop(async () => {
        run.bystanderExecutes.push(await execute(run.bystander!));
      });
      try {
        // The outage as clients see it once the cluster agrees the master is gone: its slots have
        // no master, and (cluster-require-full-coverage yes, Redis's default) the cluster is down.
        await cluster.waitForFail(run.masterPort);
        run.failAgreedAtMs = performance.now();
        await sleep(3000);

        phase = 'promoting';
        run.takeoverAtMs = performance.now();
        cluster.resume(run.replicaPort);
        await cluster.promote(run.replicaPort);
        run.promotedAtMs = performance.now();
        phase = 'promoted';
        await waitFor(`an execute of a never-revoked agent on the lost master answering 200 after the promotion`, 2 * RESUME_BOUND_MS, async () =>
          Number.isNaN(run.firstAllowAfterPromotionMs) ? `answers since the kill: ${JSON.stringify(tally(run.controlExecutes))}` : null);
        // The revoked agents keep trying for a while on the promoted replica.
        await sleep(1500);
      } finally {
        await Promise.all([...controlLoops.map((loop) => loop.stop()), bystanderLoop.stop()]);
      }
    } finally {
      await revokedLoop.stop();
    }
  }, SCENARIO_TIMEOUT_MS);

  afterAll(async () => {
    await closeAfterLoss(server, cluster);
    const report = {
      confirmedRevocationMs: run.confirmedRevocations.map((a) => Math.round(a.endMs - a.startMs)),
      unconfirmedRevocationMs: run.unconfirmedRevocations.map((a) => Math.round(a.endMs - a.startMs)),
      failAgreedAfterKillMs: Math.round(run.failAgreedAtMs - run.killedAtMs),
      promotionTookMs: Math.round(run.promotedAtMs - run.takeoverAtMs),
      firstAllowAfterPromotionMs: Math.round(run.firstAllowAfterPromotionMs),
      firstAllowAfterTakeoverMs: Math.round((run.controlExecutes.find((a) => a.status === 200 && a.endMs > run.takeoverAtMs)?.endMs ?? Number.NaN) - run.takeoverAtMs),
      deadWindowRefusalMs: spread(run.controlExecutes.filter((a) => a.endMs < run.takeoverAtMs).map((a) => a.endMs - a.startMs)),
      revokedExecutes: tally(run.revokedExecutes),
      controlExecutesBeforeTakeover: tally(run.controlExecutes.filter((a) => a.endMs < run.takeoverAtMs)),
      bystanderExecutesBeforeFailAgreed: tally(run.bystanderExecutes.filter((a) => a.endMs < run.failAgreedAtMs)),
      bystanderExecutesFailAgreedToTakeover: tally(run.bystanderExecutes.filter((a) => a.startMs > run.failAgreedAtMs && a.endMs < run.takeoverAtMs)),
    };
    console.log(`failover measurements: ${JSON.stringify(report)}`);
  });

  /** The server's error lines, for the message of a failed expectation about a 500. */
  const serverErrors = () => `server errors:\n${errors.lines.slice(-20).join('')}`;

  it('a revocation a healthy replica confirmed is answered 200', () => {
    expect(run.confirmedRevocations.map((a) => `${a.status} ${a.error}`.trim()), JSON.stringify(run.confirmedRevocations)).toEqual(Array(10).fill('200'));
  });

  it('a revocation no replica confirmed is answered 503 service_unavailable, saying it is in force but not yet durable, never 200', () => {
    expect(run.unconfirmedRevocations).toHaveLength(10);
    for (const a of run.unconfirmedRevocations) {
      expect(`${a.status} ${a.error}`, JSON.stringify(a)).toBe('503 service_unavailable');
      expect(a.message).toMatch(NOT_DURABLE);
      expect(a.retryAfter).toBe('1');
    }
  });

  it('an acknowledged revocation survives its master’s failover: the agent is refused and its status says revoked', async () => {
    const client = new Client(server!);
    expect(run.acknowledged.length).toBe(10);
    for (const agent of run.acknowledged) {
      const executed = await pastUnavailability(`an execute of ${agent.id} after the promotion`, RESUME_BOUND_MS, () => client.execute(agent, 'echo', {}));
      expect(code(executed), `${agent.id}: ${executed.text}`).toBe('403 agent_revoked');
      const status = await pastUnavailability(`the status of ${agent.id} after the promotion`, RESUME_BOUND_MS, () => client.status(agent.host, agent.id));
      expect(status.status, status.text).toBe(200);
      expect(status.json.status, `${agent.id}: ${status.text}`).toBe('revoked');
    }
    // Informational: how many of the revocations answered 503 the failover undid (the filler above
    // kept them in the dead master's output buffer, so all of them, if it worked as intended).
    let undone = 0;
    for (const agent of run.unacknowledged) {
      const status = await pastUnavailability(`the status of ${agent.id} after the promotion`, RESUME_BOUND_MS, () => client.status(agent.host, agent.id));
      expect(status.status, status.text).toBe(200);
      if (status.json.status !== 'revoked') undone++;
    }
    console.log(`revocations answered 503 (not durable) that the failover undid: ${undone} of ${run.unacknowledged.length}`);
    // The never-revoked agents on the lost master work on the promoted replica.
    for (const agent of run.controls) expect((await client.execute(agent, 'echo', {})).status).toBe(200);
  }, 60_000);

  it('no execute of an agent whose revocation was acknowledged is ever allowed, before, during or after the failover', () => {
    const byPhase = (phase: Phase) => run.revokedExecutes.filter((a) => a.phase === phase);
    // The loop ran through every part of the failover, so "never" covers each of them.
    for (const phase of ['replica frozen', 'master dead', 'promoted'] as const) {
      expect(byPhase(phase).length, `executes of revoked agents while ${phase}: ${JSON.stringify(tally(run.revokedExecutes))}`).toBeGreaterThan(0);
    }
    expect(run.revokedExecutes.filter((a) => a.status === 200), JSON.stringify(tally(run.revokedExecutes))).toEqual([]);
    expect(run.revokedExecutes.filter((a) => a.status >= 500 && a.status !== 503), serverErrors()).toEqual([]);
    for (const a of run.revokedExecutes) expect(['403 agent_revoked', '503 service_unavailable'], JSON.stringify(a)).toContain(`${a.status} ${a.error}`);
  });

  it('every answer while a slot has no master is a 503, never a 500 and never an allow; serving resumes within 10 s of the promotion', () => {
    const beforeTakeover = run.controlExecutes.filter((a) => a.endMs < run.takeoverAtMs);
    // Answers from both parts of the outage: before the cluster agreed the master had failed (its
    // connection refused) and after (the cluster down).
    expect(beforeTakeover.length, 'executes answered while the master was dead').toBeGreaterThanOrEqual(3);
    expect(beforeTakeover.filter((a) => a.endMs > run.failAgreedAtMs).length, 'executes answered after the cluster agreed the master had failed').toBeGreaterThanOrEqual(1);
    expect(beforeTakeover.filter((a) => `${a.status} ${a.error}` !== '503 service_unavailable'), serverErrors()).toEqual([]);
    // Nothing anywhere is a 500 or goes unanswered: not the revoked agents, and not the agent on
    // another master, which this cluster (cluster-require-full-coverage yes, Redis's default)
    // refuses too once it agrees the master failed (see the blast-radius test for the other setting).
    const everything = [...run.controlExecutes, ...run.bystanderExecutes, ...run.revokedExecutes];
    expect(everything.filter((a) => a.status === 500 || a.status === 0), serverErrors()).toEqual([]);
    expect(run.firstAllowAfterPromotionMs).toBeLessThanOrEqual(RESUME_BOUND_MS);
  });

  // The three tests below run last, in this order: they revoke agents the tests above still
  // execute, and the last one moves a replica.
  const revocation = async (agent: TestAgent) => {
    const res = await new Client(server!).hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
    return { res, answered: code(res) };
  };

  it('after the failover, a revocation on a master that kept its replica is 200', async () => {
    const elsewhere = await pastUnavailability('revoking the agent on another master', RESUME_BOUND_MS, async () => (await revocation(run.bystander!)).res);
    expect(code(elsewhere), elsewhere.text).toBe('200');
  }, 30_000);

  it('after the failover, a revocation on the promoted master, which has no replica, waits there and is 503 not durable', async () => {
    // Not durable must mean a wait that ran on the promoted master and timed out (a round leaves
    // its marker in the anchor's slot), not a round that never reached it. Repeats are what the
    // answer asks for, so a few are allowed while the topology settles.
    const keys = keyLayout(server!.config.REDIS_KEY_PREFIX);
    const agent = run.controls[0]!;
    const seen: string[] = [];
    await waitFor(`a revocation whose wait ran on the promoted master ${run.replicaPort}`, 5000, async () => {
      const { res, answered } = await revocation(agent);
      seen.push(answered);
      if (answered !== '503 service_unavailable' || !NOT_DURABLE.test(String(res.json?.message))) throw new Error(`expected 503 not durable, got ${res.status} ${res.text}`);
      const marker = await queryRedis({ host: '127.0.0.1', port: run.replicaPort }, (redis) => redis.exists(keys.durabilityMarker(keys.agent(agent.id))));
      return marker === 1 ? null : `no durability marker on the promoted master after ${seen.length} revocation(s), all answered 503 not durable`;
    }, 250);
    expect(code(await new Client(server!).execute(agent, 'echo', {}))).toBe('403 agent_revoked');
  }, 30_000);

  it('after the failover, once a replica follows the promoted master, a revocation there is 200', async () => {
    // An operator restores redundancy: the replica of the master the bystander does not use is
    // told to follow the promoted master instead.
    const topology = await cluster!.topology();
    // (The killed master is still listed, as a failed master without slots.)
    const donor = topology.find((n) => n.role === 'master' && (n.slots?.length ?? 0) > 0 && n.port !== run.replicaPort && n.port !== run.bystanderMasterPort);
    const [donorReplica] = donor ? await cluster!.replicasOf(donor.port) : [];
    if (!donor || donorReplica === undefined) throw new Error(`no master with a replica to take it from: ${JSON.stringify(topology)}`);
    const promotedId = topology.find((n) => n.port === run.replicaPort)!.id;
    await queryRedis({ host: '127.0.0.1', port: donorReplica }, (redis) => redis.cluster('REPLICATE', promotedId));
    await waitFor(`node ${donorReplica} following the promoted master ${run.replicaPort}`, 15_000, async () =>
      ((await cluster!.replicasOf(run.replicaPort)).includes(donorReplica) ? null : 'not listed as its replica yet'));
    await cluster!.waitForReplicasInSync(run.replicaPort, 15_000);

    const agent = run.controls[1]!;
    const answers: string[] = [];
    await waitFor(`a revocation on the promoted master ${run.replicaPort}, now followed by ${donorReplica}, answered 200`, 5000, async () => {
      const { res, answered } = await revocation(agent);
      answers.push(answered === '503 service_unavailable' ? `503 (${String(res.json?.message)})` : answered);
      return answered === '200' ? null : `answers so far: ${answers.join('; ')}`;
    }, 250);
  }, 60_000);
});

describe('one master of a Redis Cluster is lost and nothing replaces it', () => {
  let cluster: ThrowawayCluster | undefined;
  let server: TestServer | undefined;
  const errors = keptErrors();
  let healthy: TestAgent | undefined;
  let doomed: TestAgent | undefined;
  let deadPort = 0;

  beforeAll(async () => {
    cluster = await startThrowawayCluster(3, { readyTimeoutMs: 30_000 });
    // Each node serves its own slots while another's have no master. Redis's default (yes) stops
    // the whole cluster instead, which makes every master's loss everyone's outage (the failover
    // test above runs with the default and records what it does to an agent on another master):
    // the blast radius is bounded only with this setting.
    for (const node of cluster.nodes) {
      await queryRedis(node, (redis) => redis.config('SET', 'cluster-require-full-coverage', 'no'));
    }
    server = await startTestServer({ store: 'redis', logger: errors.logger, env: { REDIS_CLUSTER_NODES: cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',') } });
    const client = new Client(server);
    const keys = keyLayout(server.config.REDIS_KEY_PREFIX);
    const ownerOf = await slotOwners(cluster);
    // The master to lose is the audit stream's: execute appends the queued events beside its script
    // there (store/redis/agent-records.ts), and a lost audit node must refuse no execute. One agent
    // lives wholly elsewhere (its records and its host's), another agent's records live on it.
    const port = ownerOf(keys.auditStream);
    const choose = (placed: readonly Placed[]) => {
      const away = placed.find((x) => x.agentMaster !== port && x.hostMaster !== port);
      const on = placed.find((x) => x.agentMaster === port);
      return away && on ? { port, away: away.agent, on: on.agent } : null;
    };
    const placed = await placeAgents(client, keys, ownerOf, (p) => choose(p) !== null, 60);
    const chosen = choose(placed)!;
    [deadPort, healthy, doomed] = [chosen.port, chosen.away, chosen.on];
    for (const agent of [healthy, doomed]) expect((await client.execute(agent, 'echo', {})).status).toBe(200);
    await cluster.kill(deadPort);
    await cluster.waitForFail(deadPort);
  }, SCENARIO_TIMEOUT_MS);

  afterAll(async () => {
    await closeAfterLoss(server, cluster);
  });

  it('an agent whose keys and whose host’s keys live on healthy masters keeps executing, though the audit stream’s master is the one lost; an agent on the lost master gets 503', async () => {
    const client = new Client(server!);
    // The two run side by side: the refusals of the agent on the lost master, however long they
    // take, must not hold up the other agent's executes.
    const healthyAnswers: Answer[] = [];
    const doomedAnswers: Answer[] = [];
    await Promise.all([
      (async () => {
        for (let i = 0; i < 20; i++) healthyAnswers.push(await answer(healthy!.id, 'master dead', () => client.execute(healthy!, 'echo', {})));
      })(),
      (async () => {
        for (let i = 0; i < 5; i++) doomedAnswers.push(await answer(doomed!.id, 'master dead', () => client.execute(doomed!, 'echo', {})));
      })(),
    ]);
    expect(tally(healthyAnswers), errors.lines.join('')).toEqual({ 200: 20 });
    expect(tally(doomedAnswers), errors.lines.join('')).toEqual({ '503 service_unavailable': 5 });
    const ms = (answers: Answer[]) => answers.map((a) => Math.round(a.endMs - a.startMs)).sort((a, b) => a - b);
    console.log(`blast radius: healthy agent 20 × 200 (ms: ${ms(healthyAnswers).join(',')}); agent on the lost master 5 × 503 (ms: ${ms(doomedAnswers).join(',')})`);
  }, 60_000);
});

/** Where a redis:// URL points, for a one-off query. */
function addressOf(url: string): RedisAddress {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port || 6379), password: parsed.password ? decodeURIComponent(parsed.password) : undefined };
}

describe('a single Redis without a replica', () => {
  let url = '';
  const servers: TestServer[] = [];
  const start = async (env: Record<string, string>) => {
    const server = await startTestServer({ store: 'redis', redisUrl: url, env });
    servers.push(server);
    return server;
  };

  beforeAll(async () => {
    url = await redisUrlForTests();
    const info = await queryRedis(addressOf(url), (redis) => redis.info('replication'));
    const replicas = Number(/^connected_slaves:(\d+)/m.exec(info)?.[1] ?? 0);
    if (replicas !== 0) throw new Error(`these tests need the suite's Redis (${new URL(url).host}) to have no replica; it has ${replicas}`);
  });

  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
  });

  it('with REDIS_WAIT_REPLICAS auto, a revocation is 200 and waits for nothing', async () => {
    // A wait, if one ran, would last this long: WAIT for a replica that does not exist times out.
    const server = await start({ REDIS_WAIT_TIMEOUT_MS: '3000' });
    expect((server.store as RedisStore).durability()).toMatch(/^no replica/);
    const client = new Client(server);
    const agent = await client.activeAgent(['echo']);
    const startedMs = performance.now();
    const res = await client.hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
    const tookMs = performance.now() - startedMs;
    expect(res.status, res.text).toBe(200);
    // A wait that ran would take the whole 3 s (there is no replica to answer it).
    expect(tookMs).toBeLessThan(3000);
    // No round ran: a round writes its marker in the agent's slot before it sends WAIT.
    const keys = keyLayout(server.config.REDIS_KEY_PREFIX);
    const marker = await queryRedis(addressOf(url), (redis) => redis.exists(keys.durabilityMarker(keys.agent(agent.id))));
    expect(marker).toBe(0);
    console.log(`single Redis, auto, no replica: revocation answered 200 in ${Math.round(tookMs)} ms`);
  });

  /** The not-durable answer of a server that waits 200 ms for a replica. */
  const NOT_DURABLE_200 = /^the revocation is in force, but no Redis replica confirmed it within 200 ms, so a failover could still undo it; repeat the request to confirm it$/;
  let requiring: Promise<TestServer> | undefined;
  /** One server for the tests below: it requires a replica, waits 200 ms for it, and flushes its audit trail quickly. */
  const requiringAReplica = (): Promise<TestServer> =>
    (requiring ??= start({ REDIS_WAIT_REPLICAS: '1', REDIS_WAIT_TIMEOUT_MS: '200', AUDIT_FLUSH_MS: '50' }));

  it('with REDIS_WAIT_REPLICAS=1 and no replica, a revocation is 503 not durable, yet the agent is revoked, and repeating it is 503 again', async () => {
    const server = await requiringAReplica();
    expect((server.store as RedisStore).durability()).toBe('1 replica');
    const client = new Client(server);
    const agent = await client.activeAgent(['echo']);

    const first = await client.hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
    expect(code(first), first.text).toBe('503 service_unavailable');
    expect(first.json.message).toMatch(NOT_DURABLE_200);
    expect(first.headers.get('retry-after')).toBe('1');

    // In force on the master all the same.
    const status = await client.status(agent.host, agent.id);
    expect(status.json.status, status.text).toBe('revoked');
    expect(code(await client.execute(agent, 'echo', {}))).toBe('403 agent_revoked');

    const again = await client.hostPost('/agent/revoke', agent.host, { agent_id: agent.id });
    expect(code(again), again.text).toBe('503 service_unavailable');
    expect(again.json.message).toMatch(NOT_DURABLE_200);
    // The admin's revoke of the same agent says the same.
    const byAdmin = await client.admin('POST', `/admin/agents/${agent.id}/revoke`);
    expect(code(byAdmin), byAdmin.text).toBe('503 service_unavailable');
    expect(byAdmin.json.message).toMatch(NOT_DURABLE_200);
  });

  it('a revocation answered 503 (in force, not yet durable) is in the audit trail, whoever revoked, as a host’s revocation is', async () => {
    const server = await requiringAReplica();
    const client = new Client(server);
    const [byHost, byAdmin, underRevokedHost] = await Promise.all([client.activeAgent(['echo']), client.activeAgent(['echo']), client.activeAgent(['echo'])]);
    expect(code(await client.hostPost('/agent/revoke', byHost.host, { agent_id: byHost.id }))).toBe('503 service_unavailable');
    expect(code(await client.admin('POST', `/admin/agents/${byAdmin.id}/revoke`))).toBe('503 service_unavailable');
    const hostId = String(underRevokedHost.registration.host_id);
    expect(code(await client.admin('POST', `/admin/hosts/${hostId}/revoke`))).toBe('503 service_unavailable');

    const events = async (query: Record<string, string>) => {
      const res = await client.admin('GET', `/admin/audit?${new URLSearchParams(query)}`);
      expect(res.status, res.text).toBe(200);
      return res.json.events as Array<{ type: string; actor: string }>;
    };
    // The host's revocation, recorded before its wait, shows the trail has been written past the
    // two agents' revocations, which came first.
    await waitFor('the host revocation in the audit trail', 5000, async () =>
      (await events({ host_id: hostId, type: 'host.revoked' })).length > 0 ? null : 'not yet');
    expect((await events({ agent_id: byHost.id, type: 'agent.revoked' })).map((e) => e.actor), `no agent.revoked event for ${byHost.id}, revoked by its host`).toEqual(['host']);
    expect((await events({ agent_id: byAdmin.id, type: 'agent.revoked' })).map((e) => e.actor), `no agent.revoked event for ${byAdmin.id}, revoked by the admin`).toEqual(['admin']);
  });

  it('a host that revoked itself and was answered 503 can repeat the revocation to confirm it, as the answer tells it to', async () => {
    const server = await requiringAReplica();
    const client = new Client(server);
    const host = await client.linkedHost(['echo']);
    const first = await client.hostPost('/host/revoke', host);
    expect(code(first), first.text).toBe('503 service_unavailable');
    expect(first.json.message).toMatch(NOT_DURABLE_200);
    // docs/stances.md: "Repeating the request changes nothing more and confirms it." With still no
    // replica, the repeat is 503 again; refusing it (403 host_revoked) would leave the host no way
    // to ever learn that its revocation is durable.
    const again = await client.hostPost('/host/revoke', host);
    expect(code(again), again.text).toBe('503 service_unavailable');
    expect(again.json.message).toMatch(NOT_DURABLE_200);
  });
});
