// The policy guide survives being followed literally (policies/README.md, "Adopting an example").
// Each example of policies/examples/ is adopted exactly as its header says, step by step, into the
// default policy: its "Copy into agentgate.rego" rules are appended, the edit to `verdict`, `imposed`
// or `execute` is made, and its tests are copied into agentgate_test.rego with `policy.` in place
// of `ex.`. Then the real build runs on the result (scripts/build-policy.mjs: opa check, opa test on
// the policy and on examples/, compile, golden decisions) and must pass with every copied test
// counted. The guide says the examples can be adopted together, in any order, so all of them are,
// forwards and back.
//
// The default policy here is the frozen copy in test/fixtures/policies/service/, not policies/: a
// security team that has already adopted an example (or changed the policy in any other way) must
// not see this test fail for adopting it a second time.
//
// A header step this test does not understand fails it: change the guide and this test together.
// opa comes from where the build finds it (OPA_BIN, or the optional npm package for linux-x64).
// Where the build itself says it cannot run (any other platform without OPA_BIN) the tests are
// skipped with its message; on linux-x64 a missing opa is a failure, never a skip.
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it, type TestContext } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const EXAMPLES = path.join(ROOT, 'policies', 'examples');
/** The default policy, its tests, data and golden decisions, as the service tests know them. */
const DEFAULT_POLICY = path.join(ROOT, 'test', 'fixtures', 'policies', 'service');

interface Example {
  name: string;
  module: string;
  tests: string;
}

const examples: Example[] = readdirSync(EXAMPLES)
  .filter((file) => file.endsWith('.rego') && !file.endsWith('_test.rego'))
  .sort()
  .map((file) => {
    const name = file.replace(/\.rego$/, '');
    return { name, module: readFileSync(path.join(EXAMPLES, file), 'utf8'), tests: readFileSync(path.join(EXAMPLES, `${name}_test.rego`), 'utf8') };
  });

/** A step of a header's "To adopt it" list: its prose on one line, and its indented code lines. */
interface Step {
  text: string;
  code: string[];
}

