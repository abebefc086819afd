// The shipped policy itself (policies/), and the one service-independent place in `npm test` that
// loads policies/dist/policy.wasm (every test of the service uses the fixture in
// test/fixtures/policies/, see test/support/policies.ts). What the policy decides is the security
// team's to change, and is tested by its own `opa test` files and golden.json at every build; what
// holds whatever they decide is checked here: dist/ is the build of the sources beside it, and
// agentgate would serve it, with the shipped operator plugins answering agentgate.operator, every
// golden decision coming out of the engine's checked decision path unchanged.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadPlugins } from '../../src/operators/plugin-loader.ts';
import { OperatorRegistry } from '../../src/operators/registry.ts';
import { loadPolicyEngine } from '../../src/policy/engine.ts';
import type { ExecuteInput, GrantsInput } from '../../src/policy/types.ts';
import { SHIPPED_POLICY } from '../support/policies.ts';
import { evaluateInProcess } from '../support/operators.ts';

const POLICIES = fileURLToPath(new URL('../../policies/', import.meta.url));
const sha256 = (file: string) => createHash('sha256').update(readFileSync(path.join(POLICIES, file))).digest('hex');

interface Manifest {
  wasm: { path: string; sha256: string };
  capabilities_sha256: string;
  sources: Record<string, string>;
}
const manifest = JSON.parse(readFileSync(path.join(POLICIES, 'dist/manifest.json'), 'utf8')) as Manifest;

/** The build's sources (scripts/build-policy.mjs listSources): every .rego outside dist/ and dot-directories, and data.json. */
function sources(): string[] {
  const rego = readdirSync(POLICIES, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.rego'))
    .map((entry) => path.relative(POLICIES, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'))
    .filter((file) => !file.startsWith('dist/') && !file.split('/').some((part) => part.startsWith('.')));
  return [...rego, 'data.json'].sort();
}

interface GoldenCase {
  name: string;
  entrypoint: 'agentgate/grants' | 'agentgate/execute';
  input: unknown;
  expected: unknown;
}

describe('the shipped policy artefact', () => {
  it('is the build of the sources beside it (run npm run policy:build after every change)', () => {
    expect(sha256(manifest.wasm.path)).toBe(manifest.wasm.sha256);
    expect(sha256('capabilities.json')).toBe(manifest.capabilities_sha256);
    expect(Object.keys(manifest.sources).sort()).toEqual(sources());
    for (const file of sources()) expect(sha256(file), `policies/${file}`).toBe(manifest.sources[file]);
  });

  it('is served by the engine with the shipped plugins, and every golden decision comes out unchanged', async () => {
    const registry = new OperatorRegistry(await loadPlugins(fileURLToPath(new URL('../../plugins', import.meta.url))));
    // Loading runs golden.json through the artefact, as agentgate does before it serves one.
    const engine = await loadPolicyEngine({ ...SHIPPED_POLICY, operator: (name, operand, actual) => evaluateInProcess(registry, name, operand, actual) });
    expect(engine.info().sha256).toBe(manifest.wasm.sha256);
    const golden = JSON.parse(readFileSync(SHIPPED_POLICY.goldenPath, 'utf8')) as GoldenCase[];
    expect(new Set(golden.map((c) => c.entrypoint))).toEqual(new Set(['agentgate/grants', 'agentgate/execute']));
    for (const c of golden) {
      const decided = c.entrypoint === 'agentgate/grants' ? engine.decideGrants(c.input as GrantsInput) : engine.decideExecute(c.input as ExecuteInput);
      expect(decided, c.name).toEqual(c.expected);
    }
  });
});
