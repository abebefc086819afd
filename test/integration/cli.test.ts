// The command-line tool (docs/cli.md), run as a real child process (bin/agentgate.ts on this Node)
// against a real server: every command's readable output, its --json output and its exit code,
// plus the usage (2) and unreachable (3) exits. Every child is killed if it outlives CHILD_TIMEOUT_MS.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { calculateJwkThumbprint } from 'jose';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Client } from '../support/client.ts';
import { ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';
import { SERVICE_POLICY } from '../support/policies.ts';

const BIN = fileURLToPath(new URL('../../bin/agentgate.ts', import.meta.url));
const CHILD_TIMEOUT_MS = 15_000;
/**
 * A test here runs up to a dozen commands one after another, each a Node process of its own: on a
 * quiet machine a second or two in all, but on a 2-core machine running other suites each start
 * takes seconds (a nested npm test, as the plugin guide's walk runs, measured three tests past 20 s).
 * Every command has its own bound (CHILD_TIMEOUT_MS), so a test's bound only has to catch a hang.
 */
const TEST_TIMEOUT_MS = 120_000;

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Everything every child printed, to check at the end that no secret ever was. */
const printed: string[] = [];

function startCli(args: readonly string[], env: Record<string, string>, cwd: string): { child: ChildProcess; done: Promise<CliRun>; stdout: () => string } {
  // Only what the child needs: no AGENTGATE_* or ADMIN_TOKEN of the developer's shell leaks in. The
  // compile cache (vitest.config.ts) spares each of the hundred runs here compiling the tool again.
  const cache = process.env.NODE_COMPILE_CACHE ? { NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE } : {};
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { PATH: process.env.PATH ?? '', HOME: cwd, ...cache, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const done = new Promise<CliRun>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`agentgate ${args.join(' ')} did not finish within ${CHILD_TIMEOUT_MS} ms; stdout: ${stdout}; stderr: ${stderr}`));
    }, CHILD_TIMEOUT_MS);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      printed.push(stdout, stderr);
      resolve({ code, stdout, stderr });
    });
  });
  return { child, done, stdout: () => stdout };
}

