// The policy engine's guarantees (DESIGN §5): decisions come from the compiled policy; a bad
// artefact is refused while the old one keeps serving; anything but a well-formed answer is a
// PolicyError (fail closed); an exception inside wasm never poisons the next decision.
// Every artefact here is a committed fixture (test/fixtures/policies/), so every one of these tests
// runs on every platform, opa or not: the default policy as the service knows it (service.wasm),
// and policies that misbehave on purpose.
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadPolicyEngine, PolicyLoadError } from '../../src/policy/engine.ts';
import type { WasmPolicyEngine } from '../../src/policy/engine.ts';
import { PolicyError } from '../../src/policy/types.ts';
import type { ExecuteInput, GrantsInput } from '../../src/policy/types.ts';
import { FIXTURES_DIR, fixturePolicy, SERVICE_POLICY } from '../support/policies.ts';

const WASM = SERVICE_POLICY.wasmPath;
const GOLDEN = SERVICE_POLICY.goldenPath;
const wasmBytes = readFileSync(WASM);
const goldenText = readFileSync(GOLDEN, 'utf8');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'agentgate-policy-test-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A private copy of the artefact and golden file that a test may overwrite. */
let copies = 0;
function copyArtefact(): { wasmPath: string; goldenPath: string } {
  copies++;
  const wasmPath = path.join(dir, `policy-${copies}.wasm`);
  const goldenPath = path.join(dir, `golden-${copies}.json`);
  writeFileSync(wasmPath, wasmBytes);
  writeFileSync(goldenPath, goldenText);
  return { wasmPath, goldenPath };
}

type Host = GrantsInput['host'];
const activeLinked: Host = { id: 'hst_1', status: 'active', linked: true, default_capabilities: ['read_file', 'purge_all_data'] };

function grantsInput(host: Host, mode: 'delegated' | 'autonomous', capabilities: string[], extra: Partial<GrantsInput['requests'][number]> = {}): GrantsInput {
  return {
    now_ms: 1_767_225_600_000,
    action: 'register',
    host,
    agent: { id: null, mode },
    requests: capabilities.map((capability) => ({ capability, exists: true, constraints: null, previous_status: null, ...extra })),
  };
}

function executeInput(args: Record<string, unknown>, constraints: Record<string, unknown> | null = { amount: { max: 100 } }): ExecuteInput {
  return {
    now_ms: 1_767_225_600_000,
    agent: { id: 'agt_1', mode: 'delegated', host_id: 'hst_1' },
    capability: 'transfer_money',
    arguments: args,
    grants: [{ id: 'grt_1', constraints }],
  };
}

const allowed = { allow: true, grant_id: 'grt_1', violations: [] };
const refused500 = { allow: false, reason: 'constraint violated', violations: [{ field: 'amount', constraint: { max: 100 }, actual: 500 }] };

describe('grants decisions of the default policy (as the service fixture holds it)', () => {
  let engine: WasmPolicyEngine;
  beforeAll(async () => {
    engine = await loadPolicyEngine({ wasmPath: WASM, goldenPath: GOLDEN });
  });

  it('grants a delegated agent the default capability of an active, linked host', () => {
    expect(engine.decideGrants(grantsInput(activeLinked, 'delegated', ['read_file']))).toEqual({ decisions: [{ capability: 'read_file', decision: 'grant' }] });
  });

  it('asks the user when the host is not linked yet', () => {
    const out = engine.decideGrants(grantsInput({ ...activeLinked, linked: false }, 'delegated', ['read_file']));
    expect(out.decisions).toEqual([{ capability: 'read_file', decision: 'approval', reason: 'user approval required' }]);
  });

  it('asks again for a capability that was revoked before', () => {
    const out = engine.decideGrants(grantsInput(activeLinked, 'delegated', ['read_file'], { previous_status: 'revoked' }));
    expect(out.decisions[0]?.decision).toBe('approval');
  });

  it('grants an autonomous agent the capabilities data.json lists (data is compiled into the wasm)', () => {
    const host: Host = { id: 'hst_2', status: 'active', linked: false, default_capabilities: [] };
    const out = engine.decideGrants(grantsInput(host, 'autonomous', ['echo', 'write_file']));
    expect(out.decisions).toEqual([
      { capability: 'echo', decision: 'grant' },
      { capability: 'write_file', decision: 'approval', reason: 'administrator approval required' },
    ]);
  });

  it('denies a blocked capability even when it is a host default', () => {
    expect(engine.decideGrants(grantsInput(activeLinked, 'delegated', ['purge_all_data'])).decisions).toEqual([
      { capability: 'purge_all_data', decision: 'deny', reason: 'blocked by policy' },
    ]);
  });

  it('denies an unknown capability and everything for a revoked host', () => {
    expect(engine.decideGrants(grantsInput(activeLinked, 'delegated', ['nope'], { exists: false })).decisions[0]).toEqual({ capability: 'nope', decision: 'deny', reason: 'unknown capability' });
    expect(engine.decideGrants(grantsInput({ ...activeLinked, status: 'revoked' }, 'delegated', ['read_file'])).decisions[0]?.decision).toBe('deny');
  });

  it('gives exactly one decision per request', () => {
    const out = engine.decideGrants(grantsInput(activeLinked, 'delegated', ['read_file', 'write_file', 'purge_all_data', 'read_file']));
    expect(out.decisions.map((d) => [d.capability, d.decision])).toEqual([
      ['read_file', 'grant'], ['write_file', 'approval'], ['purge_all_data', 'deny'], ['read_file', 'grant'],
    ]);
  });

  it('refuses, rather than drops, a request the policy cannot decide', () => {
    const input = grantsInput(activeLinked, 'delegated', ['read_file']);
    const broken = { ...input, requests: [...input.requests, { exists: true } as unknown as GrantsInput['requests'][number]] };
    expect(() => engine.decideGrants(broken)).toThrow(PolicyError);
  });
});