/** The numbered steps under "To adopt it in agentgate.rego" in an example's header comment. */
function adoptionSteps(example: Example): Step[] {
  const header = example.module.split('\n').filter((line) => line.startsWith('#')).map((line) => line.replace(/^# ?/, ''));
  const start = header.findIndex((line) => line.startsWith('To adopt it in agentgate.rego'));
  if (start < 0) throw new Error(`${example.name}.rego: its header has no "To adopt it in agentgate.rego" steps`);
  const steps: Step[] = [];
  for (const line of header.slice(start + 1)) {
    const numbered = /^ {2}\d+\. (.*)$/.exec(line);
    if (numbered) steps.push({ text: numbered[1]!, code: [] });
    else if (steps.length > 0 && /^ {8,}\S/.test(line)) steps.at(-1)!.code.push(line);
    else if (steps.length > 0 && /^ {5}\S/.test(line)) steps.at(-1)!.text += ` ${line.trim()}`;
    else break;
  }
  if (steps.length === 0) throw new Error(`${example.name}.rego: no numbered steps under "To adopt it in agentgate.rego"`);
  return steps;
}

/** Code from a header comment as it goes into a .rego file: common indentation gone, tabs. */
function codeLines(code: string[]): string[] {
  const indent = Math.min(...code.map((line) => /^ */.exec(line)![0].length));
  return code.map((line) => line.slice(indent).replace(/^((?: {4})+)/, (spaces) => '\t'.repeat(spaces.length / 4)));
}

/** The lines of one section of an example module, between its marker and the next one. */
function section(example: Example, marker: string): string {
  const lines = example.module.split('\n');
  const start = lines.findIndex((line) => line.startsWith(`# ---- ${marker}`));
  if (start < 0) throw new Error(`${example.name}.rego has no "${marker}" section`);
  const end = lines.findIndex((line, i) => i > start && line.startsWith('# ---- '));
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n').trim();
}

/** The one rule of the "adopted" section whose head starts with `head`, up to the next blank line. */
function adoptedRule(example: Example, head: string): string {
  const lines = section(example, 'The default policy with this example adopted').split('\n');
  const start = lines.findIndex((line) => line.startsWith(head));
  if (start < 0) throw new Error(`${example.name}.rego: its "adopted" section has no rule starting "${head}"`);
  const end = lines.findIndex((line, i) => i > start && line.trim() === '');
  return lines.slice(start, end < 0 ? undefined : end).join('\n');
}

function onlyIndex(lines: string[], test: (line: string) => boolean, what: string): number {
  const found = lines.flatMap((line, i) => (test(line) ? [i] : []));
  if (found.length !== 1) throw new Error(`agentgate.rego has ${found.length} ${what}, not exactly one`);
  return found[0]!;
}

interface Tree {
  policy: string;
  tests: string;
}

/** Follows one example's header, step by step, on agentgate.rego and agentgate_test.rego. */
function adopt(tree: Tree, example: Example): Tree {
  let { policy, tests } = tree;
  for (const [i, step] of adoptionSteps(example).entries()) {
    const where = `${example.name}.rego, step ${i + 1} ("${step.text}")`;
    let match: RegExpExecArray | null;
    if (/^Copy the rules of the "(?:Copy into agentgate\.rego|copy)" section below/.test(step.text)) {
      policy = `${policy.trimEnd()}\n\n${section(example, 'Copy into agentgate.rego')}\n`;
    } else if ((match = /^In `verdict`, right after the (?:branch with the reason )?"([^"]+)"(?: branch)?.* add the branch$/.exec(step.text))) {
      // The branch ends where the next one starts: the first line after its head that closes it.
      const reason = match[1]!;
      const lines = policy.split('\n');
      const head = onlyIndex(lines, (line) => /^(?:verdict\(r\) :=|\} else :=)/.test(line) && line.includes(`"reason": "${reason}"}`), `verdict branches with the reason "${reason}"`);
      const close = lines.findIndex((line, j) => j > head && line.startsWith('}'));
      if (step.code.length === 0 || close < 0) throw new Error(`${where}: nothing to insert, or no end to that branch`);
      lines.splice(close, 0, ...codeLines(step.code));
      policy = lines.join('\n');
    } else if ((match = /rename the current `execute` to `(\w+)` and (copy `execute` from the "adopted" section(?: below)?, with `\1` in place of `policy\.execute`|add)/i.exec(step.text))) {
      const [, name, how] = match;
      const lines = policy.split('\n');
      const head = onlyIndex(lines, (line) => line.startsWith('execute := '), 'rules named `execute`');
      lines[head] = lines[head]!.replace(/^execute := /, `${name} := `);
      const wrapper = how === 'add' ? codeLines(step.code).join('\n') : adoptedRule(example, 'execute := ').replaceAll('policy.execute', name!);
      policy = `${lines.join('\n').trimEnd()}\n\n${wrapper}\n`;
    } else if (/^Delete the current `imposed`/.test(step.text)) {
      const lines = policy.split('\n');
      const head = onlyIndex(lines, (line) => line.startsWith('imposed('), 'rules named `imposed`');
      const end = lines.findIndex((line, j) => j > head && line.trim() === '');
      lines.splice(head, (end < 0 ? lines.length : end) - head);
      policy = lines.join('\n');
    } else if (/^Copy the tests (?:of \S+ )?into agentgate_test\.rego/.test(step.text)) {
      // Everything below the imports, with `policy.` in place of `ex.`.
      const lines = example.tests.split('\n');
      const lastImport = lines.findLastIndex((line) => line.startsWith('import '));
      const copied = lines.slice(lastImport + 1).join('\n').replace(/\bex\./g, 'policy.').trim();
      tests = `${tests.trimEnd()}\n\n${copied}\n`;
    } else {
      throw new Error(`${where} is not an instruction this test knows how to follow; update test/integration/policy.examples.test.ts with the guide`);
    }
  }
  return { policy, tests };
}

/** Test rules defined in a test file, in order (a name defined twice would silently merge). */
const testNames = (text: string) => [...text.matchAll(/^(test_\w+)\s+if\b/gm)].map((m) => m[1]!);

