// The process's last resort (SECURITY.md "Failing closed"), on the real
// start-up path (`node src/main.ts`, as `npm start` runs it): an unhandled promise rejection is
// logged and the server keeps serving; an uncaught exception is logged and the server stops
// accepting, drains and exits with status 1 for its supervisor to restart it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort, waitFor } from '../support/net.ts';
import { SERVICE_POLICY_ENV } from '../support/policies.ts';

/** A plugin whose module, on the main thread only, does `mischief` when the process gets SIGUSR2. */
const plugin = (mischief: string) => `import { isMainThread } from 'node:worker_threads';
import { z } from 'zod';
if (isMainThread) process.on('SIGUSR2', () => { ${mischief} });
export const name = 'mischief';
export const description = 'misbehaves outside evaluate';
export const operand = z.unknown();
export function evaluate() { return true; }
`;

let dir: string | undefined;
let child: ChildProcess | undefined;

afterEach(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function start(mischief: string): Promise<{ base: string; output: () => string; exited: Promise<number | null> }> {
  dir = await mkdtemp(join(tmpdir(), 'agentgate-last-resort-'));
  await symlink(resolve('node_modules'), join(dir, 'node_modules'));
  await writeFile(join(dir, 'mischief.mjs'), plugin(mischief));
  const port = await freePort();
  let output = '';
  child = spawn(process.execPath, ['src/main.ts'], {
    env: { ...process.env, ...SERVICE_POLICY_ENV, PORT: String(port), REDIS_URL: '', PLUGINS_DIR: dir, POLICY_WATCH: 'false', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (chunk) => { output += String(chunk); });
  child.stderr!.on('data', (chunk) => { output += String(chunk); });
  const exited = new Promise<number | null>((r) => child!.once('exit', (code) => r(code)));
  const base = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${base}/healthz`)).ok);
  child.kill('SIGUSR2');
  return { base, output: () => output, exited };
}

describe('last resort', () => {
  it('an unhandled promise rejection is logged and the server keeps serving', async () => {
    const server = await start("Promise.reject(new Error('nobody handles me'));");
    await expect.poll(server.output, { timeout: 5000 }).toMatch(/unhandled promise rejection; the process keeps serving/);
    expect(server.output()).toMatch(/nobody handles me/);
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200);
    expect(child!.exitCode).toBeNull();
  });

  it('an uncaught exception is logged, and the server drains and exits with status 1', async () => {
    const server = await start("throw new Error('state is broken');");
    expect(await server.exited).toBe(1);
    expect(server.output()).toMatch(/uncaught exception; stopping/);
    expect(server.output()).toMatch(/state is broken/);
    expect(server.output()).toMatch(/shutting down/);
  });
});
