// Live policy reload (DESIGN §5): a file change or an explicit call swaps the artefact without a
// restart; a broken artefact is refused and the previous policy keeps serving. The artefacts are
// committed fixtures (test/support/policies.ts), never the shipped policy.
import { createHash } from 'node:crypto';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { loadPolicyEngine, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { PolicyReloader } from '../../src/policy/reloader.ts';
import { fixturePolicy, SERVICE_POLICY } from '../support/policies.ts';

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
    await copyFile(SERVICE_POLICY.wasmPath, join(dir, 'policy.wasm'));
    await copyFile(SERVICE_POLICY.goldenPath, join(dir, 'golden.json'));
    engine = await loadPolicyEngine({ wasmPath: join(dir, 'policy.wasm'), goldenPath: join(dir, 'golden.json') });
    reloader = new PolicyReloader({ engine, logger: silentLogger, watchPaths: [join(dir, 'policy.wasm')], debounceMs: 20 });
  });

  afterEach(async () => {
    reloader.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('a changed artefact file is picked up without a restart', async () => {
    reloader.start();
    expect(engine.decideExecute(allowInput).allow).toBe(true);
    // A policy that refuses every execute, so the answer shows which artefact decides. The watch
    // may fire while the file is still being written; the reload it starts is refused and the next
    // event's succeeds, so wait for the new artefact itself rather than for any reload.
    const deny = fixturePolicy('deny');
    const denySha256 = createHash('sha256').update(await readFile(deny.wasmPath)).digest('hex');
    await copyFile(deny.goldenPath, join(dir, 'golden.json'));
    await copyFile(deny.wasmPath, join(dir, 'policy.wasm'));
    await expect.poll(() => engine.info().sha256, { timeout: 5000 }).toBe(denySha256);
    expect(engine.decideExecute(allowInput)).toEqual({ allow: false, violations: [], reason: 'maintenance window' });
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