const run = promisify(execFile);
const work = mkdtempSync(path.join(tmpdir(), 'agentgate-examples-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * Writes the adopted tree into a fresh policies/ (the default policy's data and golden decisions,
 * and examples/) beside a copy of the build script, which finds policies/, src/ and node_modules/ next
 * to its own directory, and runs `npm run policy:build`'s command there. Returns its output.
 */
async function buildAdopted(ctx: TestContext, label: string, tree: Tree): Promise<string> {
  const root = mkdtempSync(path.join(work, `${label}-`));
  cpSync(DEFAULT_POLICY, path.join(root, 'policies'), { recursive: true });
  cpSync(EXAMPLES, path.join(root, 'policies', 'examples'), { recursive: true });
  cpSync(path.join(ROOT, 'scripts', 'build-policy.mjs'), path.join(root, 'scripts', 'build-policy.mjs'));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(root, 'node_modules'));
  // The build checks golden decisions through the service's own engine (src/policy/).
  symlinkSync(path.join(ROOT, 'src'), path.join(root, 'src'));
  writeFileSync(path.join(root, 'policies', 'agentgate.rego'), tree.policy);
  writeFileSync(path.join(root, 'policies', 'agentgate_test.rego'), tree.tests);
  try {
    const { stdout, stderr } = await run(process.execPath, ['scripts/build-policy.mjs'], { cwd: root, maxBuffer: 16 * 1024 * 1024 });
    return `${stdout}${stderr}`;
  } catch (error) {
    const output = `${(error as { stdout?: string }).stdout ?? ''}${(error as { stderr?: string }).stderr ?? ''}`;
    // The one case the build documents it cannot handle: no opa for this platform. Anywhere else
    // (and always on linux-x64, where CI runs) a build that cannot run is a failure.
    const cannotBuildHere = /policy: cannot build: the optional package .* is not installed/.test(output)
      && !process.env.OPA_BIN && `${process.platform}-${process.arch}` !== 'linux-x64';
    if (cannotBuildHere) ctx.skip(`the policy build cannot run on ${process.platform}-${process.arch}: ${output.trim()}`);
    throw new Error(`the build failed after adopting ${label}:\n${output}`);
  }
}

const original: Tree = {
  policy: readFileSync(path.join(DEFAULT_POLICY, 'agentgate.rego'), 'utf8'),
  tests: readFileSync(path.join(DEFAULT_POLICY, 'agentgate_test.rego'), 'utf8'),
};

/** The build passed, and `opa test` ran every test the adopted agentgate_test.rego defines. */
function expectEveryCopiedTestRan(output: string, tree: Tree): void {
  const names = testNames(tree.tests);
  expect(names.filter((name, i) => names.indexOf(name) !== i), 'test names defined twice').toEqual([]);
  expect(output).toContain(`policy: opa test: PASS: ${names.length}/${names.length}\n`);
  expect(output).toMatch(/policy: golden decisions: \d+ passed/);
}

describe.concurrent('the policy guide survives being followed literally', () => {
  it('there are examples to adopt, each with a test file', () => {
    expect(examples.map((e) => e.name)).toEqual(expect.arrayContaining(['approval_by_pattern', 'autonomous_class', 'block_capability', 'narrow_constraints', 'time_window']));
    for (const example of examples) expect(testNames(example.tests).length, example.name).toBeGreaterThan(0);
  });

  it.for(examples.map((e) => [e.name, e] as const))('adopting %s as its header says builds, and opa test runs its copied tests', async ([name, example], ctx) => {
    const adopted = adopt(original, example);
    expect(adopted.policy).not.toBe(original.policy);
    expect(testNames(adopted.tests)).toEqual([...testNames(original.tests), ...testNames(example.tests)]);
    expectEveryCopiedTestRan(await buildAdopted(ctx, name, adopted), adopted);
  });

  it('adopting every example together, in either order, builds, and opa test runs all their tests', async (ctx) => {
    for (const [label, order] of [['all', examples], ['all-reversed', [...examples].reverse()]] as const) {
      const adopted = order.reduce(adopt, original);
      expectEveryCopiedTestRan(await buildAdopted(ctx, label, adopted), adopted);
    }
  });
});
