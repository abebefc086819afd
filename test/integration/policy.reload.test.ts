// Live policy reload (DESIGN §5): a file change or an explicit call swaps the artefact without a
// restart; a broken artefact is refused and the previous policy keeps serving.
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { loadPolicyEngine, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { PolicyReloader } from '../../src/policy/reloader.ts';

const allowInput = {
  now_ms: 0,
  agent: { id: 'agt_1', mode: 'delegated' as const, host_id: 'hst_1' },
  capability: 'echo',
  arguments: { amount: 5 },
  grants: [{ id: 'grt_1', constraints: { amount: { max: 10 } } }],
};

describe('policy reload', () => {
  let dir: string;
  let engine: WasmPolicyEngine;
  let reloader: PolicyReloader;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agentgate-reload-'));
    await copyFile('policies/dist/policy.wasm', join(dir, 'policy.wasm'));
    await copyFile('policies/golden.json', join(dir, 'golden.json'));
    engine = await loadPolicyEngine({ wasmPath: join(dir, 'policy.wasm'), goldenPath: join(dir, 'golden.json') });
    reloader = new PolicyReloader({ engine, logger: silentLogger, watchPaths: [join(dir, 'policy.wasm')], debounceMs: 20 });
  });

  afterEach(async () => {
    reloader.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('a changed artefact file is picked up without a restart', async () => {
    reloader.start();
    const before = engine.info().generation;
    await copyFile('policies/dist/policy.wasm', join(dir, 'policy.wasm'));
    await expect.poll(() => engine.info().generation, { timeout: 3000 }).toBeGreaterThan(before);
    expect(engine.decideExecute(allowInput).allow).toBe(true);
  });

  it('a truncated artefact is refused and the previous policy keeps deciding', async () => {
    const before = engine.info();
    await writeFile(join(dir, 'policy.wasm'), Buffer.from('\0asm not really'));
    const outcome = await reloader.reload('admin');
    expect(outcome.ok).toBe(false);
    expect(engine.info()).toEqual(before);
    expect(engine.decideExecute(allowInput).allow).toBe(true);
  });

  it('an artefact that fails the golden decisions is refused', async () => {
    const before = engine.info();
    await writeFile(join(dir, 'golden.json'), JSON.stringify([{ name: 'wrong on purpose', entrypoint: 'agentgate/execute', input: allowInput, expected: { allow: false, violations: [] } }]));
    const outcome = await reloader.reload('SIGHUP');
    expect(outcome).toMatchObject({ ok: false });
    expect(engine.info().generation).toBe(before.generation);
  });
});
