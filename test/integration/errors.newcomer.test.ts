// The errors a newcomer met, each where they met it: over HTTP for the API, in the tool's output for
// the command-line tool, in the start-up output for configuration, and in the log for log lines.
// Each message must name the cause and its subject, and say what to do where there is something to
// do; the codes and statuses stay those of src/errors.ts and the service contract.
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdtemp, rm, symlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.ts';
import { Client, code, http } from '../support/client.ts';
import { freePort } from '../support/net.ts';
import { SERVICE_POLICY_ENV } from '../support/policies.ts';
import { startFaultProxy, type FaultProxy } from '../support/redis-faults.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(REPO, 'bin/agentgate.ts');
const CHILD_TIMEOUT_MS = 20_000;

interface ChildRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a child to its end (killed past CHILD_TIMEOUT_MS), with only the environment given. */
function runChild(command: string, args: readonly string[], env: Record<string, string>, cwd = REPO): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { PATH: process.env.PATH ?? '', HOME: cwd, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.on('error', reject);
    child.on('close', (exitCode) => {
      clearTimeout(timer);
      resolve({ code: exitCode, stdout, stderr });
    });
  });
}

/** `node src/main.ts` with the test policy, on a free port, and `env`: what an operator sees at start-up. */
async function startMain(env: Record<string, string>): Promise<ChildRun> {
  const port = await freePort();
  return runChild(process.execPath, ['src/main.ts'], { ...SERVICE_POLICY_ENV, PORT: String(port), POLICY_WATCH: 'false', LOG_LEVEL: 'info', ...env });
}

/** Log lines (JSON) a logger wrote, parsed. */
const parsedLines = (lines: readonly string[]) => lines.map((line) => JSON.parse(line) as Record<string, unknown>);

describe('API errors, over HTTP', () => {
  let server: TestServer;
  let c: Client;
  const logLines: string[] = [];

  beforeAll(async () => {
    server = await startTestServer({ store: 'memory', logger: createLogger('info', (line) => logLines.push(line)) });
    c = new Client(server);
  });
  afterAll(async () => {
    await server?.close();
  });

  it('execute with `args` instead of `arguments` is 400 invalid_request naming the unknown member, not a call without arguments', async () => {
    const agent = await c.activeAgent(['echo']);
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    const res = await http('POST', c.executeUrl, { token, json: { capability: 'echo', args: { city: 'Oslo' } } });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toBe('body: unknown member "args"; execute takes only capability, arguments (the arguments go in `arguments`)');
    // The same in a batch, for the item that has it; the protocol's own shape is still accepted.
    const batch = await c.batchExecute(agent, [{ capability: 'echo', arguments: {} }, { capability: 'echo', args: {} }]);
    expect(code(batch)).toBe('400 invalid_request');
    expect(batch.json.message).toMatch(/^requests\.1: unknown member "args"; a batch item takes only id, capability, arguments/);
    const ok = await c.execute(agent, 'echo', { city: 'Oslo' });
    expect(ok.status).toBe(200);
    expect(ok.json.data.arguments).toEqual({ city: 'Oslo' });
  });

  it('capability_not_found at execute names the capability, escaped so a look-alike shows as one', async () => {
    const agent = await c.activeAgent(['echo']);
    const res = await c.execute(agent, 'ech\u043e', {}); // a Cyrillic "о"
    expect(code(res)).toBe('404 capability_not_found');
    expect(res.json.message).toBe('no capability is named "ech\\u043e" on this server; GET /capability/list names those there are');
  });

  it('agent_pending says the agent waits for a person\'s approval and that its host polls GET /agent/status', async () => {
    const host = await c.linkedHost([]);
    const { agent } = await c.register(host, { capabilities: ['echo'] });
    expect(agent?.registration.status).toBe('pending');
    const res = await c.execute(agent!, 'echo', {});
    expect(code(res)).toBe('403 agent_pending');
    expect(res.json.message).toContain(`agent ${agent!.id} is waiting for a person's approval`);
    expect(res.json.message).toContain('verification_uri_complete');
    expect(res.json.message).toContain(`GET /agent/status?agent_id=${agent!.id}`);
  });

  it('the log line that says why a request failed with 500 carries its request id, as the body and the error line do', async () => {
    const agent = await c.activeAgent(['flaky_backend']);
    const res = await c.execute(agent, 'flaky_backend', {});
    expect(code(res)).toBe('500 internal_error');
    const requestId = res.json.request_id as string;
    expect(requestId).toBe(res.headers.get('x-request-id'));
    const cause = parsedLines(logLines).find((line) => line.msg === 'capability backend failed' && line.agentId === agent.id);
    expect(cause).toMatchObject({ requestId, capability: 'flaky_backend', level: 'error' });
    expect(parsedLines(logLines).find((line) => line.msg === 'request failed' && line.requestId === requestId)).toBeDefined();
  });

  it('a type filter of the audit trail that names no event type is 400 invalid_request listing the families, not an empty page', async () => {
    const res = await c.admin('GET', '/admin/audit?type=exec');
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(/^type: "exec" names no event type: .* the families are admin, agent, approval, audit, capability, execute, grant, host, operators, passkey, policy$/);
    expect((await c.admin('GET', '/admin/audit?type=execute')).status).toBe(200);
    expect((await c.admin('GET', '/admin/audit?type=execute.refused')).status).toBe(200);
  });

  it('a read of the audit trail that succeeded is no event; a refused one is (docs/stances.md, "Reads of the audit trail")', async () => {
    const since = Date.now() - 1;
    for (let i = 0; i < 3; i++) expect((await c.admin('GET', '/admin/audit?limit=1')).status).toBe(200);
    expect(code(await http('GET', c.url('/admin/audit'), { token: 'not-the-admin-token-at-all' }))).toBe('403 unauthorized');
    const events = (await c.admin('GET', `/admin/audit?type=admin.call&since=${since}&limit=500`)).json.events as Array<Record<string, unknown>>;
    expect(events.filter((e) => e.path === '/admin/audit')).toEqual([expect.objectContaining({ status: 403, outcome: 'refused', code: 'unauthorized' })]);
  });
});

