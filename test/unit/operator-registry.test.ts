// Loading operator plugins: broken plugins stop start-up with a message naming the file and the
// problem; duplicates and shadowed built-ins are refused; evaluation never throws.
import { copyFile, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPlugins } from '../../src/operators/plugin-loader.ts';
import { OperatorRegistry } from '../../src/operators/registry.ts';
import { evaluateInProcess } from '../support/operators.ts';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentgate-plugins-'));
  // Plugins import zod; outside the project they resolve it through this link.
  await symlink(resolve('node_modules'), join(dir, 'node_modules'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const plugin = (name: string, body = 'return actual === operand;') =>
  `import { z } from 'zod';\nexport const name = ${JSON.stringify(name)};\nexport const description = 'test';\nexport const operand = z.string();\nexport function evaluate(operand, actual) { ${body} }\n`;

/**
 * The plugins agentgate ships are all there, once each. A deployment may add its own beside them
 * (plugins/README.md), so this never asks for the exact list: adding a plugin must not break the suite.
 */
function expectShippedPlugins(names: string[]): void {
  expect(names).toEqual(expect.arrayContaining(['cidr', 'max_length', 'prefix', 'regex']));
  expect(new Set(names).size).toBe(names.length);
}

describe('plugin loader', () => {
  it('loads the shipped plugins', async () => {
    expectShippedPlugins((await loadPlugins('plugins')).map((p) => p.name));
  });

  it('a plugin added as plugins/README.md shows keeps the shipped-plugin checks passing, and loads as written', async () => {
    // plugins/ as a platform team leaves it after following the guide: the shipped files plus the
    // guide's own example, copied from its code block.
    const guide = await readFile('plugins/README.md', 'utf8');
    const example = /```ts\n\/\/ plugins\/([a-z_]+\.ts)\n([\s\S]*?)```/.exec(guide);
    if (!example) throw new Error('plugins/README.md no longer shows an example plugin (a ```ts block starting with // plugins/<name>.ts)');
    for (const file of await readdir('plugins')) if (/\.(ts|mts|js|mjs)$/.test(file)) await copyFile(join('plugins', file), join(dir, file));
    await writeFile(join(dir, example[1]!), example[2]!);
    const loaded = await loadPlugins(dir);
    expectShippedPlugins(loaded.map((p) => p.name));
    const registry = new OperatorRegistry(loaded);
    expect(registry.has('ends_with')).toBe(true);
    expect(evaluateInProcess(registry, 'ends_with', 'Z', 'ABZ')).toBe(true);
    expect(evaluateInProcess(registry, 'ends_with', 'Z', 'ABC')).toBe(false);
  });

  it('loads named exports and default-export objects, skipping tests and non-code files', async () => {
    await writeFile(join(dir, 'one.mjs'), plugin('one'));
    await writeFile(join(dir, 'two.mjs'), `import { z } from 'zod';\nexport default { name: 'two', description: 'd', operand: z.number(), evaluate: () => true };\n`);
    await writeFile(join(dir, 'one.test.mjs'), 'throw new Error("not a plugin")');
    await writeFile(join(dir, 'README.md'), '# docs');
    const registry = new OperatorRegistry(await loadPlugins(dir));
    expect(registry.names()).toEqual(['eq', 'min', 'max', 'in', 'not_in', 'one', 'two']);
    expect(evaluateInProcess(registry, 'one', 'x', 'x')).toBe(true);
    expect(evaluateInProcess(registry, 'one', 'x', 'y')).toBe(false);
  });

  it('names the file and every missing export of a broken plugin', async () => {
    await writeFile(join(dir, 'broken.mjs'), `export const name = 'Bad Name';\n`);
    await expect(loadPlugins(dir)).rejects.toThrow(/broken\.mjs: .*name.*description.*operand.*evaluate/);
  });

  it('names the file of a plugin that does not even import', async () => {
    await writeFile(join(dir, 'syntax.mjs'), 'export const = ;');
    await expect(loadPlugins(dir)).rejects.toThrow(/syntax\.mjs: cannot be loaded/);
  });

  it('refuses duplicates, naming both files', async () => {
    await writeFile(join(dir, 'a.mjs'), plugin('same'));
    await writeFile(join(dir, 'b.mjs'), plugin('same'));
    const loaded = await loadPlugins(dir);
    expect(() => new OperatorRegistry(loaded)).toThrow(/b\.mjs: operator "same" is also defined by .*a\.mjs/);
  });

  it('refuses a plugin that shadows a built-in operator', async () => {
    await writeFile(join(dir, 'c.mjs'), plugin('max'));
    const loaded = await loadPlugins(dir);
    expect(() => new OperatorRegistry(loaded)).toThrow(/c\.mjs: operator "max" shadows the built-in operator/);
  });

  it('a reload that fails leaves the previous plugin set in place', async () => {
    await writeFile(join(dir, 'a.mjs'), plugin('good'));
    const registry = new OperatorRegistry(await loadPlugins(dir));
    await writeFile(join(dir, 'b.mjs'), plugin('max'));
    await expect(loadPlugins(dir).then((p) => registry.replacePlugins(p))).rejects.toThrow(/shadows the built-in operator/);
    expect(registry.has('good')).toBe(true);
  });

  it('evaluation never throws: exceptions, operand drift and non-boolean answers read as false', async () => {
    await writeFile(join(dir, 'thrower.mjs'), plugin('thrower', 'throw new Error("boom");'));
    await writeFile(join(dir, 'truthy.mjs'), plugin('truthy', 'return "yes";'));
    const registry = new OperatorRegistry(await loadPlugins(dir));
    expect(evaluateInProcess(registry, 'thrower', 'x', 'x')).toBe(false);
    expect(evaluateInProcess(registry, 'truthy', 'x', 'x')).toBe(false);
    expect(evaluateInProcess(registry, 'truthy', 42, 'x')).toBe(false);
    expect(evaluateInProcess(registry, 'nobody', 'x', 'x')).toBe(false);
    expect(evaluateInProcess(registry, 'max', 5, 1)).toBe(false);
  });
});
