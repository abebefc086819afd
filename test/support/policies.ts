// The compiled policies tests run against (test/fixtures/policies/README.md). Every test of the
// service uses SERVICE_POLICY, a committed copy of the default policy, never
// policies/dist/policy.wasm: the security team changes policies/ without touching the code, and
// such a change must not break `npm test`. Only the tests of the shipped policy itself load
// SHIPPED_POLICY (test/integration/policy.shipped.test.ts).
import { fileURLToPath } from 'node:url';

export interface PolicyFiles {
  wasmPath: string;
  goldenPath: string;
}

export const FIXTURES_DIR = fileURLToPath(new URL('../fixtures/policies/', import.meta.url));

const fixture = (relative: string) => fileURLToPath(new URL(`../fixtures/policies/${relative}`, import.meta.url));

/** The default policy as the service tests know it, built from test/fixtures/policies/service/. */
export const SERVICE_POLICY: PolicyFiles = { wasmPath: fixture('service.wasm'), goldenPath: fixture('service/golden.json') };

/** A one-file fixture policy and the golden decisions beside it. */
export function fixturePolicy(name: 'allow' | 'deny' | 'misbehaving'): PolicyFiles {
  return { wasmPath: fixture(`${name}.wasm`), goldenPath: fixture(`${name}.golden.json`) };
}

/** The artefact the security team ships; tests of the service must not use it. */
export const SHIPPED_POLICY: PolicyFiles = {
  wasmPath: fileURLToPath(new URL('../../policies/dist/policy.wasm', import.meta.url)),
  goldenPath: fileURLToPath(new URL('../../policies/golden.json', import.meta.url)),
};

/** The environment that makes a spawned `node src/main.ts` serve SERVICE_POLICY instead of the shipped one. */
export const SERVICE_POLICY_ENV = { POLICY_WASM_PATH: SERVICE_POLICY.wasmPath, POLICY_GOLDEN_PATH: SERVICE_POLICY.goldenPath } as const;
