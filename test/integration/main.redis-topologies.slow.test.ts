// `npm start` on the Redis topologies an operator runs (DESIGN §10: single, Sentinel or Cluster,
// chosen by configuration, not code), configured the way an operator configures it: the environment
// alone. For a Redis Cluster with a replica on every master and for a password-protected Sentinel
// set, the start-up line must name the topology and say that withdrawals wait for one replica, and
// the protocol must work end to end through the process: register, approve with the admin API,
// execute, revoke, and the revoked agent refused. A wrong password must stop the start with a
// message that names the variable to fix, and a non-zero exit status.
//
// The Sentinel set's data nodes require the password; its sentinels do not (test/support/
// redis-sentinel.ts sets no requirepass on them), so REDIS_SENTINEL_PASSWORD has nothing to do here.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitOf, spawnAgentgate, startAgentgate, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { code, http } from '../support/client.ts';
import { agentJwt, hostJwt, newEd25519 } from '../support/keys.ts';
import { freePort } from '../support/net.ts';
import { startThrowawayCluster } from '../support/redis-cluster.ts';
import { startThrowawaySentinel, type ThrowawaySentinel } from '../support/redis-sentinel.ts';
import { uniquePrefix } from '../support/redis.ts';

const ADMIN_TOKEN = `topologies-admin-${randomBytes(12).toString('hex')}`;

/**
 * `npm start` itself, in a process group of its own as a terminal runs it, so that stopping it
 * stops npm and the server it started alike.
 */
const AS_AN_OPERATOR = { via: 'npm', detached: true } as const;

/** How long a topology may take to start: six redis-server processes, or five, on a busy machine. */
const TOPOLOGY_START_MS = 40_000;

/** The environment an operator gives `npm start`, plus the issuer the test signs for. */
async function operatorEnv(redis: Record<string, string>): Promise<{ port: number; env: Record<string, string> }> {
  const port = await freePort();
  return {
    port,
    env: {
      ISSUER: `http://127.0.0.1:${port}`,
      ADMIN_TOKEN,
      REDIS_KEY_PREFIX: uniquePrefix('main-topology'),
      // A healthy replica confirms within milliseconds, but on a 2-core machine running other suites
      // it once took over 300 ms: the revocation here must be a 200, so the wait is generous.
      REDIS_WAIT_TIMEOUT_MS: '5000',
      ...redis,
    },
  };
}

/** The JSON log lines the process printed whose message is `msg`. */
function logLines(output: string, msg: string): Record<string, unknown>[] {
  return output
    .split('\n')
    .filter((line) => line.includes(`"msg":${JSON.stringify(msg)}`))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The process logged which Redis topology it uses, and how many replicas a withdrawal waits for. */
function expectUsingRedisLine(gate: Agentgate, topology: string, withdrawalsWaitFor: string): void {
  const [using] = logLines(gate.output(), 'using Redis');
  expect(using, gate.output()).toBeDefined();
  expect(using!.topology).toBe(topology);
  expect(using!.withdrawalsWaitFor).toBe(withdrawalsWaitFor);
}

/**
 * The whole life of one agent through the running process: an unknown host registers it (the agent
 * waits for approval), the admin approves it with ADMIN_TOKEN, it executes (200), its host revokes
 * it (200: the revocation was confirmed by a replica), and its next execute is refused.
 */
async function lifeOfAnAgent(gate: Agentgate): Promise<void> {
  const host = await newEd25519();
  const agentKey = await newEd25519();
  const registered = await http('POST', `${gate.base}/agent/register`, {
    token: await hostJwt(host, gate.base, { agentKey }),
    json: { name: 'topology-agent', mode: 'delegated', capabilities: ['echo'] },
  });
  expect(registered.status, registered.text).toBe(200);
  expect(registered.json.status, registered.text).toBe('pending');
  const agent = { id: registered.json.agent_id as string, key: agentKey, host };

  const approved = await http('POST', `${gate.base}/admin/agents/${agent.id}/approve`, { token: ADMIN_TOKEN, json: { user_id: 'user-1' } });
  expect(approved.status, approved.text).toBe(200);
  expect(approved.json.status, approved.text).toBe('active');

  const executeUrl = `${gate.base}/capability/execute`;
  const execute = async () => http('POST', executeUrl, { token: await agentJwt(agent, executeUrl), json: { capability: 'echo', arguments: {} } });
  const allowed = await execute();
  expect(allowed.status, allowed.text).toBe(200);

  const revoked = await http('POST', `${gate.base}/agent/revoke`, { token: await hostJwt(host, gate.base), json: { agent_id: agent.id } });
  expect(revoked.status, revoked.text).toBe(200);
  expect(revoked.json).toEqual({ agent_id: agent.id, status: 'revoked' });

  expect(code(await execute())).toBe('403 agent_revoked');
  const status = await http('GET', `${gate.base}/agent/status?agent_id=${encodeURIComponent(agent.id)}`, { token: await hostJwt(host, gate.base) });
  expect(status.status, status.text).toBe(200);
  expect(status.json.status).toBe('revoked');
}

/**
 * `npm start` on a throwaway Redis topology for the tests of the enclosing describe block: before
 * them the topology starts, then the server, on the settings `redisEnv` names for that topology;
 * after them the server is killed and the topology stopped, even when the kill fails. Read the
 * topology and the server in the tests, once both have started.
 */
function npmStartOnTopology<Topology extends { stop(): Promise<void> }>(
  startTopology: () => Promise<Topology>, redisEnv: (topology: Topology) => Record<string, string>,
): { readonly topology: Topology; readonly gate: Agentgate } {
  let topology: Topology | undefined;
  let gate: Agentgate | undefined;
  beforeAll(async () => {
    topology = await startTopology();
    const { port, env } = await operatorEnv(redisEnv(topology));
    gate = await startAgentgate({ port, env, ...AS_AN_OPERATOR });
  }, WITH_SERVERS_TIMEOUT_MS);
  afterAll(async () => {
    try {
      await gate?.stop('SIGKILL');
    } finally {
      await topology?.stop();
    }
  });
  return {
    get topology() {
      if (!topology) throw new Error('the topology did not start');
      return topology;
    },
    get gate() {
      if (!gate) throw new Error('npm start did not start');
      return gate;
    },
  };
}

/**
 * `npm start` on `redis` (the Redis settings an operator gave) that must fail: it must exit, with
 * a status that is not zero (nor missing, as it would be for a kill). Answers what it printed.
 */
async function failedNpmStart(redis: Record<string, string>, what: string): Promise<string> {
  const { port, env } = await operatorEnv(redis);
  const started = spawnAgentgate({ PORT: String(port), ...env }, AS_AN_OPERATOR);
  const exit = await exitOf(started, what);
  const output = started.output();
  expect(exit.code, output).not.toBe(0);
  expect(exit.code, output).not.toBeNull();
  return output;
}

describe('npm start on a Redis Cluster of three masters with a replica each', () => {
  const running = npmStartOnTopology(
    () => startThrowawayCluster(3, { replicasPerMaster: 1, readyTimeoutMs: TOPOLOGY_START_MS }),
    (cluster) => ({ REDIS_CLUSTER_NODES: cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',') }),
  );

  it('says in its start-up line that it runs on the cluster and that withdrawals wait for a replica on every master', () => {
    const { topology: cluster, gate } = running;
    const seeds = cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',');
    expect(gate.startup.store).toMatch(/^redis cluster \(/);
    expect(gate.startup.store).toContain(`Redis Cluster ${seeds}`);
    expect(gate.startup.store).toContain('withdrawals wait for 1 replica on every master)');
    expectUsingRedisLine(gate, 'cluster', '1 replica on every master');
  });

  it('registers, approves, executes and revokes an agent, and refuses it once revoked', async () => {
    await lifeOfAnAgent(running.gate);
  }, WITH_SERVERS_TIMEOUT_MS);
});