describe('a Redis outage, seen through the rate limiter', () => {
  let proxy: FaultProxy;
  let server: TestServer;
  let dir: string;

  beforeAll(async () => {
    proxy = await startFaultProxy(await redisUrlForTests());
    server = await startTestServer({ store: 'redis', redisUrl: proxy.url });
    dir = await mkdtemp(join(tmpdir(), 'agentgate-newcomer-'));
  });
  afterAll(async () => {
    proxy?.restore();
    await server?.close();
    await proxy?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('discovery answers 503 saying the redis store cannot be reached, as /readyz does, not "rate limiting is unavailable"', async () => {
    proxy.cutNow();
    try {
      const res = await http('GET', `${server.baseUrl}/.well-known/agent-configuration`);
      expect(code(res)).toBe('503 service_unavailable');
      expect(res.json.message).toBe('the redis store cannot be reached (it keeps the rate limits); retry later');
      const ready = await http('GET', `${server.baseUrl}/readyz`);
      expect(ready.json.checks.store.problem).toMatch(/^the redis store cannot be reached/);
    } finally {
      proxy.restore();
    }
  });

  it('the command-line tool says the same: error: service_unavailable: the redis store cannot be reached (exit 1)', async () => {
    const env = { AGENTGATE_URL: server.baseUrl, AGENTGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    for (const name of ['host', 'agent']) expect((await runChild(process.execPath, [BIN, 'keygen', '--name', name], env, dir)).code).toBe(0);
    proxy.cutNow();
    try {
      const run = await runChild(process.execPath, [BIN, 'register', '--host-key', 'host.private.jwk.json', '--agent-key', 'agent.public.jwk.json', '--name', 'x'], env, dir);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('error: service_unavailable: the redis store cannot be reached (it keeps the rate limits); retry later');
      expect(run.stderr).not.toContain('rate limiting is unavailable');
    } finally {
      proxy.restore();
    }
  }, CHILD_TIMEOUT_MS * 3);
});

describe('configuration, in the start-up output', () => {
  it('PORT=abc names the variable, what it must be and what it holds, not "expected number, received NaN" (exit 2)', async () => {
    const run = await startMain({ PORT: 'abc' });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('PORT: must be a whole number from 0 to 65535, not "abc"');
    expect(run.stderr).not.toContain('NaN');
  }, CHILD_TIMEOUT_MS + 5000);

  it('a mode it does not offer is named by its value, not as MODES.1 (exit 2)', async () => {
    const run = await startMain({ MODES: 'delegated,robot' });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('MODES: "robot" is not one of delegated, autonomous; give a comma-separated list of them');
    expect(run.stderr).not.toContain('MODES.1');
  }, CHILD_TIMEOUT_MS + 5000);
});

describe('Redis connection errors, in the log and the start-up output', () => {
  let notRedis: Server;
  let url: string;

  beforeAll(async () => {
    // Something that is not Redis on the Redis URL (a web server, say): its replies are not RESP.
    notRedis = createServer((socket) => socket.on('data', () => socket.write('HTTP/1.1 400 Bad Request\r\n\r\n')).on('error', () => {}));
    await new Promise<void>((resolve) => notRedis.listen(0, '127.0.0.1', resolve));
    const address = notRedis.address();
    url = `redis://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => notRedis.close(resolve));
  });

  it('say what happened in agentgate\'s words, without ioredis\'s "Please report this." or "Connection is closed.."', async () => {
    const run = await startMain({ REDIS_URL: url });
    expect(run.code).toBe(1);
    const logged = run.stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>);
    const connectionErrors = logged.filter((line) => String(line.msg).startsWith('Redis connection error'));
    expect(connectionErrors.length).toBeGreaterThan(0);
    expect(connectionErrors[0]!.error).toBe(`Redis ${url} sent a reply that is not Redis protocol (is it a Redis server?); the connection is reset (ParserError)`);
    expect(run.stderr).toContain(`agentgate failed to start: cannot connect to Redis ${url}: it sent a reply that is not Redis protocol`);
    for (const text of [run.stdout, run.stderr]) {
      expect(text).not.toContain('Please report this');
      expect(text).not.toContain('Connection is closed');
    }
    expect(run.stderr).not.toMatch(/\.\. /);
  }, CHILD_TIMEOUT_MS + 5000);
});

/**
 * The Node the built server runs on here: one on the system PATH that cannot run TypeScript (Node
 * 20: README, "Runtime"), else this Node with type stripping off, which refuses a `.ts` import with
 * the same ERR_UNKNOWN_FILE_EXTENSION.
 */
function oldNode(): { path: string; args: string[]; version: string } {
  const dirs = (process.env.PATH ?? '').split(delimiter).filter((dir) => dir !== '' && !dir.includes('node_modules'));
  for (const dir of [...dirs, '/usr/bin', '/usr/local/bin']) {
    const path = join(dir, 'node');
    if (!existsSync(path)) continue;
    const version = execFileSync(path, ['--version'], { encoding: 'utf8' }).trim();
    if (Number(/^v(\d+)/.exec(version)?.[1]) < 22) return { path, args: [], version };
  }
  return { path: process.execPath, args: ['--no-experimental-strip-types'], version: process.version };
}

const node = oldNode();

describe(`the built server on ${node.version} (${node.path} ${node.args.join(' ')})`, () => {
  let build: string;

  beforeAll(async () => {
    // `npm run build` into a directory of our own (dist/ may be another run's), next to this
    // checkout's node_modules, as the built server runs.
    build = await mkdtemp(join(tmpdir(), 'agentgate-built-'));
    await new Promise<void>((resolve) => {
      // Type errors elsewhere in the tree do not stop tsc from writing the JavaScript this needs.
      execFile(join(REPO, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json', '--outDir', build], { cwd: REPO }, () => resolve());
    });
    await copyFile(join(REPO, 'src/http/device/pages/passkeys-client.js'), join(build, 'src/http/device/pages/passkeys-client.js'));
    await symlink(join(REPO, 'node_modules'), join(build, 'node_modules'));
  }, 120_000);
  afterAll(async () => {
    if (build) await rm(build, { recursive: true, force: true });
  });

  it('without PLUGINS_DIR it stops on plugins/cidr.ts saying this Node cannot load TypeScript, and how to run it (PLUGINS_DIR=dist/plugins)', async () => {
    const port = await freePort();
    const run = await runChild(node.path, [...node.args, join(build, 'src/main.js')], { ...SERVICE_POLICY_ENV, PORT: String(port), POLICY_WATCH: 'false' });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`agentgate failed to start: ${join(REPO, 'plugins')}/`);
    expect(run.stderr).toMatch(new RegExp(`/plugins/[a-z_]+\\.ts: cannot be loaded: Node ${node.version.replace(/\./g, '\\.')} cannot load TypeScript files \\(ERR_UNKNOWN_FILE_EXTENSION\\)`));
    expect(run.stderr).toContain('PLUGINS_DIR=dist/plugins');
    expect(run.stderr).toContain('Node 24');
  }, CHILD_TIMEOUT_MS + 5000);
});
