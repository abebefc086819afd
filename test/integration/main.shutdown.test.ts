// Stopping `npm start` stops the server, cleanly, under load (docs/stances.md). npm runs the
// script through `sh -c`, and dash does not exec the last command: SIGTERM reached npm, npm passed
// it to the shell, the shell died and the server went on serving with nobody to stop it. Now the
// script execs node, so the signal npm forwards (and Ctrl-C, which the terminal sends to the whole
// process group) reaches the server: requests in flight finish with 200, new connections are
// refused, and npm and the server exit 0 before SHUTDOWN_TIMEOUT_MS; past it, the server exits 1.
//
// The requests are held in flight for real: an http capability whose upstream (run by this test)
// answers only when the test says so.
//
// How long the stop takes is not measured: the exit status says it. The server exits 0 only when
// the drain finished before SHUTDOWN_TIMEOUT_MS, and 1 when the timeout cut it. That timeout is long
// here, so that a busy machine running the test's own steps slowly cannot make a drain late.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startAgentgate as startProcess, STARTUP_BOUND_MS, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { http } from '../support/client.ts';
import { agentJwt, hostJwt, newEd25519 } from '../support/keys.ts';
import { canConnect, freePort, waitFor } from '../support/net.ts';
import { SERVICE_POLICY } from '../support/policies.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { Redis } from 'ioredis';

const ADMIN_TOKEN = 'shutdown-test-admin-token';
const SHUTDOWN_TIMEOUT_MS = 60_000;
const IN_FLIGHT = 5;

/** An upstream that holds every request until release(). */
interface Upstream {
  url: string;
  held: () => number;
  release: () => void;
  close: () => Promise<void>;
}

async function startUpstream(): Promise<Upstream> {
  const pending: ServerResponse[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    pending.push(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (typeof address !== 'object' || !address) throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}/slow`,
    held: () => pending.length,
    release: () => {
      for (const res of pending.splice(0)) res.writeHead(200, { 'content-type': 'application/json' }).end('{"done":true}');
    },
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

type Started = Agentgate;

const cleanups: Array<() => Promise<void> | void> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * Starts agentgate as a user would, `npm start` (or `node src/main.ts`), in its own process group,
 * with a catalog whose one capability calls `upstreamUrl`; waits until it has logged that it listens.
 */
async function startAgentgate(how: 'npm' | 'node', upstreamUrl: string, shutdownTimeoutMs = SHUTDOWN_TIMEOUT_MS, env: Record<string, string> = {}): Promise<Started> {
  const dir = await mkdtemp(join(tmpdir(), 'agentgate-shutdown-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const capabilitiesFile = join(dir, 'capabilities.json');
  await writeFile(capabilitiesFile, JSON.stringify({
    capabilities: [{ name: 'slow', description: 'Answers when the test releases it.', input: { type: 'object' }, handler: { type: 'http', url: upstreamUrl, timeoutMs: 20_000 } }],
  }));
  const port = await freePort();
  const started = startProcess({
    via: how,
    port,
    env: {
      // The tests sign for the address they call; the default issuer is a host name (localhost).
      ISSUER: `http://127.0.0.1:${port}`,
      ADMIN_TOKEN,
      CAPABILITIES_FILE: capabilitiesFile,
      POLICY_WASM_PATH: SERVICE_POLICY.wasmPath,
      POLICY_GOLDEN_PATH: SERVICE_POLICY.goldenPath,
      SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      ...env,
    },
    // Its own process group, as a terminal gives a foreground job: Ctrl-C signals the whole group.
    detached: true,
  });
  // Whatever the test left running, group and all.
  cleanups.push(async () => {
    await (await started.catch(() => undefined))?.stop('SIGKILL');
  });
  return started;
}

interface Outcome {
  /** The status, or the error's code when no answer came. */
  status: number | string;
  /** The answer's Connection header. */
  connection?: string | null;
}

/**
 * Registers an active agent holding `slow` through the admin API and returns a function that
 * executes it (`signal` hangs up the request).
 */
async function slowCaller(base: string): Promise<(signal?: AbortSignal) => Promise<Outcome>> {
  const host = await newEd25519();
  const agentKey = await newEd25519();
  const linked = await http('POST', `${base}/admin/hosts`, { token: ADMIN_TOKEN, json: { public_key: host.publicJwk, default_capabilities: ['slow'], user_id: 'user-1' } });
  expect(linked.status).toBe(201);
  const registered = await http('POST', `${base}/agent/register`, {
    token: await hostJwt(host, base, { agentKey }),
    json: { name: 'slow-caller', mode: 'delegated', capabilities: ['slow'] },
  });
  expect(registered.json?.status, registered.text).toBe('active');
  const agent = { id: registered.json.agent_id as string, key: agentKey, host };
  const executeUrl = `${base}/capability/execute`;
  return async (signal?: AbortSignal) => {
    try {
      const token = await agentJwt(agent, executeUrl);
      const res = await http('POST', executeUrl, { token, json: { capability: 'slow', arguments: {} }, signal });
      return { status: res.status, connection: res.headers.get('connection') };
    } catch (err) {
      return { status: String((err as { cause?: { code?: string } }).cause?.code ?? err) };
    }
  };
}