describe('npm start on a Redis Sentinel set whose data nodes require a password', () => {
  const password = `sentinel-pw-${randomBytes(9).toString('hex')}`;
  const sentinelEnv = (set: ThrowawaySentinel, dataPassword: string): Record<string, string> => ({
    REDIS_SENTINELS: set.sentinels.map((s) => `${s.host}:${s.port}`).join(','),
    REDIS_SENTINEL_MASTER: set.masterName,
    REDIS_PASSWORD: dataPassword,
  });
  const running = npmStartOnTopology(
    () => startThrowawaySentinel({ password, readyTimeoutMs: TOPOLOGY_START_MS }),
    (set) => sentinelEnv(set, password),
  );

  it('says in its start-up line that it runs on the Sentinel set and that withdrawals wait for a replica', () => {
    const { topology: set, gate } = running;
    expect(gate.startup.store).toMatch(/^redis sentinel \(/);
    expect(gate.startup.store).toContain(`Redis Sentinel master "${set.masterName}" via `);
    expect(gate.startup.store).toContain('withdrawals wait for 1 replica)');
    // The password is a secret: nothing the process printed repeats it.
    expect(gate.output()).not.toContain(password);
    expectUsingRedisLine(gate, 'sentinel', '1 replica');
  });

  it('registers, approves, executes and revokes an agent, and refuses it once revoked', async () => {
    await lifeOfAnAgent(running.gate);
  }, WITH_SERVERS_TIMEOUT_MS);

  it('refuses to start with a wrong REDIS_PASSWORD, exiting non-zero with a message that names REDIS_PASSWORD', async () => {
    const wrong = `wrong-${randomBytes(9).toString('hex')}`;
    const output = await failedNpmStart(sentinelEnv(running.topology, wrong), 'npm start with a wrong REDIS_PASSWORD');
    expect(output).toContain('agentgate failed to start');
    expect(output).toMatch(/WRONGPASS|refused the credentials/);
    expect(output).toContain('REDIS_PASSWORD');
    expect(output).not.toContain('agentgate listening');
    // Neither password is echoed back into the log.
    expect(output).not.toContain(wrong);
    expect(output).not.toContain(password);
  }, WITH_SERVERS_TIMEOUT_MS);

  it('refuses to start without REDIS_PASSWORD when the data nodes require one, naming REDIS_PASSWORD', async () => {
    const { REDIS_PASSWORD: _password, ...withoutPassword } = sentinelEnv(running.topology, password);
    const output = await failedNpmStart(withoutPassword, 'npm start without REDIS_PASSWORD');
    expect(output).toMatch(/NOAUTH|refused the credentials/);
    expect(output).toContain('REDIS_PASSWORD');
    expect(output).not.toContain('agentgate listening');
  }, WITH_SERVERS_TIMEOUT_MS);
});