describe('execute decisions', () => {
  it('compares 500 and 500.0 as equal inside wasm, even when the JSON text differs', async () => {
    // JSON.parse already turns 500.0 into 500, so feed the raw text to the SDK to test the wasm.
    const opa = createRequire(import.meta.url)('@open-policy-agent/opa-wasm') as typeof import('@open-policy-agent/opa-wasm');
    const policy = await opa.loadPolicy(wasmBytes, { initial: 5, maximum: 64 });
    const text = '{"now_ms":1,"agent":{"id":"a","mode":"delegated","host_id":"h"},"capability":"c","arguments":{"a":500.0,"b":7.0,"c":1e2},'
      + '"grants":[{"id":"g","constraints":{"a":{"eq":500},"b":{"in":[7]},"c":100}}]}';
    const bytes = new TextEncoder().encode(text);
    const result = policy.evaluate(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength), 'agentgate/execute');
    expect(result).toEqual([{ result: { allow: true, grant_id: 'g', violations: [] } }]);
  });

  it('refuses with no violations when the agent holds no grant', async () => {
    const engine = await loadPolicyEngine({ wasmPath: WASM, goldenPath: GOLDEN });
    expect(engine.decideExecute({ ...executeInput({}), grants: [] })).toEqual({ allow: false, reason: 'no active grant', violations: [] });
  });
});

describe('loading and reloading', () => {
  let files: { wasmPath: string; goldenPath: string };
  let engine: WasmPolicyEngine;
  beforeEach(async () => {
    files = copyArtefact();
    engine = await loadPolicyEngine(files);
  });

  /** The old artefact still answers, with the same identity. */
  function expectStillServing(generation: number): void {
    expect(engine.info()).toMatchObject({ sha256: sha256(wasmBytes), generation });
    expect(engine.decideExecute(executeInput({ amount: 50 }))).toEqual(allowed);
    expect(engine.decideExecute(executeInput({ amount: 500 }))).toEqual(refused500);
  }

  it('reports the artefact it serves', () => {
    const manifest = JSON.parse(readFileSync(path.join(FIXTURES_DIR, 'manifest.json'), 'utf8')) as { fixtures: Record<string, { sha256: string }> };
    const info = engine.info();
    expect(info.sha256).toBe(manifest.fixtures['service.wasm']?.sha256);
    expect(info.generation).toBe(1);
    expect(Math.abs(info.loadedAtMs - Date.now())).toBeLessThan(60_000);
  });

  it('increments the generation on each successful reload', async () => {
    await engine.reload();
    await engine.reload();
    expect(engine.info().generation).toBe(3);
    expectStillServing(3);
  });

  it('runs concurrent reloads one after another', async () => {
    await Promise.all([engine.reload(), engine.reload(), engine.reload()]);
    expect(engine.info().generation).toBe(4);
  });

  it('refuses a truncated artefact and keeps serving the old one', async () => {
    writeFileSync(files.wasmPath, wasmBytes.subarray(0, Math.floor(wasmBytes.length / 2)));
    await expect(engine.reload()).rejects.toThrow(PolicyLoadError);
    expectStillServing(1);
  });

  it('refuses a file that is not WebAssembly and keeps serving the old one', async () => {
    writeFileSync(files.wasmPath, 'package agentgate\n');
    await expect(engine.reload()).rejects.toThrow(/not a loadable policy artefact/);
    expectStillServing(1);
  });

  it('refuses a missing artefact and keeps serving the old one', async () => {
    rmSync(files.wasmPath);
    await expect(engine.reload()).rejects.toThrow(/cannot read the policy/);
    expectStillServing(1);
  });

  it('refuses an artefact whose golden decisions fail and keeps serving the old one', async () => {
    const golden = JSON.parse(goldenText) as Array<{ name: string; expected: { allow?: boolean } }>;
    const execute = golden.find((c) => c.expected.allow === true);
    if (!execute) throw new Error('golden.json has no allowed execute');
    execute.expected.allow = false;
    writeFileSync(files.goldenPath, JSON.stringify(golden));
    await expect(engine.reload()).rejects.toThrow(`golden decision "${execute.name}" differs`);
    expectStillServing(1);
  });

  it('refuses golden decisions that leave an entrypoint unchecked', async () => {
    const golden = (JSON.parse(goldenText) as Array<{ entrypoint: string }>).filter((c) => c.entrypoint !== 'agentgate/execute');
    writeFileSync(files.goldenPath, JSON.stringify(golden));
    await expect(engine.reload()).rejects.toThrow(/must cover agentgate\/execute/);
    expectStillServing(1);
  });

  it('refuses malformed golden decisions', async () => {
    writeFileSync(files.goldenPath, '{"not": "an array"}');
    await expect(engine.reload()).rejects.toThrow(PolicyLoadError);
    expectStillServing(1);
  });

  it('serves the new artefact after a good reload that follows a refused one', async () => {
    writeFileSync(files.wasmPath, 'garbage');
    await expect(engine.reload()).rejects.toThrow(PolicyLoadError);
    writeFileSync(files.wasmPath, wasmBytes);
    await engine.reload();
    expectStillServing(2);
  });

  it('refuses to start on a bad artefact', async () => {
    const bad = copyArtefact();
    writeFileSync(bad.wasmPath, wasmBytes.subarray(0, 100));
    await expect(loadPolicyEngine(bad)).rejects.toThrow(PolicyLoadError);
  });
});

