// A throwaway Redis Sentinel set for failover tests: one master, one replica and three sentinels
// (quorum 2), the smallest set that fails over the way an operator's does, with a majority of
// sentinels agreeing the master is down and electing one of them to promote the replica. Timings
// are shortened so a failover takes seconds, not the half minute of production defaults.
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  freePort,
  killAndWait,
  killOnExit,
  queryRedis,
  signalServer,
  spawnServer,
  startThrowawayRedis,
  waitFor,
  type ThrowawayRedis,
} from './redis.ts';

const HOST = '127.0.0.1';

export interface StartSentinelOptions {
  /** The name of the master set (default 'agentgate'). */
  masterName?: string;
  /** requirepass and masterauth on master and replica, and `sentinel auth-pass` on the sentinels. */
  password?: string;
  /** How long starting everything and the sentinels' discovering it may take (default 20 s). */
  readyTimeoutMs?: number;
  /** sentinel down-after-milliseconds (default 1000): how long the master may not answer before a sentinel deems it down. */
  downAfterMs?: number;
  /** sentinel failover-timeout (default 3000); a failed failover attempt is retried after twice this. */
  failoverTimeoutMs?: number;
}

export interface ThrowawaySentinel {
  sentinels: { host: string; port: number }[];
  masterName: string;
  /** The node started as master (it stays this node after a failover: ask waitForFailover who is master now). */
  master: { host: string; port: number };
  /** The node started as replica of master. */
  replica: { host: string; port: number };
  /** The data nodes' password, if the set has one. */
  password: string | undefined;
  /** Kills a master, replica or sentinel (SIGKILL) and waits until it is gone. */
  kill(port: number): Promise<void>;
  /** Freezes a master, replica or sentinel (SIGSTOP). */
  pause(port: number): void;
  /** Lets a paused process go on (SIGCONT). */
  resume(port: number): void;
  /**
   * Waits until every running sentinel names a master other than the one they named before (the
   * start's master, or the one the previous waitForFailover returned), and that node says it is a
   * master (ROLE), so a client that asks any sentinel now reaches a writable master.
   */
  waitForFailover(timeoutMs?: number): Promise<{ newMasterPort: number }>;
  /**
   * Waits until the other data node is a replica of the current master and has everything it has
   * written so far. After a failover the old master, once resumed or restarted, is turned into a
   * replica only when the sentinels have seen it claim to be master for some 8 s (Sentinel's own
   * wait, measured at about 11 s here), so the default timeout is 20 s; until then both nodes
   * accept writes, and the old master's are lost when it is turned into a replica.
   */
  waitForReplicaInSync(timeoutMs?: number): Promise<void>;
  /** Kills every process, paused ones too, and removes every directory; safe to call twice. */
  stop(): Promise<void>;
}

interface SentinelProcess {
  port: number;
  child: ChildProcess;
  state: 'running' | 'paused' | 'killed';
}

