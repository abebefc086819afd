// The real start-up path (src/main.ts as `npm start` runs it): SIGHUP reloads the policy artefact
// and the operator plugins without a restart, and SIGTERM shuts down cleanly.
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitOf, spawnAgentgate, startAgentgate, STARTUP_BOUND_MS, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';

let dir: string;
let server: Agentgate | undefined;

const health = async () => (await (await fetch(`${server!.base}/healthz`)).json()) as { policy: { sha256: string; generation: number } };

/** What triggered each policy reload the server has logged so far, accepted or refused, in order. */
function policyReloadTriggers(): string[] {
  return server!.output().split('\n').flatMap((line) => {
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
  // Info logs name the trigger of every policy reload (read by the SIGHUP test).
  server = await startAgentgate({ env: { POLICY_WASM_PATH: join(dir, 'policy.wasm'), POLICY_GOLDEN_PATH: join(dir, 'golden.json'), LOG_LEVEL: 'info' } });
}, WITH_SERVERS_TIMEOUT_MS);

afterAll(async () => {
  await server?.stop('SIGKILL');
  await rm(dir, { recursive: true, force: true });
});

describe('signals', () => {
  it('SIGHUP reloads a changed policy artefact without a restart', async () => {
    const before = await health();
    await install('deny');
    // File watching is off here (POLICY_WATCH=false). Rather than sleep to show that the file change
    // alone does nothing, wait for the reload and read its trigger in the log: exactly one reload,
    // and the signal caused it.
    server!.child.kill('SIGHUP');
    await expect.poll(policyReloadTriggers, { timeout: STARTUP_BOUND_MS }).toEqual(['SIGHUP']);
    const after = await health();
    expect(after.policy.generation).toBe(before.policy.generation + 1);
    expect(after.policy.sha256).not.toBe(before.policy.sha256);
  });

  it('SIGTERM shuts down gracefully', async () => {
    const exit = await server!.stop('SIGTERM');
    expect(exit, server!.output()).toEqual({ code: 0, signal: null });
  }, WITH_SERVERS_TIMEOUT_MS);
});

describe('cluster mode (WORKERS)', () => {
  it('two workers serve one port on a shared Redis and stop together on SIGTERM', async () => {
    const { redisUrlForTests, uniquePrefix, deletePrefix } = await import('../support/redis.ts');
    const redisUrl = await redisUrlForTests();
    const prefix = uniquePrefix('workers');
    let primary: Agentgate | undefined;
    try {
      // Resolves once both workers have logged that they listen.
      primary = await startAgentgate({ env: { WORKERS: '2', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix } });
      const statuses = await Promise.all(Array.from({ length: 20 }, async () => (await fetch(`${primary!.base}/.well-known/agent-configuration`)).status));
      expect(statuses.every((s) => s === 200)).toBe(true);
      expect(await primary.stop('SIGTERM'), primary.output()).toEqual({ code: 0, signal: null });
    } finally {
      await primary?.stop('SIGKILL');
      await deletePrefix(redisUrl, prefix);
    }
  }, WITH_SERVERS_TIMEOUT_MS);

  it('refuses more than one worker without Redis', async () => {
    const refused = spawnAgentgate({ WORKERS: '2' });
    expect(await exitOf(refused, 'agentgate with WORKERS=2 and no REDIS_URL'), refused.output()).toEqual({ code: 2, signal: null });
  }, WITH_SERVERS_TIMEOUT_MS);
});
