// Operator plugins for tests: temporary plugins folders, and plugin sandboxes started on them. A
// plugin imports zod as the shipped plugins do, and Node resolves that import from the plugin's own
// folder upwards, so every folder made here links the checkout's node_modules into itself.
import { copyFile, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { createLogger } from '../../src/logger.ts';
import { loadPlugins } from '../../src/operators/plugin-loader.ts';
import { OperatorRegistry } from '../../src/operators/registry.ts';
import { PluginSandbox, type SandboxOptions } from '../../src/operators/sandbox.ts';

/** What a plugins folder starts with: files written from text, by name, and copies of files of the checkout. */
export interface PluginsFolderContents {
  /** Plugin files to write, file name to source text. */
  files?: Record<string, string>;
  /** Paths in the checkout (e.g. plugins/regex.ts) copied into the folder under their own names. */
  copies?: string[];
}

/** A new temporary plugins folder, named `<folderPrefix><random>`, holding `contents`. */
export async function makePluginsFolder(folderPrefix: string, contents: PluginsFolderContents = {}): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), folderPrefix));
  await symlink(resolve('node_modules'), join(dir, 'node_modules'));
  for (const path of contents.copies ?? []) await copyFile(path, join(dir, basename(path)));
  for (const [file, text] of Object.entries(contents.files ?? {})) await writeFile(join(dir, file), text);
  return dir;
}

/**
 * A plugins folder for the tests of the enclosing describe block (or file): made in its beforeAll,
 * removed in its afterAll. Its path is known only once the block starts, so a test server that loads
 * it takes its options as a function (testServerForBlock(() => ({ pluginsDir: plugins.path }))),
 * declared after this so that it starts after the folder is made and stops before it is removed.
 */
export function pluginsFolderForBlock(folderPrefix: string, contents: PluginsFolderContents = {}): { readonly path: string } {
  let dir: string | undefined;
  beforeAll(async () => {
    dir = await makePluginsFolder(folderPrefix, contents);
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return {
    get path() {
      if (!dir) throw new Error('the plugins folder exists only between its beforeAll and afterAll');
      return dir;
    },
  };
}

/** Plugin sandboxes, one a test, each on a plugins folder of its own; what it reads is the running test's. */
export interface PluginSandboxes {
  /** This test's plugins folder. */
  readonly dir: string;
  /** Every line the sandbox logged in this test, parsed. */
  readonly logLines: Array<Record<string, unknown>>;
  /**
   * Writes `files` (name to source text) into the folder, loads the folder's plugins and starts a
   * sandbox on them with `options`, logging at debug into logLines. The sandbox is closed after the test.
   */
  start(files: Record<string, string>, options: Omit<SandboxOptions, 'logger'>): Promise<PluginSandbox>;
}

/**
 * A plugin sandbox for each test of the enclosing describe block (or file), with real worker
 * threads: before each test a fresh plugins folder and an empty log; after it, the sandbox the test
 * started is closed and the folder removed, so that no worker or plugin file outlives its test.
 */
export function pluginSandboxes(folderPrefix: string): PluginSandboxes {
  let dir: string | undefined;
  let sandbox: PluginSandbox | undefined;
  let logLines: Array<Record<string, unknown>> = [];
  beforeEach(async () => {
    dir = await makePluginsFolder(folderPrefix);
    logLines = [];
  });
  afterEach(async () => {
    await sandbox?.close();
    sandbox = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  const currentDir = (): string => {
    if (!dir) throw new Error("the test's plugins folder exists only while the test runs");
    return dir;
  };
  return {
    get dir() {
      return currentDir();
    },
    get logLines() {
      return logLines;
    },
    async start(files, options) {
      for (const [file, text] of Object.entries(files)) await writeFile(join(currentDir(), file), text);
      const registry = new OperatorRegistry(await loadPlugins(currentDir()));
      const logger = createLogger('debug', (line) => logLines.push(JSON.parse(line) as Record<string, unknown>));
      sandbox = new PluginSandbox({ ...options, logger });
      await sandbox.setModules(registry.pluginModules());
      return sandbox;
    },
  };
}
