// The `agentgate` command's launcher (bin/agentgate.mjs): it runs from any directory on any Node. Linked
// as `npm link` links it and started by the system's Node (Node 20 where users reported from), it
// finds the Node the project pins; run again on that Node it passes arguments, exit codes and stop
// signals through, so `audit tail --follow` still stops cleanly; and where no Node can run the tool
// it says which one it needs instead of failing on a `.ts` file. Every child is killed if it
// outlives CHILD_TIMEOUT_MS.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repositoryCopy, systemNode, systemPath } from '../support/guides.ts';
import { freePort } from '../support/net.ts';
import { ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';

const CHILD_TIMEOUT_MS = 30_000;
const LAUNCHER = join(import.meta.dirname, '..', '..', 'bin', 'agentgate.mjs');
const node = systemNode();
const run = promisify(execFile);

interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Starts a child in a process group of its own (as a shell starts a foreground job), bounded. */
function start(command: string, args: readonly string[], options: { cwd: string; env: Record<string, string> }): { child: ChildProcess; done: Promise<Finished>; stdout: () => string } {
  const child = spawn(command, args, { ...options, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const done = new Promise<Finished>((resolve, reject) => {
    const timer = setTimeout(() => {
      process.kill(-child.pid!, 'SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} did not finish within ${CHILD_TIMEOUT_MS} ms; stdout: ${stdout}; stderr: ${stderr}`));
    }, CHILD_TIMEOUT_MS);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, done, stdout: () => stdout };
}

/**
 * A Node that cannot run the TypeScript sources, so the launcher has to run itself again: the system's
 * Node when it cannot (Node 20), else this one with type stripping turned off.
 */
const withoutTypeStripping: { command: string; args: string[] } = Number(/^v(\d+)\.(\d+)/.exec(node.version)![1]) >= 22
  ? { command: process.execPath, args: ['--no-experimental-strip-types'] }
  : { command: node.path, args: [] };

describe('the agentgate launcher (bin/agentgate.mjs)', () => {
  let server: TestServer;
  let dir: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    server = await startTestServer({ store: 'memory' });
    dir = await mkdtemp(join(tmpdir(), 'agentgate-launcher-'));
    // Only what the child needs, and the system's PATH: no node_modules/.bin puts Node 24 first.
    env = { PATH: systemPath(), HOME: dir, AGENTGATE_URL: server.baseUrl, AGENTGATE_ADMIN_TOKEN: ADMIN_TOKEN };
  });
  afterAll(async () => {
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(`linked by npm link, runs from another directory with the system's Node (${node.version}) first on the PATH`, async () => {
    const { dir: copyDir, copy } = await repositoryCopy();
    try {
      const prefix = join(copyDir, 'global');
      const npmEnv = { ...env, npm_config_prefix: prefix, npm_config_cache: join(copyDir, 'npm-cache'), npm_config_update_notifier: 'false' };
      await run('npm', ['link', '--offline', '--no-audit', '--no-fund'], { cwd: copy, env: npmEnv, timeout: CHILD_TIMEOUT_MS });
      const elsewhere = join(copyDir, 'my-agent');
      await mkdir(elsewhere);
      const linked = await start('agentgate', ['keygen', '--name', 'host'], { cwd: elsewhere, env: { ...npmEnv, PATH: `${join(prefix, 'bin')}${delimiter}${env.PATH}` } }).done;
      expect(linked.code, linked.stderr).toBe(0);
      expect((await readdir(elsewhere)).sort()).toEqual(['host.private.jwk.json', 'host.public.jwk.json']);
      // npx finds the linked command too, from any directory.
      const viaNpx = await start('npx', ['agentgate', '--help'], { cwd: elsewhere, env: npmEnv }).done;
      expect(viaNpx.code, viaNpx.stderr).toBe(0);
      expect(viaNpx.stdout).toMatch(/^usage: agentgate /);
    } finally {
      await rm(copyDir, { recursive: true, force: true });
    }
  }, 60_000);

  describe('run again on the pinned Node', () => {
    const launch = (...args: string[]) => start(withoutTypeStripping.command, [...withoutTypeStripping.args, LAUNCHER, ...args], { cwd: dir, env });

    it('passes the arguments and the exit code through: 1 for a refusal, 3 for an unreachable server', async () => {
      const refused = await launch('agents', 'show', 'agt_missing').done;
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('agent_not_found');
      const unreachable = await launch('--url', `http://127.0.0.1:${await freePort()}`, 'policy', 'status').done;
      expect(unreachable.code).toBe(3);
    });

    // `audit tail --follow` stops cleanly (exit 0) on SIGTERM and on Ctrl-C (docs/cli.md).
    for (const [how, stop] of [
      ['SIGTERM sent to the launcher', (child: ChildProcess) => child.kill('SIGTERM')],
      ['Ctrl-C, which reaches the whole foreground process group', (child: ChildProcess) => process.kill(-child.pid!, 'SIGINT')],
    ] as const) {
      it(`stops audit tail --follow cleanly on ${how}`, async () => {
        // An admin call the trail records (within AUDIT_FLUSH_MS), so that a poll prints something
        // once the tool runs.
        expect((await fetch(`${server.baseUrl}/admin/operators`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).status).toBe(200);
        const follow = launch('audit', 'tail', '--follow', '--interval-ms', '100');
        await new Promise<void>((resolve, reject) => {
          follow.child.stdout!.on('data', () => resolve());
          follow.done.then((finished) => reject(new Error(`it ended before printing: ${JSON.stringify(finished)}`)), reject);
        });
        stop(follow.child);
        const finished = await follow.done;
        expect({ code: finished.code, signal: finished.signal }, finished.stderr).toEqual({ code: 0, signal: null });
      });
    }
  });

  it('says which Node it needs where no Node can run the tool, and exits 2', async () => {
    // A checkout with neither the pinned Node (no node_modules) nor the compiled tool (no dist/).
    const bare = join(dir, 'bare');
    await mkdir(join(bare, 'bin'), { recursive: true });
    await copyFile(LAUNCHER, join(bare, 'bin', 'agentgate.mjs'));
    const finished = await start(withoutTypeStripping.command, [...withoutTypeStripping.args, join(bare, 'bin', 'agentgate.mjs'), '--help'], { cwd: dir, env }).done;
    expect(finished.code).toBe(2);
    expect(finished.stdout).toBe('');
    expect(finished.stderr).toContain("cannot run agentgate's TypeScript sources");
    expect(finished.stderr).toContain('22.18');
    expect(finished.stderr).toContain(`run \`npm install\` in ${bare}`);
  });
});
