// A real Redis Cluster for the store contract (DESIGN §10: the tests include a run against a local
// Redis Cluster). Uses REDIS_CLUSTER_NODES (host:port,host:port,...) when set; otherwise starts
// three masters with redis-server on free ports, joins them with `redis-cli --cluster create`, and
// removes every process and temporary directory on stop().
//
// For failover tests, startThrowawayCluster also starts replicas (replicasPerMaster) and hands back
// the means to break the cluster the way production breaks: freeze a node (SIGSTOP), kill it
// (SIGKILL), and promote a replica by hand (CLUSTER FAILOVER TAKEOVER), reading who is master of
// what from CLUSTER NODES rather than from what the helper started, since roles move in a failover.
import { execFile, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { freePort, killAndWait, killOnExit, queryRedis, signalServer, spawnServer, waitFor } from './redis.ts';

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

/** One node as CLUSTER NODES describes it, plus what this helper has done to its process. */
export interface ClusterNodeInfo {
  id: string;
  host: string;
  port: number;
  role: 'master' | 'replica';
  /** For a replica: the port of the master it replicates (undefined if the cluster names none). */
  masterPort?: number;
  /** For a master: the slot ranges it serves, inclusive; a master that lost its slots has none. */
  slots?: [number, number][];
  /** 'fail' once the cluster agreed the node is down, 'pfail' while only the asked node suspects it. */
  health: 'ok' | 'pfail' | 'fail';
  /** 'paused' after pause(), 'killed' after kill(), else 'running'. */
  process: 'running' | 'paused' | 'killed';
}

export interface StartClusterOptions {
  /** Replicas started for each master (default 0: masters only). */
  replicasPerMaster?: number;
  /** How long starting, creating and syncing the cluster may take (default 20 s). */
  readyTimeoutMs?: number;
  /**
   * cluster-node-timeout (default 2000 ms): how long a node may be unreachable before the others
   * suspect it, so how soon a failover test sees a dead master flagged and a replica elect itself.
   */
  nodeTimeoutMs?: number;
}

/** A cluster this helper started, with the faults a failover test injects. Ports name nodes. */
export interface ThrowawayCluster extends TestCluster {
  /** Every node started, masters and replicas, in start order (roles: see topology()). */
  nodes: ClusterNode[];
  /** The cluster as CLUSTER NODES on fromPort (default: the first running node that answers) sees it. */
  topology(fromPort?: number): Promise<ClusterNodeInfo[]>;
  /** The ports of the replicas of masterPort, as the cluster sees them now. */
  replicasOf(masterPort: number): Promise<number[]>;
  /** The hash slot of key (CLUSTER KEYSLOT on a running node). */
  keySlot(key: string): Promise<number>;
  /** The port of the master serving key's slot now (even one that is down but not yet replaced). */
  masterPortForKey(key: string): Promise<number>;
  /** Freezes the node (SIGSTOP): its port still accepts connections, but nothing is answered. */
  pause(port: number): void;
  /** Lets a paused node go on (SIGCONT). */
  resume(port: number): void;
  /** Kills the node (SIGKILL) and waits until the process is gone. */
  kill(port: number): Promise<void>;
  /**
   * Makes the replica on replicaPort a master at once (CLUSTER FAILOVER TAKEOVER: no agreement from
   * its master or the other masters is needed, so it works when the master is dead), then waits
   * until it is master with cluster_state:ok and every other running node sees it as master with
   * cluster_state:ok, so a client sent anywhere is routed to it.
   */
  promote(replicaPort: number, timeoutMs?: number): Promise<void>;
  /** Waits until every running node has flagged the node on port as failed (fail, not just pfail). */
  waitForFail(port: number, timeoutMs?: number): Promise<void>;
  /** Waits until each running replica of masterPort has everything the master has written so far. */
  waitForReplicasInSync(masterPort: number, timeoutMs?: number): Promise<void>;
}

const HOW_TO_GET_A_CLUSTER =
  'The Redis Cluster tests start three redis-server processes and need redis-server and redis-cli 7 on PATH ' +
  '(e.g. `apt-get install redis-server` or `brew install redis`), or an existing cluster in REDIS_CLUSTER_NODES=host:port,host:port,...';

const HOST = '127.0.0.1';

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

interface StartedNode {
  port: number;
  child: ChildProcess;
  state: 'running' | 'paused' | 'killed';
}

/**
 * Starts masters × (1 + replicasPerMaster) cluster-enabled servers, creates the cluster, and waits
 * until it is usable: every node says cluster_state:ok and sees every master with its replicas, and
 * every replica is connected to its master and has caught up with it.
 */
export async function startThrowawayCluster(masters: number, options: StartClusterOptions = {}): Promise<ThrowawayCluster> {
  const replicasPerMaster = options.replicasPerMaster ?? 0;
  const readyTimeoutMs = options.readyTimeoutMs ?? 20_000;
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 2000;
  if (!Number.isInteger(masters) || masters < 3) throw new Error(`a Redis Cluster needs at least 3 masters (asked for ${masters})`);
  if (!Number.isInteger(replicasPerMaster) || replicasPerMaster < 0) throw new Error(`replicasPerMaster must be 0 or more (got ${replicasPerMaster})`);

  const dir = mkdtempSync(join(tmpdir(), 'agentgate-cluster-'));
  const started = new Map<number, StartedNode>();
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // SIGKILL ends paused processes too, so nothing a test froze outlives the cluster.
    await Promise.all([...started.values()].map((node) => killAndWait(node.child)));
    rmSync(dir, { recursive: true, force: true });
  };

  const nodes: ClusterNode[] = [];
  try {
    const ports = await distinctFreePorts(2 * masters * (1 + replicasPerMaster));
    for (let i = 0; i < masters * (1 + replicasPerMaster); i++) {
      const [port, busPort] = [ports[2 * i]!, ports[2 * i + 1]!];
      // One directory per node: a replica's full sync writes dump.rdb into its directory and loads
      // it from there, and two replicas sharing one directory could each load the other's file.
      const nodeDir = join(dir, String(port));
      mkdirSync(nodeDir);
      const child = await spawnServer(nodeArgs(nodeDir, port, busPort, nodeTimeoutMs));
      killOnExit(child);
      started.set(port, { port, child, state: 'running' });
      nodes.push({ host: HOST, port });
    }
    const startedAt = Date.now();
    const remaining = (): number => Math.max(1, readyTimeoutMs - (Date.now() - startedAt));
    for (const node of nodes) {
      await waitFor(`redis-server on port ${node.port} answering PING`, remaining(), async () => {
        const child = started.get(node.port)?.child;
        if (child?.exitCode !== null || child.signalCode !== null) return 'the process exited (is the port taken?)';
        return (await ping(node.port)) ? null : 'no PONG yet';
      });
    }
    // redis-cli chooses which addresses become masters and which master each replica follows;
    // topology() reads the outcome rather than assuming it.
    await run(
      'redis-cli',
      ['--cluster', 'create', ...nodes.map((n) => `${n.host}:${n.port}`), '--cluster-replicas', String(replicasPerMaster), '--cluster-yes'],
      { timeout: remaining() },
    ).catch((error: unknown) => {
      const output = error as { stdout?: string; stderr?: string; message?: string };
      throw new Error(`redis-cli --cluster create failed: ${output.stderr || output.stdout || output.message}`, { cause: error });
    });
    await waitFor(`the cluster of ${masters} masters with ${replicasPerMaster} replica(s) each becoming ready`, remaining(), async () => {
      for (const node of nodes) {
        const missing = await clusterReadyOn(node.port, masters, replicasPerMaster);
        if (missing) return `node ${node.port}: ${missing}`;
      }
      const view = await readTopology(nodes[0]!.port, started);
      for (const master of view.filter((n) => n.role === 'master')) {
        const replicaPorts = view.filter((n) => n.role === 'replica' && n.masterPort === master.port).map((n) => n.port);
        const missing = await replicasInSync(master.port, replicaPorts);
        if (missing) return `master ${master.port}: ${missing}`;
      }
      return null;
    });
  } catch (error) {
    await stop();
    throw error;
  }

  const node = (port: number): StartedNode => {
    const found = started.get(port);
    if (!found) throw new Error(`port ${port} is not a node of this cluster (nodes: ${[...started.keys()].join(', ')})`);
    return found;
  };
  const anyRunningPort = (): number => {
    const live = [...started.values()].find((n) => n.state === 'running');
    if (!live) throw new Error('no node of the cluster is running (all paused or killed)');
    return live.port;
  };
  const runningPorts = (): number[] => [...started.values()].filter((n) => n.state === 'running').map((n) => n.port);

  const topology = (fromPort?: number): Promise<ClusterNodeInfo[]> => readTopology(fromPort ?? anyRunningPort(), started);
  const keySlot = (key: string): Promise<number> => queryRedis({ host: HOST, port: anyRunningPort() }, (client) => client.cluster('KEYSLOT', key));

  return {
    nodes,
    stop,
    topology,
    keySlot,
    async replicasOf(masterPort) {
      return (await topology()).filter((n) => n.role === 'replica' && n.masterPort === masterPort).map((n) => n.port);
    },
    async masterPortForKey(key) {
      const slot = await keySlot(key);
      const master = (await topology()).find((n) => n.role === 'master' && n.slots?.some(([from, to]) => slot >= from && slot <= to));
      if (!master) throw new Error(`no master serves slot ${slot} (of key ${key})`);
      return master.port;
    },
    pause(port) {
      const target = node(port);
      signalServer(target.child, 'SIGSTOP', `cluster node ${port}`);
      target.state = 'paused';
    },
    resume(port) {
      const target = node(port);
      signalServer(target.child, 'SIGCONT', `cluster node ${port}`);
      target.state = 'running';
    },
    async kill(port) {
      const target = node(port);
      await killAndWait(target.child);
      target.state = 'killed';
    },
    async promote(replicaPort, timeoutMs = 15_000) {
      const target = node(replicaPort);
      if (target.state !== 'running') throw new Error(`cannot promote node ${replicaPort}: it is ${target.state}`);
      await queryRedis({ host: HOST, port: replicaPort }, async (client) => {
        try {
          await client.cluster('FAILOVER', 'TAKEOVER');
        } catch (error) {
          // A replica resumed after its master died may have won an election of its own before the
          // takeover arrived; it is then a master already, which is what promote() is for.
          if (!(await isMaster(client))) throw new Error(`CLUSTER FAILOVER TAKEOVER on ${replicaPort} failed: ${(error as Error).message}`, { cause: error });
        }
      });
      await waitFor(`node ${replicaPort} becoming a master with cluster_state:ok after CLUSTER FAILOVER TAKEOVER`, timeoutMs, async () => {
        const missing = await servesAsMaster(replicaPort, replicaPort);
        if (missing) return missing;
        for (const port of runningPorts().filter((p) => p !== replicaPort)) {
          const elsewhere = await servesAsMaster(port, replicaPort);
          if (elsewhere) return `node ${port}: ${elsewhere}`;
        }
        return null;
      });
    },
    async waitForFail(port, timeoutMs = 15_000) {
      node(port);
      await waitFor(`the cluster flagging node ${port} as failed`, timeoutMs, async () => {
        for (const from of runningPorts().filter((p) => p !== port)) {
          const seen = (await readTopology(from, started).catch(() => [])).find((n) => n.port === port);
          if (seen?.health !== 'fail') return `node ${from} sees it as ${seen?.health ?? 'unknown'}`;
        }
        return null;
      });
    },
    async waitForReplicasInSync(masterPort, timeoutMs = 10_000) {
      const replicaPorts = (await topology())
        .filter((n) => n.role === 'replica' && n.masterPort === masterPort && n.process === 'running')
        .map((n) => n.port);
      await waitFor(`the replicas of ${masterPort} (${replicaPorts.join(', ')}) catching up with it`, timeoutMs, () =>
        replicasInSync(masterPort, replicaPorts),
      );
    },
  };
}

