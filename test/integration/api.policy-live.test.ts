// Live policy changes over HTTP (DESIGN §5): a new artefact takes effect on the next
// request without a restart, a broken one changes nothing, and requests in flight during a swap
// are all answered by one policy or the other.
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const FIXTURES = 'test/fixtures/policies';
let dir: string;
let server: TestServer;
let c: Client;
let agent: TestAgent;

/** Installs a fixture artefact with the golden decisions it must pass. */
async function install(name: 'allow' | 'deny') {
  await copyFile(join(FIXTURES, `${name}.golden.json`), join(dir, 'golden.json'));
  await copyFile(join(FIXTURES, `${name}.wasm`), join(dir, 'policy.wasm'));
}
const reload = () => c.admin('POST', '/admin/policy/reload');
const health = async () => (await http('GET', c.url('/healthz'))).json.policy as { sha256: string; generation: number };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentgate-live-policy-'));
  await install('allow');
  server = await startTestServer({ env: { POLICY_WASM_PATH: join(dir, 'policy.wasm'), POLICY_GOLDEN_PATH: join(dir, 'golden.json') } });
  c = new Client(server);
  agent = await c.activeAgent(['echo']);
});
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe('live policy changes', () => {
  it('a changed policy takes effect on the next request, with no restart, and health shows it', async () => {
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    const before = await health();
    await install('deny');
    const res = await reload();
    expect(res.status).toBe(200);
    expect(res.json.generation).toBe(before.generation + 1);
    const refused = await c.execute(agent, 'echo', {});
    expect(code(refused)).toBe('403 capability_not_granted');
    expect(refused.json.message).toBe('maintenance window');
    const after = await health();
    expect(after.sha256).not.toBe(before.sha256);
    await install('allow');
    expect((await reload()).status).toBe(200);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
  });

  it('a broken artefact is refused (422 reload_rejected) and the old policy keeps serving', async () => {
    const before = await health();
    await writeFile(join(dir, 'policy.wasm'), Buffer.from('\0asm\x01\0\0\0 truncated'));
    expect(code(await reload())).toBe('422 reload_rejected');
    expect(await health()).toEqual(before);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    await install('allow');
  });

  it('requests in flight during swaps all get an answer from one policy or the other', async () => {
    const answers: string[] = [];
    const workers = 8;
    let swapping = true;
    // Requests run until the last swap is done. Before each swap, and after the last, the swapper
    // waits for `workers + 1` more answers: with at most `workers` requests in flight, the last of
    // them started after the previous swap, so every installed policy answers at least once and
    // the requests overlap every swap, however fast either side runs.
    const answeredUnderTheCurrentPolicy = async () => {
      const seen = answers.length;
      await expect.poll(() => answers.length, { timeout: 5000, interval: 5 }).toBeGreaterThan(seen + workers);
    };
    const swaps = (async () => {
      try {
        for (let i = 0; i < 6; i++) {
          await answeredUnderTheCurrentPolicy();
          await install(i % 2 === 0 ? 'deny' : 'allow');
          expect((await reload()).status).toBe(200);
        }
        await answeredUnderTheCurrentPolicy();
      } finally {
        swapping = false;
      }
    })();
    await Promise.all([
      swaps,
      ...Array.from({ length: workers }, async () => {
        while (swapping) answers.push(code(await c.execute(agent, 'echo', {})));
      }),
    ]);
    expect(answers.length).toBeGreaterThan(7 * workers);
    expect(answers.every((a) => a === '200' || a === '403 capability_not_granted')).toBe(true);
    expect(answers).toContain('200');
    expect(answers).toContain('403 capability_not_granted');
  });
});
