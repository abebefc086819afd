// A real Redis Cluster for the store contract (DESIGN §10: the tests include a run against a local
// Redis Cluster). Uses REDIS_CLUSTER_NODES (host:port,host:port,...) when set; otherwise starts
// three masters with redis-server on free ports, joins them with `redis-cli --cluster create`, and
// removes every process and temporary directory on stop().
import { execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { answersPing, freePort, killAndWait, sleep, spawnServer } from './redis.ts';

const run = promisify(execFile);

export interface ClusterNode {
  host: string;
  port: number;
}

export interface TestCluster {
  nodes: ClusterNode[];
  /** Stops what this helper started (nothing for REDIS_CLUSTER_NODES); safe to call twice. */
  stop(): Promise<void>;
}

const HOW_TO_GET_A_CLUSTER =
  'The Redis Cluster tests start three redis-server processes and need redis-server and redis-cli 7 on PATH ' +
  '(e.g. `apt-get install redis-server` or `brew install redis`), or an existing cluster in REDIS_CLUSTER_NODES=host:port,host:port,...';

/** A Redis Cluster for the tests: REDIS_CLUSTER_NODES, or three fresh local masters. */
export async function clusterForTests(): Promise<TestCluster> {
  const fromEnv = process.env['REDIS_CLUSTER_NODES'];
  if (fromEnv) return { nodes: parseNodes(fromEnv), stop: async () => {} };
  try {
    return await startThrowawayCluster(3);
  } catch (error) {
    throw new Error(`no Redis Cluster for the tests (${(error as Error).message}). ${HOW_TO_GET_A_CLUSTER}`, { cause: error });
  }
}

function parseNodes(list: string): ClusterNode[] {
  return list.split(',').map((entry) => {
    const [host, port] = entry.trim().split(':');
    if (!host || !port || !Number.isInteger(Number(port))) throw new Error(`REDIS_CLUSTER_NODES entry "${entry}" is not host:port`);
    return { host, port: Number(port) };
  });
}

/** Starts `masters` cluster-enabled servers, creates the cluster, and waits until it is usable. */
export async function startThrowawayCluster(masters: number, readyTimeoutMs = 15_000): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'agentgate-cluster-'));
  const children: ChildProcess[] = [];
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await Promise.all(children.map(killAndWait));
    rmSync(dir, { recursive: true, force: true });
  };
  const killOnExit = (): void => children.forEach((child) => child.kill('SIGKILL'));
  process.once('exit', killOnExit);
  try {
    const nodes: ClusterNode[] = [];
    for (let i = 0; i < masters; i++) {
      const [port, busPort] = [await freePort(), await freePort()];
      children.push(await spawnServer(nodeArgs(dir, port, busPort)));
      nodes.push({ host: '127.0.0.1', port });
    }
    const deadline = Date.now() + readyTimeoutMs;
    for (const node of nodes) await waitUntil(deadline, () => answersPing(`redis://${node.host}:${node.port}`, 200));
    await run('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `${n.host}:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: readyTimeoutMs,
    });
    for (const node of nodes) await waitUntil(deadline, () => clusterStateOk(node));
    return { nodes, stop: async () => { process.removeListener('exit', killOnExit); await stop(); } };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Redis 7 takes the cluster bus port as an option, so both ports come from the OS. */
function nodeArgs(dir: string, port: number, busPort: number): string[] {
  return [
    '--port', String(port),
    '--cluster-port', String(busPort),
    '--bind', '127.0.0.1',
    '--cluster-enabled', 'yes',
    '--cluster-config-file', `nodes-${port}.conf`,
    '--cluster-node-timeout', '5000',
    '--dir', dir,
    '--save', '',
    '--appendonly', 'no',
  ];
}

async function clusterStateOk(node: ClusterNode): Promise<boolean> {
  const client = new Redis({ host: node.host, port: node.port, lazyConnect: true, commandTimeout: 500, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    const info = await client.cluster('INFO');
    return /cluster_state:ok/.test(String(info));
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

async function waitUntil(deadlineMs: number, check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) {
    if (Date.now() > deadlineMs) throw new Error('the cluster did not become ready in time');
    await sleep(50);
  }
}
