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
import { startThrowawayCluster, type ThrowawayCluster } from '../support/redis-cluster.ts';
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

describe('npm start on a Redis Cluster of three masters with a replica each', () => {
  let cluster: ThrowawayCluster | undefined;
  let gate: Agentgate | undefined;

  beforeAll(async () => {
    cluster = await startThrowawayCluster(3, { replicasPerMaster: 1, readyTimeoutMs: TOPOLOGY_START_MS });
    const { port, env } = await operatorEnv({ REDIS_CLUSTER_NODES: cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',') });
    gate = await startAgentgate({ port, env, ...AS_AN_OPERATOR });
  }, WITH_SERVERS_TIMEOUT_MS);

  afterAll(async () => {
    try {
      await gate?.stop('SIGKILL');
    } finally {
      await cluster?.stop();
    }
  });

  it('says in its start-up line that it runs on the cluster and that withdrawals wait for a replica on every master', () => {
    const seeds = cluster!.nodes.map((n) => `${n.host}:${n.port}`).join(',');
    expect(gate!.startup.store).toMatch(/^redis cluster \(/);
    expect(gate!.startup.store).toContain(`Redis Cluster ${seeds}`);
    expect(gate!.startup.store).toContain('withdrawals wait for 1 replica on every master)');
    const [using] = logLines(gate!.output(), 'using Redis');
    expect(using, gate!.output()).toBeDefined();
    expect(using!.topology).toBe('cluster');
    expect(using!.withdrawalsWaitFor).toBe('1 replica on every master');
  });

  it('registers, approves, executes and revokes an agent, and refuses it once revoked', async () => {
    await lifeOfAnAgent(gate!);
  }, WITH_SERVERS_TIMEOUT_MS);
});

describe('npm start on a Redis Sentinel set whose data nodes require a password', () => {
  const password = `sentinel-pw-${randomBytes(9).toString('hex')}`;
  let set: ThrowawaySentinel | undefined;
  let gate: Agentgate | undefined;
  const sentinelEnv = (dataPassword: string): Record<string, string> => ({
    REDIS_SENTINELS: set!.sentinels.map((s) => `${s.host}:${s.port}`).join(','),
    REDIS_SENTINEL_MASTER: set!.masterName,
    REDIS_PASSWORD: dataPassword,
  });

  beforeAll(async () => {
    set = await startThrowawaySentinel({ password, readyTimeoutMs: TOPOLOGY_START_MS });
    const { port, env } = await operatorEnv(sentinelEnv(password));
    gate = await startAgentgate({ port, env, ...AS_AN_OPERATOR });
  }, WITH_SERVERS_TIMEOUT_MS);

  afterAll(async () => {
    try {
      await gate?.stop('SIGKILL');
    } finally {
      await set?.stop();
    }
  });

  it('says in its start-up line that it runs on the Sentinel set and that withdrawals wait for a replica', () => {
    expect(gate!.startup.store).toMatch(/^redis sentinel \(/);
    expect(gate!.startup.store).toContain(`Redis Sentinel master "${set!.masterName}" via `);
    expect(gate!.startup.store).toContain('withdrawals wait for 1 replica)');
    // The password is a secret: nothing the process printed repeats it.
    expect(gate!.output()).not.toContain(password);
    const [using] = logLines(gate!.output(), 'using Redis');
    expect(using, gate!.output()).toBeDefined();
    expect(using!.topology).toBe('sentinel');
    expect(using!.withdrawalsWaitFor).toBe('1 replica');
  });

  it('registers, approves, executes and revokes an agent, and refuses it once revoked', async () => {
    await lifeOfAnAgent(gate!);
  }, WITH_SERVERS_TIMEOUT_MS);

  it('refuses to start with a wrong REDIS_PASSWORD, exiting non-zero with a message that names REDIS_PASSWORD', async () => {
    const wrong = `wrong-${randomBytes(9).toString('hex')}`;
    const { port, env } = await operatorEnv(sentinelEnv(wrong));
    const started = spawnAgentgate({ PORT: String(port), ...env }, AS_AN_OPERATOR);
    const exit = await exitOf(started, 'npm start with a wrong REDIS_PASSWORD');
    const output = started.output();
    expect(exit.code, output).not.toBe(0);
    expect(exit.code, output).not.toBeNull();
    expect(output).toContain('agentgate failed to start');
    expect(output).toMatch(/WRONGPASS|refused the credentials/);
    expect(output).toContain('REDIS_PASSWORD');
    expect(output).not.toContain('agentgate listening');
    // Neither password is echoed back into the log.
    expect(output).not.toContain(wrong);
    expect(output).not.toContain(password);
  }, WITH_SERVERS_TIMEOUT_MS);

  it('refuses to start without REDIS_PASSWORD when the data nodes require one, naming REDIS_PASSWORD', async () => {
    const { port, env } = await operatorEnv(sentinelEnv(password));
    delete env.REDIS_PASSWORD;
    const started = spawnAgentgate({ PORT: String(port), ...env }, AS_AN_OPERATOR);
    const exit = await exitOf(started, 'npm start without REDIS_PASSWORD');
    const output = started.output();
    expect(exit.code, output).not.toBe(0);
    expect(exit.code, output).not.toBeNull();
    expect(output).toMatch(/NOAUTH|refused the credentials/);
    expect(output).toContain('REDIS_PASSWORD');
    expect(output).not.toContain('agentgate listening');
  }, WITH_SERVERS_TIMEOUT_MS);
});