describe('the agentgate command-line tool', { timeout: TEST_TIMEOUT_MS }, () => {
  let server: TestServer;
  let c: Client;
  let dir: string;
  let env: Record<string, string>;
  const cli = (...args: string[]) => startCli(args, env, dir).done;
  const cliWith = (extraEnv: Record<string, string>, ...args: string[]) => startCli(args, { ...env, ...extraEnv }, dir).done;
  const json = (run: CliRun) => JSON.parse(run.stdout) as Record<string, any>;

  beforeAll(async () => {
    server = await startTestServer({ store: 'memory' });
    c = new Client(server);
    dir = await mkdtemp(join(tmpdir(), 'agentgate-cli-'));
    env = { AGENTGATE_URL: server.baseUrl, AGENTGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    // The keys most tests use; keygen itself is tested below.
    const [host, agent] = await Promise.all([cli('keygen', '--name', 'host'), cli('keygen', '--name', 'agent')]);
    expect([host.code, agent.code]).toEqual([0, 0]);
  });
  afterAll(async () => {
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  // The tool signs with the wall clock; the test server's clock is a manual one that stands still.
  // Each test starts with the two agreeing, so a file that runs longer than the clock skew (30 s)
  // does not see its tokens refused as issued in the future.
  beforeEach(() => server.clock.set(Date.now()));

  /** A new key pair in `dir` under `name`, made with the tool. */
  const keygen = async (name: string) => {
    const run = await cli('keygen', '--name', name, '--json');
    expect(run.code).toBe(0);
    return json(run);
  };

  /** A delegated agent registered by the tool under a new host, waiting for a person. */
  const registerPending = async (name: string, capabilities: string[] = ['echo']) => {
    await Promise.all([keygen(`${name}-host`), keygen(`${name}-agent`)]);
    const run = await cli('register', '--host-key', `${name}-host.private.jwk.json`, '--agent-key', `${name}-agent.private.jwk.json`,
      '--name', name, ...capabilities.flatMap((cap) => ['--capability', cap]), '--json');
    expect(run.code, run.stderr).toBe(0);
    return json(run);
  };

  describe('help and usage errors (exit 2)', () => {
    it('--help lists every command and the exit codes (exit 0); a command\'s --help shows its options', async () => {
      const top = await cli('--help');
      expect(top.code).toBe(0);
      for (const command of ['keygen', 'hosts add', 'agents approve', 'approvals list', 'policy status', 'operators list', 'audit tail', 'register', 'execute']) {
        expect(top.stdout).toContain(command);
      }
      expect(top.stdout).toMatch(/exit codes:[\s\S]*3 {2}the server could not be reached/);
      const add = await cli('hosts', 'add', '--help');
      expect(add.code).toBe(0);
      expect(add.stdout).toContain('usage: agentgate hosts add --public-key FILE');
      expect((await cli('hosts', '--help')).stdout).toContain('hosts revoke');
    });

    it('an unknown command, an unknown option, a missing argument or option, bad JSON: exit 2 and nothing on stdout', async () => {
      const runs = await Promise.all([
        cli('frobnicate'),
        cli('hosts', 'show', 'hst_x', '--frobnicate'),
        cli('hosts', 'show'),
        cli('hosts', 'show', 'hst_x', 'extra'),
        cli('hosts', 'add'),
        cli('agents'),
        cli(),
        cli('execute', '--agent-key', 'agent.private.jwk.json', '--agent-id', 'agt_x', 'echo', '--args', '{not json'),
        cli('approvals', 'list', '--limit', 'many'),
        cli('--url', 'ftp://example.com', 'policy', 'status'),
      ]);
      for (const run of runs) {
        expect(run.code).toBe(2);
        expect(run.stdout).toBe('');
        expect(run.stderr).toMatch(/^error: /);
      }
      expect(runs[0]!.stderr).toContain('unknown command "frobnicate"');
      expect(runs[1]!.stderr).toContain("Unknown option '--frobnicate'");
      expect(runs[2]!.stderr).toContain('missing ID');
      expect(runs[4]!.stderr).toContain('--public-key is required');
    });

    it('with --json a usage error is one JSON object on stdout', async () => {
      const run = await cli('hosts', 'show', '--json');
      expect(run.code).toBe(2);
      expect(json(run)).toEqual({ error: 'usage_error', message: 'missing ID' });
      expect(run.stderr).toBe('');
    });

    it('an admin command without a token, or an approval without the person it is for, is refused before anything is sent', async () => {
      const noToken = await cliWith({ AGENTGATE_ADMIN_TOKEN: '' }, 'policy', 'status');
      expect(noToken.code).toBe(2);
      expect(noToken.stderr).toContain('needs the admin token');
      const noUser = await cli('agents', 'approve', 'agt_x');
      expect(noUser.code).toBe(2);
      expect(noUser.stderr).toContain('--user-id is required');
    });
  });

  describe('an unreachable server (exit 3)', () => {
    it('a closed port is exit 3 with a message, or a JSON object with --json', async () => {
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const port = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      const url = `http://127.0.0.1:${port}`;
      const [human, machine] = await Promise.all([cli('--url', url, 'policy', 'status'), cli('--url', url, 'policy', 'status', '--json')]);
      expect(human.code).toBe(3);
      expect(human.stderr).toMatch(/^error: unreachable: cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
      expect(human.stdout).toBe('');
      expect(machine.code).toBe(3);
      expect(json(machine)).toMatchObject({ error: 'unreachable' });
    });

    it('a server that does not answer in time is exit 3', async () => {
      const silent: Server = createServer(() => { /* never answers */ });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      try {
        const run = await cli('--url', `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, '--timeout-ms', '300', 'policy', 'status');
        expect(run.code).toBe(3);
        expect(run.stderr).toContain('within 300 ms');
      } finally {
        silent.closeAllConnections();
        await new Promise<void>((resolve) => silent.close(() => resolve()));
      }
    });
  });

  it('keygen writes an Ed25519 pair (private 0600), prints its RFC 7638 thumbprint, and never overwrites', async () => {
    const run = await cli('keygen', '--name', 'kg', '--out', 'keys');
    expect(run.code).toBe(0);
    const publicJwk = JSON.parse(await readFile(join(dir, 'keys', 'kg.public.jwk.json'), 'utf8'));
    const privateJwk = JSON.parse(await readFile(join(dir, 'keys', 'kg.private.jwk.json'), 'utf8'));
    expect(publicJwk).toEqual({ kty: 'OKP', crv: 'Ed25519', x: expect.any(String) });
    expect(privateJwk).toEqual({ ...publicJwk, d: expect.any(String) });
    expect((await stat(join(dir, 'keys', 'kg.private.jwk.json'))).mode & 0o777).toBe(0o600);
    const thumbprint = await calculateJwkThumbprint(publicJwk, 'sha256');
    expect(run.stdout).toMatch(new RegExp(`^thumbprint +${thumbprint}$`, 'm'));
    expect(run.stdout).not.toContain(privateJwk.d);

    const machine = await cli('keygen', '--name', 'kg2', '--json');
    expect(machine.code).toBe(0);
    const answer = json(machine);
    expect(answer).toEqual({
      thumbprint: await calculateJwkThumbprint(answer.public_key, 'sha256'),
      private_key_file: join(dir, 'kg2.private.jwk.json'),
      public_key_file: join(dir, 'kg2.public.jwk.json'),
      public_key: { kty: 'OKP', crv: 'Ed25519', x: expect.any(String) },
    });

    const again = await cli('keygen', '--name', 'kg', '--out', 'keys');
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('exists already');
    expect(JSON.parse(await readFile(join(dir, 'keys', 'kg.private.jwk.json'), 'utf8'))).toEqual(privateJwk);
    expect((await cli('keygen', '--name', '../escape')).code).toBe(2);
  });

  it('hosts add, show and revoke: readable lines, the server JSON with --json, exit 1 on a refusal', async () => {
    const key = await keygen('pre');
    const added = await cli('hosts', 'add', '--public-key', 'pre.public.jwk.json', '--name', 'build-bot',
      '--default-capability', 'echo', '--default-capability', 'weather_lookup', '--user-id', 'admin:alice');
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toMatch(/^status +active$/m);
    expect(added.stdout).toMatch(/^default_capabilities +echo, weather_lookup$/m);
    expect(added.stdout).toMatch(new RegExp(`^thumbprint +${key.thumbprint}$`, 'm'));
    const hostId = /^host_id +(\S+)$/m.exec(added.stdout)![1]!;
    expect((await server.store.getHost(hostId))?.thumbprint).toBe(key.thumbprint);

    const shown = await cli('hosts', 'show', hostId, '--json');
    expect(shown.code).toBe(0);
    expect(json(shown)).toMatchObject({ host_id: hostId, name: 'build-bot', status: 'active', user_id: 'admin:alice', default_capabilities: ['echo', 'weather_lookup'] });
    expect((await cli('hosts', 'show', hostId)).stdout).toMatch(/^name +build-bot$/m);

    // The person the admin acts for may come from the environment.
    const second = await keygen('pre2');
    const fromEnv = await cliWith({ AGENTGATE_USER_ID: 'admin:bob' }, 'hosts', 'add', '--public-key', 'pre2.private.jwk.json', '--json');
    expect(fromEnv.code).toBe(0);
    expect(json(fromEnv)).toMatchObject({ user_id: 'admin:bob', status: 'active' });
    expect(await server.store.findHostByThumbprint(second.thumbprint)).not.toBeNull();

    const revoked = await cli('hosts', 'revoke', hostId);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toMatch(/^status +revoked$/m);
    expect(revoked.stdout).toMatch(/^agents_revoked +0$/m);
    expect(json(await cli('hosts', 'revoke', hostId, '--json'))).toEqual({ host_id: hostId, status: 'revoked', agents_revoked: 0 });

    const missing = await cli('hosts', 'show', 'hst_missing');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('error: host_not_found: no host has this id\n');
    const missingJson = await cli('hosts', 'show', 'hst_missing', '--json');
    expect(missingJson.code).toBe(1);
    expect(json(missingJson)).toEqual({ error: 'host_not_found', message: 'no host has this id' });
    expect(missingJson.stderr).toBe('');
  });

  it('a wrong admin token is the server\'s refusal (exit 1), and the token is not echoed', async () => {
    const run = await cliWith({ AGENTGATE_ADMIN_TOKEN: 'a-wrong-admin-token-0123' }, 'policy', 'status');
    expect(run.code).toBe(1);
    expect(run.stderr).toBe('error: unauthorized: the admin token is not valid\n');
    expect(run.stderr + run.stdout).not.toContain('a-wrong-admin-token-0123');
    const flag = await cliWith({ AGENTGATE_ADMIN_TOKEN: '' }, '--admin-token', ADMIN_TOKEN, 'policy', 'status', '--json');
    expect(flag.code).toBe(0);
  });

  it('hosts enroll proves the host holds its key (a signed host+jwt) and binds it with a person\'s enrollment token, once', async () => {
    // The enrollment a person's set-up would store (services/enrollments.ts): the tool needs only its token.
    const token = `agent_enroll_${randomBytes(32).toString('base64url')}`;
    const nowMs = server.clock.nowMs();
    await server.store.createEnrollment({
      id: 'enr_cli', personId: 'dev|cli-person', name: 'cli host', defaultCapabilities: ['echo'], tokenHash: createHash('sha256').update(token).digest('base64url'),
      createdAtMs: nowMs, expiresAtMs: nowMs + 3_600_000, state: 'pending',
    }, 86_400_000);
    await keygen('enroll-host');
    const run = await cli('hosts', 'enroll', '--token', token, '--host-key', 'enroll-host.private.jwk.json', '--json');
    expect(run.code, run.stderr).toBe(0);
    expect(json(run)).toMatchObject({ status: 'active', name: 'cli host', default_capabilities: ['echo'] });
    const thumbprint = await calculateJwkThumbprint(JSON.parse(await readFile(join(dir, 'enroll-host.public.jwk.json'), 'utf8')), 'sha256');
    expect(await server.store.findHostByThumbprint(thumbprint)).toMatchObject({ userId: 'dev|cli-person', status: 'active' });
    const again = await cli('hosts', 'enroll', '--token', token, '--host-key', 'enroll-host.private.jwk.json');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('host_not_pending_enrollment');
    expect(again.stdout + again.stderr).not.toContain(token);
  });

  it('register signs a host+jwt the server accepts: an unknown host and its agent, waiting for a person', async () => {
    await Promise.all([keygen('reg-host'), keygen('reg-agent')]);
    const run = await cli('register', '--host-key', 'reg-host.private.jwk.json', '--agent-key', 'reg-agent.public.jwk.json',
      '--name', 'payer', '--capability', 'echo', '--capability', 'transfer_money', '--constraints', '{"transfer_money":{"amount":{"max":100}}}');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^status +pending$/m);
    expect(run.stdout).toMatch(/^user_code +[A-Z]{4}-[A-Z]{4}$/m);
    expect(run.stdout).toMatch(/transfer_money +pending +\{"amount":\{"max":100\}\}/);
    expect(run.stdout).toContain('waiting for a person');
    const agentId = /^agent_id +(\S+)$/m.exec(run.stdout)![1]!;
    const stored = await server.store.getAgent(agentId);
    expect(stored?.agent).toMatchObject({ name: 'payer', mode: 'delegated', status: 'pending' });
    const hostThumbprint = await calculateJwkThumbprint(JSON.parse(await readFile(join(dir, 'reg-host.public.jwk.json'), 'utf8')), 'sha256');
    expect(stored?.agent.hostThumbprint).toBe(hostThumbprint);

    // The same registration again is the idempotent retry of a pending agent: the same agent.
    const again = await cli('register', '--host-key', 'reg-host.private.jwk.json', '--agent-key', 'reg-agent.public.jwk.json', '--name', 'payer', '--json');
    expect(again.code).toBe(0);
    expect(json(again)).toMatchObject({ agent_id: agentId, status: 'pending' });

    await Promise.all([keygen('solo-host'), keygen('solo-agent')]);
    const autonomous = await cli('register', '--host-key', 'solo-host.private.jwk.json', '--agent-key', 'solo-agent.private.jwk.json',
      '--name', 'solo', '--mode', 'autonomous', '--json');
    expect(autonomous.code, autonomous.stderr).toBe(0);
    expect(json(autonomous)).toMatchObject({ name: 'solo', mode: 'autonomous' });
    const badMode = await cli('register', '--host-key', 'reg-host.private.jwk.json', '--agent-key', 'reg-agent.public.jwk.json', '--name', 'x', '--mode', 'sideways');
    expect(badMode.code).toBe(2);
    const publicOnly = await cli('register', '--host-key', 'reg-host.public.jwk.json', '--agent-key', 'reg-agent.public.jwk.json', '--name', 'x');
    expect(publicOnly.code).toBe(2);
    expect(publicOnly.stderr).toContain('holds only a public key');
    const stray = await cli('register', '--host-key', 'reg-host.private.jwk.json', '--agent-key', 'reg-agent.public.jwk.json', '--name', 'x',
      '--capability', 'echo', '--constraints', '{"weather_lookup":{}}');
    expect(stray.code).toBe(2);
  });

  it('register --host-name and --reason: the person who approves sees the host by its name and the reason, not "a host that gave no name"', async () => {
    await Promise.all([keygen('named-host'), keygen('named-agent')]);
    const run = await cli('register', '--host-key', 'named-host.private.jwk.json', '--agent-key', 'named-agent.public.jwk.json',
      '--name', 'mailer', '--host-name', 'build-server', '--reason', 'sends the nightly report', '--capability', 'echo', '--json');
    expect(run.code, run.stderr).toBe(0);
    const registered = json(run);
    const host = await cli('hosts', 'show', registered.host_id);
    expect(host.code, host.stderr).toBe(0);
    expect(host.stdout).toMatch(/^name +build-server$/m);
    const waiting = json(await cli('approvals', 'list', '--json')).approvals.find((a: { agent_id: string }) => a.agent_id === registered.agent_id);
    expect(waiting.capabilities).toEqual([expect.objectContaining({ capability: 'echo', reason: 'sends the nightly report' })]);
    expect((await cli('register', '--help')).stdout).toMatch(/--host-name NAME[\s\S]*--reason TEXT/);
  });

  it('approvals list shows who waits, with the code and expiry; --json is the server\'s list', async () => {
    const registered = await registerPending('waiter', ['echo', 'weather_lookup']);
    const table = await cli('approvals', 'list');
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^AGENT +HOST +NAME +STATUS +CAPABILITIES +USER CODE +EXPIRES$/m);
    const row = table.stdout.split('\n').find((line) => line.startsWith(registered.agent_id))!;
    expect(row).toContain(registered.host_id);
    expect(row).toContain('waiter');
    expect(row).toContain('echo, weather_lookup');
    expect(row).toContain(registered.approval.user_code);
    expect(row).toMatch(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/);

    const machine = await cli('approvals', 'list', '--json', '--limit', '500');
    expect(machine.code).toBe(0);
    const body = json(machine);
    expect(body).toEqual((await c.admin('GET', '/admin/approvals?limit=500')).json);
    expect(body.approvals.find((a: { agent_id: string }) => a.agent_id === registered.agent_id)).toMatchObject({ user_code: registered.approval.user_code });
  });

  it('agents show, approve (some capabilities, with the code), deny and revoke', async () => {
    const one = await registerPending('approve-me', ['echo', 'weather_lookup']);
    const shown = await cli('agents', 'show', one.agent_id);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/^status +pending$/m);
    expect(shown.stdout).toMatch(/^GRANT +CAPABILITY +STATUS +CONSTRAINTS$/m);
    expect(json(await cli('agents', 'show', one.agent_id, '--json'))).toEqual((await c.admin('GET', `/admin/agents/${one.agent_id}`)).json);

    const wrongCode = await cli('agents', 'approve', one.agent_id, '--user-id', 'admin:alice', '--user-code', 'BBBB-BBBB');
    expect(wrongCode.code).toBe(1);
    expect(wrongCode.stderr).toMatch(/^error: invalid_request: the user code does not name/);

    const approved = await cli('agents', 'approve', one.agent_id, '--user-id', 'admin:alice', '--capability', 'echo', '--user-code', one.approval.user_code);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toMatch(/^status +active$/m);
    expect(approved.stdout).toMatch(/^user_id +admin:alice$/m);
    expect(approved.stdout).toMatch(/ echo +active/);
    expect(approved.stdout).toMatch(/ weather_lookup +denied/);

    const two = await registerPending('deny-me');
    const denied = await cli('agents', 'deny', two.agent_id, '--user-id', 'admin:alice', '--json');
    expect(denied.code).toBe(0);
    expect(json(denied)).toMatchObject({ agent_id: two.agent_id, status: 'rejected' });
    expect(json(await cli('agents', 'deny', two.agent_id, '--user-id', 'admin:alice', '--json'))).toMatchObject({ error: 'agent_rejected' });

    const revoked = await cli('agents', 'revoke', one.agent_id);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toMatch(/^status +revoked$/m);
    expect(json(await cli('agents', 'revoke', one.agent_id, '--json'))).toMatchObject({ agent_id: one.agent_id, status: 'revoked' });
    const unknown = await cli('agents', 'revoke', 'agt_missing');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe('error: agent_not_found: no agent has this id\n');
  });

  it('execute signs an agent+jwt for the execute audience: data on success, exit 1 with the refusal otherwise', async () => {
    const registered = await registerPending('runner', ['echo']);
    expect((await cli('agents', 'approve', registered.agent_id, '--user-id', 'admin:alice')).code).toBe(0);
    const base = ['execute', '--agent-key', 'runner-agent.private.jwk.json', '--agent-id', registered.agent_id];

    const run = await cli(...base, '--host-key', 'runner-host.public.jwk.json', 'echo', '--args', '{"city":"Oslo"}');
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ capability: 'echo', arguments: { city: 'Oslo' } });
    const machine = await cli(...base, 'echo', '--json');
    expect(machine.code).toBe(0);
    expect(json(machine)).toEqual({ data: { capability: 'echo', arguments: {} } });

    const notGranted = await cli(...base, 'weather_lookup');
    expect(notGranted.code).toBe(1);
    expect(notGranted.stderr).toMatch(/^error: capability_not_granted: /);
    expect(json(await cli(...base, 'weather_lookup', '--json'))).toMatchObject({ error: 'capability_not_granted' });
    // A host key that is not the agent's host: the server checks the iss the token carries.
    const wrongHost = await cli(...base, '--host-key', 'host.public.jwk.json', 'echo');
    expect(wrongHost.code).toBe(1);
    expect(wrongHost.stderr).toMatch(/^error: invalid_jwt: agent JWT iss does not match/);
    const wrongKey = await cli('execute', '--agent-key', 'agent.private.jwk.json', '--agent-id', registered.agent_id, 'echo');
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toMatch(/^error: invalid_jwt: /);
  });

  it('request asks for more capabilities as the agent: the pending grant and the code to show a person, exit 2 without a capability', async () => {
    const registered = await registerPending('asker', ['echo']);
    expect((await cli('agents', 'approve', registered.agent_id, '--user-id', 'admin:alice')).code).toBe(0);
    const base = ['request', '--agent-key', 'asker-agent.private.jwk.json', '--agent-id', registered.agent_id];
    const asked = await cli(...base, '--capability', 'weather_lookup', '--constraints', '{"weather_lookup":{"city":{"in":["Oslo"]}}}', '--reason', 'forecasts');
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stdout).toMatch(/waiting for a person: show them http.*\/device\?user_code=[A-Z]{4}-[A-Z]{4}/);
    const machine = json(await cli(...base, '--capability', 'weather_lookup', '--json'));
    expect(machine).toMatchObject({ agent_id: registered.agent_id, status: 'pending' });
    const usage = await cli(...base);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/^error: request needs at least one --capability/);
  });

  it('policy status and reload', async () => {
    const status = await cli('policy', 'status');
    expect(status.code).toBe(0);
    const info = (await c.admin('GET', '/admin/policy')).json;
    expect(status.stdout).toBe(`sha256      ${info.sha256}\ngeneration  ${info.generation}\nloaded_at   ${info.loaded_at}\n`);
    expect(json(await cli('policy', 'status', '--json'))).toEqual(info);

    const reload = await cli('policy', 'reload');
    expect(reload.code).toBe(0);
    expect(reload.stdout).toMatch(new RegExp(`^sha256 +${info.sha256}\\ngeneration +${info.generation + 1}\\n$`));
    expect(json(await cli('policy', 'reload', '--json'))).toEqual({ sha256: info.sha256, generation: info.generation + 2 });
  });

  it('policy preview, reload --max-flips and shadow', async () => {
    const preview = await cli('policy', 'preview', SERVICE_POLICY.wasmPath);
    expect(preview.code, preview.stderr).toBe(0);
    expect(preview.stdout).toMatch(/^allow_to_deny +0$/m);
    expect(preview.stdout).toMatch(/^deny_to_allow +0$/m);
    expect(json(await cli('policy', 'preview', SERVICE_POLICY.wasmPath, '--json'))).toMatchObject({ allow_to_deny: 0, deny_to_allow: 0, errors: { count: 0 } });
    const missing = await cli('policy', 'preview', 'no/such/artefact.wasm');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^error: cannot read the artefact no\/such\/artefact\.wasm/);

    const guarded = await cli('policy', 'reload', '--max-flips', '5%');
    expect(guarded.code, guarded.stderr).toBe(0);
    expect(guarded.stdout).toMatch(/preview it passed:\n/);
    for (const bad of ['ten', '-1', '101%']) expect((await cli('policy', 'reload', '--max-flips', bad)).code).toBe(2);

    const none = await cli('policy', 'shadow');
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^error: no_shadow_policy:/);
    const loaded = await cli('policy', 'shadow', '--load', SERVICE_POLICY.wasmPath);
    expect(loaded.code, loaded.stderr).toBe(0);
    expect(loaded.stdout).toMatch(/^shadow +[0-9a-f]{64}$/m);
    const tally = await cli('policy', 'shadow');
    expect(tally.code).toBe(0);
    expect(tally.stdout).toMatch(/^disagreed +0$/m);
    expect((await cli('policy', 'shadow', '--load', SERVICE_POLICY.wasmPath, '--remove')).code).toBe(2);
    const removed = await cli('policy', 'shadow', '--remove');
    expect(removed.code).toBe(0);
    expect(removed.stdout).toBe('shadow removed\n');
  });

  it('operators list and reload', async () => {
    const list = await cli('operators', 'list');
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^NAME +KIND +SOURCE +DESCRIPTION$/m);
    expect(list.stdout).toMatch(/^eq +built-in +built-in +/m);
    expect(list.stdout).toMatch(/^regex +plugin +regex\.ts +/m);
    expect(json(await cli('operators', 'list', '--json'))).toEqual((await c.admin('GET', '/admin/operators')).json);

    // The count is the one this server reports for the plugins directory it loaded, never a number
    // written here: a plugin added to plugins/ as plugins/README.md shows must keep this test green.
    const loaded = (await c.admin('GET', '/admin/operators')).json.operators.length as number;
    const reload = await cli('operators', 'reload');
    expect(reload.code).toBe(0);
    expect(reload.stdout).toMatch(new RegExp(`^${loaded} operators loaded:\\n {2}eq\\n`));
    expect(json(await cli('operators', 'reload', '--json')).operators).toContain('cidr');
  });

  describe('audit tail', () => {
    it('says plainly when the server has no audit API (404), and exits 1', async () => {
      // A stand-in for an agentgate without GET /admin/audit: its 404 for an unknown path.
      const old: Server = createServer((_req, res) => {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not_found', message: 'no such endpoint; see /.well-known/agent-configuration' }));
      });
      await new Promise<void>((resolve) => old.listen(0, '127.0.0.1', resolve));
      try {
        const url = `http://127.0.0.1:${(old.address() as AddressInfo).port}`;
        const run = await cli('--url', url, 'audit', 'tail');
        expect(run.code).toBe(1);
        expect(run.stderr).toContain('this server has no audit API');
        const machine = await cli('--url', url, 'audit', 'tail', '--json');
        expect(machine.code).toBe(1);
        expect(json(machine)).toMatchObject({ error: 'not_found' });
      } finally {
        await new Promise<void>((resolve) => old.close(() => resolve()));
      }
    });

    it('reads the endpoint\'s contract from a stand-in: filters, one page oldest first, --follow with cursors and no repeats', async () => {
      // A stand-in that keeps the contract, so the command is tested before the real endpoint
      // exists: events oldest first, `since` inclusive, `cursor` continuing a listing.
      const events = Array.from({ length: 5 }, (_, i) => ({ id: `evt_${i}`, at: `2026-01-01T00:00:0${i}.000Z`, type: 'execute', agent_id: i % 2 === 0 ? 'agt_a' : 'agt_b', host_id: 'hst_1', outcome: 'allowed' }));
      const seen: URL[] = [];
      const stand: Server = createServer((req, res) => {
        const url = new URL(req.url ?? '/', 'http://stand-in');
        if (url.pathname !== '/admin/audit' || req.headers.authorization !== `Bearer ${ADMIN_TOKEN}`) {
          res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found","message":"no"}');
          return;
        }
        seen.push(url);
        const q = url.searchParams;
        const matching = events.filter((e) => (!q.get('agent_id') || e.agent_id === q.get('agent_id')) && (!q.get('since') || e.at >= q.get('since')!));
        const start = Number(q.get('cursor') ?? 0);
        const limit = Number(q.get('limit') ?? 50);
        const page = matching.slice(start, start + limit);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ events: page, next_cursor: start + limit < matching.length ? String(start + limit) : null }));
      });
      await new Promise<void>((resolve) => stand.listen(0, '127.0.0.1', resolve));
      try {
        const url = `http://127.0.0.1:${(stand.address() as AddressInfo).port}`;
        const table = await cli('--url', url, 'audit', 'tail', '--agent', 'agt_a', '--type', 'execute', '--limit', '2');
        expect(table.code, table.stderr).toBe(0);
        expect(table.stdout).toBe([
          'AT                        TYPE     AGENT  HOST   OUTCOME  CODE',
          '2026-01-01T00:00:00.000Z  execute  agt_a  hst_1  allowed  -',
          '2026-01-01T00:00:02.000Z  execute  agt_a  hst_1  allowed  -',
          '',
        ].join('\n'));
        expect(Object.fromEntries(seen.at(-1)!.searchParams)).toEqual({ agent_id: 'agt_a', type: 'execute', limit: '2' });
        const machine = await cli('--url', url, 'audit', 'tail', '--limit', '2', '--json');
        expect(json(machine)).toEqual({ events: events.slice(0, 2), next_cursor: '2' });

        const firstFollowRequest = seen.length;
        const followed = startCli(['--url', url, 'audit', 'tail', '--follow', '--limit', '2', '--interval-ms', '100', '--json'], env, dir);
        const lines = () => followed.stdout().split('\n').filter(Boolean);
        const deadline = Date.now() + 10_000;
        while (lines().length < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        events.push({ id: 'evt_5', at: '2026-01-01T00:00:05.000Z', type: 'register', agent_id: 'agt_c', host_id: 'hst_1', outcome: 'allowed' });
        while (lines().length < 6 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        followed.child.kill('SIGTERM');
        const ended = await followed.done;
        expect(ended.code).toBe(0);
        expect(ended.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line).id)).toEqual(['evt_0', 'evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5']);
        // The first poll reads every page by cursor; later ones ask only for what is new.
        const requests = seen.slice(firstFollowRequest).map((u) => u.searchParams);
        expect(requests.slice(0, 3).map((q) => [q.get('since'), q.get('cursor')])).toEqual([[null, null], [null, '2'], [null, '4']]);
        expect(requests.length).toBeGreaterThan(3);
        expect(requests.slice(3).every((q) => q.get('since')?.startsWith('2026-01-01T00:00:0'))).toBe(true);

        const human = startCli(['--url', url, 'audit', 'tail', '--follow', '--agent', 'agt_c', '--interval-ms', '100'], env, dir);
        while (!human.stdout().includes('\n') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        human.child.kill('SIGINT');
        const humanEnded = await human.done;
        expect(humanEnded.code).toBe(0);
        expect(humanEnded.stdout).toBe('2026-01-01T00:00:05.000Z  register  agent=agt_c host=hst_1 outcome=allowed\n');
      } finally {
        stand.closeAllConnections();
        await new Promise<void>((resolve) => stand.close(() => resolve()));
      }
    });

    // The command against the real endpoint (GET /admin/audit) and its contract:
    // {events: [{id, at, type, agent_id?, host_id?, outcome?, code?, ...}], next_cursor}.
    it('tails and follows the audit trail of the real endpoint, filtered by agent', async () => {
      const registered = await registerPending('audited', ['echo']);
      expect((await cli('agents', 'approve', registered.agent_id, '--user-id', 'admin:alice')).code).toBe(0);
      expect((await cli('execute', '--agent-key', 'audited-agent.private.jwk.json', '--agent-id', registered.agent_id, 'echo')).code).toBe(0);

      const machine = await cli('audit', 'tail', '--agent', registered.agent_id, '--limit', '20', '--json');
      expect(machine.code, machine.stderr).toBe(0);
      const body = json(machine);
      expect(body).toEqual((await c.admin('GET', `/admin/audit?agent_id=${registered.agent_id}&limit=20`)).json);
      expect(body.events.length).toBeGreaterThan(0);
      for (const event of body.events) {
        expect(event).toMatchObject({ id: expect.any(String), type: expect.any(String), agent_id: registered.agent_id });
        expect(event.at).toBeDefined();
      }
      expect(body).toHaveProperty('next_cursor');

      const table = await cli('audit', 'tail', '--agent', registered.agent_id);
      expect(table.code).toBe(0);
      expect(table.stdout).toMatch(/^AT +TYPE +AGENT +HOST +OUTCOME +CODE$/m);
      expect(table.stdout).toContain(registered.agent_id);

      // Following prints one JSON event per line as they happen, and ends cleanly on SIGTERM.
      const followed = startCli(['audit', 'tail', '--follow', '--agent', registered.agent_id, '--interval-ms', '200', '--json'], env, dir);
      const deadline = Date.now() + 10_000;
      while (followed.stdout().split('\n').filter(Boolean).length < body.events.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect((await cli('execute', '--agent-key', 'audited-agent.private.jwk.json', '--agent-id', registered.agent_id, 'echo')).code).toBe(0);
      const before = followed.stdout().split('\n').filter(Boolean).length;
      while (followed.stdout().split('\n').filter(Boolean).length <= before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      followed.child.kill('SIGTERM');
      const ended = await followed.done;
      expect(ended.code).toBe(0);
      const lines = ended.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { id: string; agent_id: string });
      expect(lines.length).toBeGreaterThan(body.events.length);
      expect(new Set(lines.map((e) => e.id)).size).toBe(lines.length);
      expect(lines.every((e) => e.agent_id === registered.agent_id)).toBe(true);
    });

    it('following the trail adds nothing to it: its successful reads are not events (docs/stances.md, "Reads of the audit trail")', async () => {
      const since = new Date(Date.now() - 1).toISOString();
      const printedPaths = () => followed.stdout().split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { path: string }).path);
      const until = async (done: () => boolean) => {
        const deadline = Date.now() + 10_000;
        while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      };
      // Admin calls that are events, before and while it follows, so its output shows it polled.
      expect((await c.admin('GET', '/admin/policy')).status).toBe(200);
      const followed = startCli(['audit', 'tail', '--follow', '--type', 'admin.call', '--interval-ms', '100', '--json'], env, dir);
      await until(() => printedPaths().includes('/admin/policy'));
      await new Promise((r) => setTimeout(r, 500));
      expect((await c.admin('GET', '/admin/operators')).status).toBe(200);
      await until(() => printedPaths().includes('/admin/operators'));
      followed.child.kill('SIGTERM');
      const ended = await followed.done;
      expect(ended.code, ended.stderr).toBe(0);
      expect(printedPaths()).toEqual(expect.arrayContaining(['/admin/policy', '/admin/operators']));
      expect(printedPaths()).not.toContain('/admin/audit');
      const calls = (await c.admin('GET', `/admin/audit?type=admin.call&since=${encodeURIComponent(since)}&limit=500`)).json.events as Array<{ path: string; status: number }>;
      expect(calls.filter((e) => e.path === '/admin/audit')).toEqual([]);
      // A refused read is still recorded: that is what someone probing the trail leaves behind.
      expect((await cliWith({ AGENTGATE_ADMIN_TOKEN: 'not-the-admin-token-at-all' }, 'audit', 'tail')).code).toBe(1);
      const after = (await c.admin('GET', `/admin/audit?type=admin.call&since=${encodeURIComponent(since)}&limit=500`)).json.events as Array<{ path: string; status: number }>;
      expect(after.filter((e) => e.path === '/admin/audit')).toEqual([expect.objectContaining({ status: 403, outcome: 'refused', code: 'unauthorized' })]);
    });

    it('a --type that names no event type (exec) is refused with the families there are, not answered with nothing (exit 1)', async () => {
      const run = await cli('audit', 'tail', '--type', 'exec');
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^error: invalid_request: type: "exec" names no event type: .*execute matches execute\.allowed and execute\.refused.*the families are admin, agent, .*execute/m);
      const followed = await cli('audit', 'tail', '--follow', '--type', 'exec');
      expect(followed.code).toBe(1);
      expect(followed.stderr).toContain('names no event type');
    });
  });

  it('agent names are printed terminal-safe: control characters are shown, never obeyed', async () => {
    await Promise.all([keygen('esc-host'), keygen('esc-agent')]);
    const run = await cli('register', '--host-key', 'esc-host.private.jwk.json', '--agent-key', 'esc-agent.private.jwk.json', '--name', 'evil\u001b[2Jname');
    expect(run.code).toBe(0);
    expect(run.stdout).not.toContain('\u001b');
    expect(run.stdout).toMatch(/^name +evil\\u\{1b\}\[2Jname$/m);
    expect((await cli('approvals', 'list')).stdout).not.toContain('\u001b');
  });

  it('no run ever printed the admin token or a private key', async () => {
    const privateParts: string[] = [];
    for (const name of ['host', 'agent', 'reg-host', 'runner-agent']) {
      privateParts.push(JSON.parse(await readFile(join(dir, `${name}.private.jwk.json`), 'utf8')).d);
    }
    const all = printed.join('\n');
    expect(all).not.toContain(ADMIN_TOKEN);
    for (const d of privateParts) expect(all).not.toContain(d);
  });
});
