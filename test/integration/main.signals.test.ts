// The real start-up path (src/main.ts as `npm start` runs it): SIGHUP reloads the policy artefact
// and the operator plugins without a restart, and SIGTERM shuts down cleanly.
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, waitFor } from '../support/net.ts';

let dir: string;
let child: ChildProcess;
let base: string;

const health = async () => (await (await fetch(`${base}/healthz`)).json()) as { policy: { sha256: string; generation: number } };

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
    env: { ...process.env, PORT: String(port), REDIS_URL: '', POLICY_WASM_PATH: join(dir, 'policy.wasm'), POLICY_GOLDEN_PATH: join(dir, 'golden.json'), POLICY_WATCH: 'false', LOG_LEVEL: 'warn' },
    stdio: 'ignore',
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
    // File watching is off here, so only the signal can make the new artefact take effect.
    await new Promise((r) => setTimeout(r, 500));
    expect((await health()).policy.generation).toBe(before.policy.generation);
    child.kill('SIGHUP');
    await expect.poll(async () => (await health()).policy.generation, { timeout: 5000 }).toBeGreaterThan(before.policy.generation);
    expect((await health()).policy.sha256).not.toBe(before.policy.sha256);
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
      env: { ...process.env, PORT: String(port), WORKERS: '2', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, LOG_LEVEL: 'warn', POLICY_WATCH: 'false' },
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
    const child = spawn(process.execPath, ['src/main.ts'], { env: { ...process.env, WORKERS: '2', REDIS_URL: '' }, stdio: 'ignore' });
    expect(await new Promise((resolve) => child.once('exit', resolve))).toBe(2);
  });
});