/** True when nothing is bound to the port any more: this process can listen on it. */
function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createTcpServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** True while any process of the group is left (npm, a shell, the server): signal 0 only asks. */
const groupAlive = (pgid: number): boolean => {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * Holds IN_FLIGHT executes in the upstream, sends the stop, and checks the whole drain: new
 * connections refused while the requests are still held, every held request answered 200 once
 * released, exit 0 well before SHUTDOWN_TIMEOUT_MS, no process of the group left and the port free.
 */
async function drainsUnderLoad(sendStop: (started: Started) => void): Promise<void> {
  const upstream = await startUpstream();
  cleanups.push(() => upstream.close());
  const started = await startAgentgate('npm', upstream.url);
  const execute = await slowCaller(started.base);

  const inFlight = Array.from({ length: IN_FLIGHT }, () => execute());
  await waitFor(async () => upstream.held() === IN_FLIGHT, STARTUP_BOUND_MS);
  sendStop(started);

  await waitFor(async () => !(await canConnect(started.port)), STARTUP_BOUND_MS).catch(() => {
    const { exitCode, signalCode } = started.child;
    throw new Error(`the port still accepts connections ${STARTUP_BOUND_MS} ms after the stop (npm: ${exitCode === null && signalCode === null ? 'running' : `exited ${exitCode ?? signalCode}`}); output:\n${started.output()}`);
  });
  expect(await execute()).toEqual({ status: 'ECONNREFUSED' });
  // Refused while the held requests are still waiting on the upstream: the drain has not cut them.
  expect(upstream.held()).toBe(IN_FLIGHT);
  expect({ exitCode: started.child.exitCode, signalCode: started.child.signalCode }).toEqual({ exitCode: null, signalCode: null });

  upstream.release();
  // Each answer also tells its client not to reuse the connection, which closes after it.
  expect(await Promise.all(inFlight)).toEqual(Array(IN_FLIGHT).fill({ status: 200, connection: 'close' }));
  // Status 0: the drain finished before SHUTDOWN_TIMEOUT_MS (the timeout exits 1).
  expect(await started.exited, started.output()).toEqual({ code: 0, signal: null });
  expect(started.output()).toMatch(/"reason":"SIG(TERM|INT)","exitCode":0,"msg":"stopped"/);
  expect(groupAlive(started.child.pid!)).toBe(false);
  expect(await portIsFree(started.port)).toBe(true);
}

describe('stopping npm start', () => {
  it('SIGTERM to the npm process drains in-flight requests, refuses new connections, and both exit 0', async () => {
    await drainsUnderLoad(({ child }) => child.kill('SIGTERM'));
  }, WITH_SERVERS_TIMEOUT_MS);

  it('Ctrl-C (SIGINT to the process group) drains in-flight requests, refuses new connections, and both exit 0', async () => {
    await drainsUnderLoad(({ child }) => process.kill(-child.pid!, 'SIGINT'));
  }, WITH_SERVERS_TIMEOUT_MS);
});

describe('the shutdown timeout', () => {
  it('a request held past SHUTDOWN_TIMEOUT_MS does not keep the process: it exits 1 at the timeout', async () => {
    const upstream = await startUpstream();
    cleanups.push(() => upstream.close());
    const timeoutMs = 1500;
    const started = await startAgentgate('node', upstream.url, timeoutMs);
    const execute = await slowCaller(started.base);
    const held = execute();
    await waitFor(async () => upstream.held() === 1, STARTUP_BOUND_MS);
    const stoppedAt = performance.now();
    started.child.kill('SIGTERM');
    // The held request would keep the process forever: status 1 and the log line say the timeout
    // ended it, and it never ends the requests before their time.
    expect(await started.exited, started.output()).toEqual({ code: 1, signal: null });
    expect(performance.now() - stoppedAt).toBeGreaterThanOrEqual(timeoutMs - 100);
    expect(started.output()).toMatch(/requests still open at the shutdown timeout; exiting/);
    expect((await held).status).not.toBe(200);
    expect(await portIsFree(started.port)).toBe(true);
  }, WITH_SERVERS_TIMEOUT_MS);
});

describe('a client that hangs up mid-call', () => {
  it('an execute whose client hung up still finishes before the store closes, so its audit event is not lost at shutdown', async () => {
    // The attack is on the audit trail: a caller that hangs up just before a restart would get a
    // capability run with no record of it, as the drain once waited only for open connections.
    const redisUrl = await redisUrlForTests();
    const prefix = uniquePrefix('shutdown-audit');
    cleanups.push(async () => void (await deletePrefix(redisUrl, prefix)));
    const upstream = await startUpstream();
    cleanups.push(() => upstream.close());
    const started = await startAgentgate('node', upstream.url, SHUTDOWN_TIMEOUT_MS, { REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix });
    const execute = await slowCaller(started.base);

    const hangUp = new AbortController();
    const abandoned = execute(hangUp.signal);
    await waitFor(async () => upstream.held() === 1, STARTUP_BOUND_MS);
    hangUp.abort();
    expect((await abandoned).status).not.toBe(200);
    started.child.kill('SIGTERM');
    await waitFor(async () => !(await canConnect(started.port)), STARTUP_BOUND_MS);
    // The connection is gone, but the call is still running: the process waits for it. This pause
    // waits for nothing to happen; it gives a server that would not wait the time to exit, so that
    // the check below catches it (a busy machine can only make it miss that bug, never fail).
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect({ exitCode: started.child.exitCode, signalCode: started.child.signalCode }).toEqual({ exitCode: null, signalCode: null });

    upstream.release();
    expect(await started.exited, started.output()).toEqual({ code: 0, signal: null });
    expect(started.output()).not.toMatch(/audit events lost|after shutdown began/);
    const redis = new Redis(redisUrl, { commandTimeout: 5000, maxRetriesPerRequest: 1 });
    try {
      const entries = await redis.xrange(`${prefix}audit`, '-', '+');
      const events = entries.map(([, fields]) => JSON.parse(fields[1]!) as { type: string; capability?: string; outcome?: string });
      expect(events.filter((e) => e.type === 'execute.allowed' && e.capability === 'slow')).toHaveLength(1);
    } finally {
      redis.disconnect();
    }
  }, WITH_SERVERS_TIMEOUT_MS);
});
