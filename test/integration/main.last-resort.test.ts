// The process's last resort (SECURITY.md "Failing closed"), on the real
// start-up path (`node src/main.ts`, as `npm start` runs it): an unhandled promise rejection is
// logged and the server keeps serving; an uncaught exception is logged and the server stops
// accepting, drains and exits with status 1 for its supervisor to restart it.
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { exitOf, startAgentgate, STARTUP_BOUND_MS, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';

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
let server: Agentgate | undefined;

afterEach(async () => {
  await server?.stop('SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Starts src/main.ts with the mischief plugin, waits until it listens, and sends it SIGUSR2. */
async function start(mischief: string): Promise<Agentgate> {
  dir = await mkdtemp(join(tmpdir(), 'agentgate-last-resort-'));
  await symlink(resolve('node_modules'), join(dir, 'node_modules'));
  await writeFile(join(dir, 'mischief.mjs'), plugin(mischief));
  server = await startAgentgate({ env: { PLUGINS_DIR: dir } });
  server.child.kill('SIGUSR2');
  return server;
}

describe('last resort', () => {
  it('an unhandled promise rejection is logged and the server keeps serving', async () => {
    const server = await start("Promise.reject(new Error('nobody handles me'));");
    await expect.poll(server.output, { timeout: STARTUP_BOUND_MS }).toMatch(/unhandled promise rejection; the process keeps serving/);
    expect(server.output()).toMatch(/nobody handles me/);
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200);
    expect(server.child.exitCode).toBeNull();
  }, WITH_SERVERS_TIMEOUT_MS);

  it('an uncaught exception is logged, and the server drains and exits with status 1', async () => {
    const server = await start("throw new Error('state is broken');");
    expect(await exitOf(server, 'agentgate after an uncaught exception'), server.output()).toEqual({ code: 1, signal: null });
    expect(server.output()).toMatch(/uncaught exception; stopping/);
    expect(server.output()).toMatch(/state is broken/);
    expect(server.output()).toMatch(/shutting down/);
  }, WITH_SERVERS_TIMEOUT_MS);
});