/** Redis 7 takes the cluster bus port as an option, so both ports come from the OS. */
function nodeArgs(dir: string, port: number, busPort: number, nodeTimeoutMs: number): string[] {
  return [
    '--port', String(port),
    '--cluster-port', String(busPort),
    '--bind', '127.0.0.1',
    '--cluster-enabled', 'yes',
    '--cluster-config-file', `nodes-${port}.conf`,
    '--cluster-node-timeout', String(nodeTimeoutMs),
    // Written out, though it is the default, because failover tests depend on it: while a master is
    // down and not yet replaced, every node refuses every command (CLUSTERDOWN), not only those for
    // the lost slots. That is what operators run, so it is the outage a test should see.
    '--cluster-require-full-coverage', 'yes',
    // A replica cut off from its master for longer than node-timeout × this factor refuses to fail
    // over by itself. Tests freeze and kill processes for whatever time they need, so with the
    // default (10) whether a replica took over would depend on how long a test slept; with 0 a
    // replica always may. (promote()'s TAKEOVER does not check it either way.)
    '--cluster-replica-validity-factor', '0',
    // A replica's first sync would otherwise wait 5 s for more replicas to share one transfer.
    '--repl-diskless-sync-delay', '0',
    '--dir', dir,
    '--save', '',
    '--appendonly', 'no',
  ];
}

