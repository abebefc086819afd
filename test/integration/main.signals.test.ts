// The real start-up path (src/main.ts as `npm start` runs it): SIGHUP reloads the policy artefact
// and the operator plugins without a restart, and SIGTERM shuts down cleanly.
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, waitFor } from '../support/net.ts';
import { SERVICE_POLICY_ENV } from '../support/policies.ts';

let dir: string;
let child: ChildProcess;
let base: string;
let stdout = '';

const health = async () => (await (await fetch(`${base}/healthz`)).json()) as { policy: { sha256: string; generation: number } };

/** What triggered each policy reload the server has logged so far, accepted or refused, in order. */
function policyReloadTriggers(): string[] {
  return stdout.split('\n').flatMap((line) => {
    try {
      const entry = JSON.parse(line) as { msg?: string; trigger?: string };
      return entry.msg === 'policy reloaded' || entry.msg?.startsWith('policy reload refused') ? [String(entry.trigger)] : [];
    } catch {
      return [];
    }
  });
}

async function install(name: 'allow' | 'deny') {
  await copyFile(`test/fixtures/policies/${name}.golden.json`, join(dir, 'golden.json'));
  await copyFile(`test/fixtures/policies/${name}.wasm`, join(dir, 'policy.wasm'));
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentgate-main-'));
  await install('allow');
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  child = spawn(process.execPath, ['src/main.ts'], {
    // Info logs name the trigger of every policy reload (read by the SIGHUP test).
    env: { ...process.env, ...SERVICE_POLICY_ENV, PORT: String(port), REDIS_URL: '', POLICY_WASM_PATH: join(dir, 'policy.wasm'), POLICY_GOLDEN_PATH: join(dir, 'golden.json'), POLICY_WATCH: 'false', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  await waitFor(async () => (await fetch(`${base}/healthz`)).ok);
});

afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGKILL');
  await rm(dir, { recursive: true, force: true });
});

describe('signals', () => {
  it('SIGHUP reloads a changed policy artefact without a restart', async () => {
    const before = await health();
    await install('deny');
    // File watching is off here (POLICY_WATCH=false). Rather than sleep to show that the file change
    // alone does nothing, wait for the reload and read its trigger in the log: exactly one reload,
    // and the signal caused it.
    child.kill('SIGHUP');
    await expect.poll(policyReloadTriggers, { timeout: 5000 }).toEqual(['SIGHUP']);
    const after = await health();
    expect(after.policy.generation).toBe(before.policy.generation + 1);
    expect(after.policy.sha256).not.toBe(before.policy.sha256);
  });

  it('SIGTERM shuts down gracefully', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});

describe('cluster mode (WORKERS)', () => {
  it('two workers serve one port on a shared Redis and stop together on SIGTERM', async () => {
    const { redisUrlForTests, uniquePrefix, deletePrefix } = await import('../support/redis.ts');
    const redisUrl = await redisUrlForTests();
    const prefix = uniquePrefix('workers');
    const port = await freePort();
    const primary = spawn(process.execPath, ['src/main.ts'], {
      env: { ...process.env, ...SERVICE_POLICY_ENV, PORT: String(port), WORKERS: '2', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, LOG_LEVEL: 'warn', POLICY_WATCH: 'false' },
      stdio: 'ignore',
    });
    try {
      await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok);
      const statuses = await Promise.all(Array.from({ length: 20 }, async () => (await fetch(`http://127.0.0.1:${port}/.well-known/agent-configuration`)).status));
      expect(statuses.every((s) => s === 200)).toBe(true);
      const exited = new Promise<number | null>((resolve) => primary.once('exit', (code) => resolve(code)));
      primary.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (primary.exitCode === null) primary.kill('SIGKILL');
      await deletePrefix(redisUrl, prefix);
    }
  });

  it('refuses more than one worker without Redis', async () => {
    const child = spawn(process.execPath, ['src/main.ts'], { env: { ...process.env, ...SERVICE_POLICY_ENV, WORKERS: '2', REDIS_URL: '' }, stdio: 'ignore' });
    expect(await new Promise((resolve) => child.once('exit', resolve))).toBe(2);
  });
});