/** Starts the master, its replica and three sentinels, and waits until the sentinels see the whole set. */
export async function startThrowawaySentinel(options: StartSentinelOptions = {}): Promise<ThrowawaySentinel> {
  const masterName = options.masterName ?? 'agentgate';
  const password = options.password;
  const readyTimeoutMs = options.readyTimeoutMs ?? 20_000;
  const downAfterMs = options.downAfterMs ?? 1000;
  const failoverTimeoutMs = options.failoverTimeoutMs ?? 3000;
  const startedAt = Date.now();
  const remaining = (): number => Math.max(1, readyTimeoutMs - (Date.now() - startedAt));

  const dir = mkdtempSync(join(tmpdir(), 'agentgate-sentinel-'));
  const dataNodes: ThrowawayRedis[] = [];
  const processes = new Map<number, SentinelProcess>();
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // SIGKILL ends paused processes too; ThrowawayRedis.stop() also removes each data node's directory.
    await Promise.all([...dataNodes.map((node) => node.stop()), ...[...processes.values()].map((p) => killAndWait(p.child))]);
    rmSync(dir, { recursive: true, force: true });
  };

  // Either node may be master after a failover, so both carry what a master and a replica need:
  // masterauth so the old master can sync from the new one, and no wait before a full sync (a
  // replica's first sync would otherwise wait 5 s for more replicas to share the transfer).
  const dataArgs = ['--repl-diskless-sync-delay', '0', ...(password === undefined ? [] : ['--masterauth', password])];
  const sentinelPorts: number[] = [];
  try {
    const master = await startThrowawayRedis(dataArgs, { password, readyTimeoutMs: remaining() });
    dataNodes.push(master);
    const replica = await startThrowawayRedis([...dataArgs, '--replicaof', HOST, String(master.port)], { password, readyTimeoutMs: remaining() });
    dataNodes.push(replica);
    for (const node of dataNodes) processes.set(node.port, { port: node.port, child: node.process, state: 'running' });

    for (let i = 0; i < 3; i++) {
      let port = await freePort();
      while (processes.has(port) || sentinelPorts.includes(port)) port = await freePort();
      const config = join(dir, `sentinel-${port}.conf`);
      // Sentinel rewrites its configuration file as it learns the set, so each one has its own.
      writeFileSync(config, sentinelConfig({ port, dir, masterName, masterPort: master.port, password, downAfterMs, failoverTimeoutMs }));
      const child = await spawnServer([config, '--sentinel']);
      killOnExit(child);
      processes.set(port, { port, child, state: 'running' });
      sentinelPorts.push(port);
    }

    await waitFor(`the sentinels (${sentinelPorts.join(', ')}) knowing master ${master.port}, replica ${replica.port} and each other`, remaining(), async () => {
      for (const port of sentinelPorts) {
        const child = processes.get(port)?.child;
        if (child?.exitCode !== null || child.signalCode !== null) return `sentinel ${port} exited (is its port taken?)`;
        const missing = await sentinelSeesSet(port, masterName, master.port, replica.port);
        if (missing) return `sentinel ${port}: ${missing}`;
      }
      return null;
    });
  } catch (error) {
    await stop();
    throw error;
  }

  const [masterNode, replicaNode] = dataNodes as [ThrowawayRedis, ThrowawayRedis];
  let knownMasterPort = masterNode.port;
  const processOn = (port: number): SentinelProcess => {
    const found = processes.get(port);
    if (!found) throw new Error(`port ${port} is not part of this sentinel set (ports: ${[...processes.keys()].join(', ')})`);
    return found;
  };
  const runningSentinels = (): number[] => sentinelPorts.filter((port) => processes.get(port)?.state === 'running');

  return {
    sentinels: sentinelPorts.map((port) => ({ host: HOST, port })),
    masterName,
    master: { host: HOST, port: masterNode.port },
    replica: { host: HOST, port: replicaNode.port },
    password,
    async kill(port) {
      const target = processOn(port);
      await killAndWait(target.child);
      target.state = 'killed';
    },
    pause(port) {
      const target = processOn(port);
      signalServer(target.child, 'SIGSTOP', `port ${port} of the sentinel set`);
      target.state = 'paused';
    },
    resume(port) {
      const target = processOn(port);
      signalServer(target.child, 'SIGCONT', `port ${port} of the sentinel set`);
      target.state = 'running';
    },
    async waitForFailover(timeoutMs = 20_000) {
      const previous = knownMasterPort;
      let newMasterPort = previous;
      await waitFor(`a failover away from master ${previous} (every running sentinel naming a new master that says it is one)`, timeoutMs, async () => {
        const sentinels = runningSentinels();
        if (sentinels.length === 0) return 'no sentinel is running';
        const named = new Set<number>();
        for (const port of sentinels) {
          const address = await masterAddress(port, masterName);
          if (address === null) return `sentinel ${port} does not answer`;
          named.add(address);
        }
        if (named.has(previous)) return `a sentinel still names ${previous}`;
        if (named.size > 1) return `the sentinels disagree: ${[...named].join(' vs ')}`;
        const [candidate] = [...named] as [number];
        const role = await roleOf(candidate, password);
        if (role !== 'master') return `the sentinels name ${candidate}, which says it is ${role}`;
        newMasterPort = candidate;
        return null;
      }, 100);
      knownMasterPort = newMasterPort;
      return { newMasterPort };
    },
    async waitForReplicaInSync(timeoutMs = 20_000) {
      const [from, to] = knownMasterPort === masterNode.port ? [masterNode.port, replicaNode.port] : [replicaNode.port, masterNode.port];
      await waitFor(`replica ${to} catching up with master ${from}`, timeoutMs, () => replicaInSync(from, to, password));
    },
    stop,
  };
}