/** count ports, each free a moment ago and different from the others (the OS may hand one out twice). */
async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  for (let attempt = 0; ports.size < count; attempt++) {
    if (attempt > count * 10) throw new Error(`could not find ${count} distinct free ports`);
    ports.add(await freePort());
  }
  return [...ports];
}

async function ping(port: number): Promise<boolean> {
  try {
    return (await queryRedis({ host: HOST, port }, (client) => client.ping(), 200)) === 'PONG';
  } catch {
    return false;
  }
}

/** What node port still lacks to serve a cluster of this shape (null: nothing). */
async function clusterReadyOn(port: number, masters: number, replicasPerMaster: number): Promise<string | null> {
  try {
    return await queryRedis({ host: HOST, port }, async (client) => {
      const state = infoField(String(await client.cluster('INFO')), 'cluster_state');
      if (state !== 'ok') return `cluster_state:${state ?? '?'}`;
      const view = parseClusterNodes(String(await client.cluster('NODES')));
      const masterIds = view.filter((n) => n.flags.includes('master')).map((n) => n.id);
      if (masterIds.length !== masters) return `sees ${masterIds.length} masters, not ${masters}`;
      for (const id of masterIds) {
        const replicas = view.filter((n) => n.flags.includes('slave') && n.masterId === id).length;
        if (replicas !== replicasPerMaster) return `sees ${replicas} replica(s) of ${id}, not ${replicasPerMaster}`;
      }
      return null;
    });
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

/**
 * What the replicas on replicaPorts still lack (null: nothing): the master must list each of them
 * online at its own replication offset, and each must report its link to the master up.
 */
async function replicasInSync(masterPort: number, replicaPorts: number[]): Promise<string | null> {
  try {
    const info = await queryRedis({ host: HOST, port: masterPort }, async (client) => String(await client.info('replication')));
    const offset = Number(infoField(info, 'master_repl_offset'));
    const listed = [...info.matchAll(/^slave\d+:(.*)$/gm)].map(
      (match) => Object.fromEntries((match[1] ?? '').split(',').map((pair) => pair.split('='))) as Record<string, string>,
    );
    for (const port of replicaPorts) {
      const replica = listed.find((entry) => Number(entry['port']) === port);
      if (!replica) return `does not list replica ${port} as connected`;
      if (replica['state'] !== 'online') return `lists replica ${port} as ${replica['state']}`;
      if (Number(replica['offset']) !== offset) return `replica ${port} is at offset ${replica['offset']}, the master at ${offset}`;
      const link = await queryRedis({ host: HOST, port }, async (client) => infoField(String(await client.info('replication')), 'master_link_status'));
      if (link !== 'up') return `replica ${port} says master_link_status:${link ?? '?'}`;
    }
    return null;
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

/** What keeps node `port` from routing to `masterPort` as a master with cluster_state:ok (null: nothing). */
async function servesAsMaster(port: number, masterPort: number): Promise<string | null> {
  try {
    return await queryRedis({ host: HOST, port }, async (client) => {
      const state = infoField(String(await client.cluster('INFO')), 'cluster_state');
      const seen = parseClusterNodes(String(await client.cluster('NODES'))).find((n) => n.port === masterPort);
      if (!seen?.flags.includes('master')) return `sees ${masterPort} as ${seen?.flags.join(',') ?? 'unknown'}`;
      if (seen.slots.length === 0) return `sees ${masterPort} as a master without slots`;
      if (state !== 'ok') return `cluster_state:${state ?? '?'}`;
      return null;
    });
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

async function isMaster(client: Redis): Promise<boolean> {
  const myself = parseClusterNodes(String(await client.cluster('NODES'))).find((n) => n.flags.includes('myself'));
  return myself?.flags.includes('master') ?? false;
}

async function readTopology(fromPort: number, started: Map<number, StartedNode>): Promise<ClusterNodeInfo[]> {
  const text = await queryRedis({ host: HOST, port: fromPort }, async (client) => String(await client.cluster('NODES')));
  const view = parseClusterNodes(text);
  const portById = new Map(view.map((n) => [n.id, n.port]));
  return view.map((n): ClusterNodeInfo => {
    const role = n.flags.includes('master') ? 'master' : 'replica';
    const health = n.flags.includes('fail') ? 'fail' : n.flags.includes('fail?') ? 'pfail' : 'ok';
    const processState = started.get(n.port)?.state ?? 'running';
    return role === 'master'
      ? { id: n.id, host: n.host, port: n.port, role, slots: n.slots, health, process: processState }
      : { id: n.id, host: n.host, port: n.port, role, masterPort: portById.get(n.masterId), health, process: processState };
  });
}

interface ClusterNodesLine {
  id: string;
  host: string;
  port: number;
  flags: string[];
  /** '-' for a master. */
  masterId: string;
  slots: [number, number][];
}

/**
 * CLUSTER NODES: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link>
 * <slot>...`, where a slot is `n` or `from-to`; `[slot->-id]` / `[slot-<-id]` (a slot being
 * migrated) is not served by the node yet, so it is skipped.
 */
function parseClusterNodes(text: string): ClusterNodesLine[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.length > 0)
    .map((line) => {
      const [id = '', address = '', flags = '', masterId = '-', , , , , ...slotFields] = line.split(' ');
      const hostPort = address.split('@')[0] ?? '';
      const colon = hostPort.lastIndexOf(':');
      const slots = slotFields
        .filter((field) => !field.startsWith('['))
        .map((field): [number, number] => {
          const [from, to] = field.split('-');
          return [Number(from), Number(to ?? from)];
        });
      return { id, host: hostPort.slice(0, colon), port: Number(hostPort.slice(colon + 1)), flags: flags.split(','), masterId, slots };
    });
}

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}