describe('fail closed', () => {
  it('turns a memory failure inside the policy into a PolicyError, and the next decisions are still right', async () => {
    // 8 pages (512 KiB) pass the golden decisions but not a 200 KB argument (opa_malloc fails
    // inside wasm) nor a 2 MB one (the SDK cannot grow memory: RangeError).
    const engine = await loadPolicyEngine({ wasmPath: WASM, goldenPath: GOLDEN, memoryMaxPages: 8 });
    for (const size of [200_000, 2_000_000]) {
      expect(() => engine.decideExecute(executeInput({ amount: 1, blob: 'x'.repeat(size) }))).toThrow(PolicyError);
      expect(engine.decideExecute(executeInput({ amount: 50 }))).toEqual(allowed);
      expect(engine.decideExecute(executeInput({ amount: 500 }))).toEqual(refused500);
    }
    expect(engine.info().instanceReplacements).toBe(2);
  });

  it('refuses to decide before a policy is loaded', async () => {
    const { WasmPolicyEngine } = await import('../../src/policy/engine.ts');
    const engine = new WasmPolicyEngine({ wasmPath: WASM, goldenPath: GOLDEN });
    expect(() => engine.decideExecute(executeInput({ amount: 1 }))).toThrow(PolicyError);
  });
});

// Policies that misbehave on purpose (test/fixtures/policies/misbehaving.rego), committed compiled
// so these fail-closed tests run everywhere. They prove the engine only passes on answers it can
// vouch for.
describe('answers the engine refuses to pass on (misbehaving policies)', () => {
  const files = fixturePolicy('misbehaving');
  const input = (capability: string, args: Record<string, unknown> = {}): ExecuteInput => ({ ...executeInput(args), capability });

  it('never passes on an allow that names a grant the caller did not hold', async () => {
    const engine = await loadPolicyEngine(files);
    expect(engine.decideExecute(input('ok'))).toEqual(allowed);
    expect(() => engine.decideExecute(input('forge'))).toThrow(/malformed decision/);
  });

  it('refuses a malformed violation and an undefined result', async () => {
    const engine = await loadPolicyEngine(files);
    expect(() => engine.decideExecute(input('malformed'))).toThrow(PolicyError);
    expect(() => engine.decideExecute(input('undefined'))).toThrow(/undefined for this input/);
    expect(engine.decideExecute(input('ok'))).toEqual(allowed);
  });

  it('reaches plugin operators through agentgate.operator, and a throwing operator reads as false', async () => {
    let behaviour: 'yes' | 'no' | 'throw' = 'yes';
    const engine = await loadPolicyEngine({
      ...files,
      operator: (name, operand, actual) => {
        expect([name, operand, actual]).toEqual(['starts_with', 1, 2]);
        if (behaviour === 'throw') throw new Error('plugin bug');
        return behaviour === 'yes';
      },
    });
    expect(engine.decideExecute(input('operator', { op: 'starts_with' }))).toEqual(allowed);
    behaviour = 'no';
    expect(engine.decideExecute(input('operator', { op: 'starts_with' })).reason).toBe('operator said no');
    behaviour = 'throw';
    expect(engine.decideExecute(input('operator', { op: 'starts_with' })).reason).toBe('operator said no');
    behaviour = 'yes';
    expect(engine.decideExecute(input('operator', { op: 'starts_with' }))).toEqual(allowed);
    expect(engine.info().instanceReplacements).toBe(0);
  });

  it('refuses an artefact that lacks an entrypoint', async () => {
    const wasmPath = path.join(FIXTURES_DIR, 'misbehaving-grants-only.wasm');
    await expect(loadPolicyEngine({ wasmPath, goldenPath: files.goldenPath })).rejects.toThrow(/lacks the entrypoint\(s\) agentgate\/execute/);
  });
});