function sentinelConfig(o: {
  port: number;
  dir: string;
  masterName: string;
  masterPort: number;
  password: string | undefined;
  downAfterMs: number;
  failoverTimeoutMs: number;
}): string {
  return [
    `port ${o.port}`,
    'bind 127.0.0.1',
    `dir ${o.dir}`,
    // Quorum 2 of 3: two sentinels must agree the master is down; the failover itself also needs a
    // majority (2) to elect the sentinel that performs it, so one sentinel alone never fails over.
    `sentinel monitor ${o.masterName} ${HOST} ${o.masterPort} 2`,
    `sentinel down-after-milliseconds ${o.masterName} ${o.downAfterMs}`,
    `sentinel failover-timeout ${o.masterName} ${o.failoverTimeoutMs}`,
    `sentinel parallel-syncs ${o.masterName} 1`,
    ...(o.password === undefined ? [] : [`sentinel auth-pass ${o.masterName} ${configString(o.password)}`]),
    '',
  ].join('\n');
}

/** A double-quoted configuration-file string, so a password may hold spaces, quotes or backslashes. */
function configString(text: string): string {
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/**
 * What sentinel `port` still lacks (null: nothing): it must name masterPort as the master, see it
 * up, know the replica and see it up and linked, and know the two other sentinels, without which
 * it could not get the votes to lead a failover.
 */
async function sentinelSeesSet(port: number, masterName: string, masterPort: number, replicaPort: number): Promise<string | null> {
  try {
    return await queryRedis({ host: HOST, port }, async (client) => {
      const master = pairs((await client.call('SENTINEL', 'MASTER', masterName)) as string[]);
      if (Number(master['port']) !== masterPort) return `names ${master['port']} as master, not ${masterPort}`;
      if (master['flags'] !== 'master') return `sees the master as ${master['flags']}`;
      if (Number(master['num-other-sentinels']) !== 2) return `knows ${master['num-other-sentinels']} other sentinel(s), not 2`;
      const replicas = ((await client.call('SENTINEL', 'REPLICAS', masterName)) as string[][]).map(pairs);
      const replica = replicas.find((entry) => Number(entry['port']) === replicaPort);
      if (!replica) return `does not know replica ${replicaPort} yet`;
      if (replica['flags'] !== 'slave') return `sees replica ${replicaPort} as ${replica['flags']}`;
      if (replica['master-link-status'] !== 'ok') return `sees replica ${replicaPort} with master-link-status ${replica['master-link-status']}`;
      return null;
    });
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

async function masterAddress(sentinelPort: number, masterName: string): Promise<number | null> {
  try {
    const address = (await queryRedis({ host: HOST, port: sentinelPort }, (client) =>
      client.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName),
    )) as [string, string] | null;
    return address ? Number(address[1]) : null;
  } catch {
    return null;
  }
}

async function roleOf(port: number, password: string | undefined): Promise<string> {
  try {
    const role = (await queryRedis({ host: HOST, port, password }, (client) => client.call('ROLE'))) as unknown[];
    return String(role[0]);
  } catch (error) {
    return `unreachable (${(error as Error).message})`;
  }
}

/** What replicaPort still lacks to have everything masterPort wrote (null: nothing). */
async function replicaInSync(masterPort: number, replicaPort: number, password: string | undefined): Promise<string | null> {
  try {
    const info = await queryRedis({ host: HOST, port: masterPort, password }, async (client) => String(await client.info('replication')));
    const offset = infoField(info, 'master_repl_offset');
    const line = [...info.matchAll(/^slave\d+:(.*)$/gm)].map((match) => pairs((match[1] ?? '').split(/[,=]/))).find((r) => Number(r['port']) === replicaPort);
    if (!line) return `master ${masterPort} does not list replica ${replicaPort} as connected`;
    if (line['state'] !== 'online') return `master ${masterPort} lists replica ${replicaPort} as ${line['state']}`;
    if (line['offset'] !== offset) return `replica ${replicaPort} is at offset ${line['offset']}, the master at ${offset}`;
    return null;
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

/** A flat [field, value, field, value, ...] reply as an object. */
function pairs(flat: string[]): Record<string, string> {
  const result: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) result[flat[i]!] = flat[i + 1]!;
  return result;
}

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}
