// The agent developers' guide (docs/clients.md) walks through examples/quickstart.ts; running it
// against a real server here keeps the example, and so the guide, from drifting from the server.
// This runs the file on the test's own Node; the way the guides run it (`npm run example`, with the
// system's Node first on the PATH) is followed by test/integration/guides.test.ts.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ store: 'memory' });
});
afterAll(() => server.close());

/** Runs a file with this Node, bounded; answers its exit code and output. */
function run(file: string, env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} did not finish within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('examples', () => {
  it('examples/quickstart.ts runs its whole walk against a real server', async () => {
    // The test server's clock stands still unless told; the example signs with the real one.
    server.clock.set(Date.now());
    const result = await run('examples/quickstart.ts', { AGENTGATE_URL: server.baseUrl, ADMIN_TOKEN }, 30_000);
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.stdout).toContain('execute outside the constraint: 403 constraint_violated');
    expect(result.stdout).toContain('execute after revocation: 403 agent_revoked');
    expect(result.stdout).toContain('quickstart: done');
  }, 40_000);
});
