// Loads operator plugins from a directory at start-up (and on reload). Each module is checked
// when it is loaded, not per request: a broken plugin stops start-up with a message naming the
// file and the problem (STYLE: extensions declare a schema and are validated at load).
import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import type { OperatorDefinition } from './registry.ts';
import { NamedError } from '../common/thrown.ts';

const PLUGIN_FILE = /^(?!.*\.(test|spec|d)\.[cm]?[jt]s$)[^.].*\.(ts|mts|js|mjs)$/;
const OPERATOR_NAME = /^[a-z][a-z0-9_]{0,63}$/;
const MAX_PLUGINS = 256;

class PluginLoadError extends NamedError {}

/** The plugin files of `directory`, sorted; a missing directory has none. */
async function pluginFiles(directory: string): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(directory);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new PluginLoadError(`plugin directory ${directory}: ${(err as Error).message}`);
  }
  const files = entries.filter((e) => PLUGIN_FILE.test(e)).sort();
  if (files.length > MAX_PLUGINS) throw new PluginLoadError(`plugin directory ${directory}: more than ${MAX_PLUGINS} plugins`);
  return files;
}

/** Async and generator functions answer a promise or an iterator, never `true`: refused at load. */
const isPlainFunction = (fn: unknown): boolean => Object.prototype.toString.call(fn) === '[object Function]';

/** What a plugin module must export (plugins/README.md), checked once when it is loaded. */
const pluginExportsSchema = z.object({
  name: z.string().regex(OPERATOR_NAME, '`name` must be a lower-case identifier (a-z, 0-9, _; at most 64)'),
  description: z.string().trim().min(1, '`description` must be a non-empty string'),
  operand: z.custom<z.ZodType>(
    (value) => typeof (value as { safeParse?: unknown } | null)?.safeParse === 'function',
    '`operand` must be a zod schema',
  ),
  evaluate: z
    .custom<NonNullable<OperatorDefinition['evaluate']>>((value) => typeof value === 'function', '`evaluate(operand, actual)` must be a function')
    .refine(isPlainFunction, '`evaluate` must be a plain synchronous function (an async or generator function never answers `true`)'),
});

/** Checks one module's exports: a default export object, or named exports. */
function definitionFrom(module: Record<string, unknown>, source: string, moduleUrl?: string): OperatorDefinition {
  const exported = module.default && typeof module.default === 'object' ? module.default : module;
  const parsed = pluginExportsSchema.safeParse(exported);
  if (!parsed.success) {
    // Every problem at once, each in words, so the author fixes the file in one pass.
    const problems = parsed.error.issues.map((issue) => (issue.code === 'invalid_type' ? messageFor(issue.path[0]) : issue.message));
    throw new PluginLoadError(`${source}: ${[...new Set(problems)].join('; ')}`);
  }
  const { name, description, operand, evaluate } = parsed.data;
  return { name, description, operand, evaluate, source, ...(moduleUrl ? { moduleUrl } : {}) };
}

/** The sentence for a missing or mistyped export (zod's own says only "expected string"). */
function messageFor(key: PropertyKey | undefined): string {
  switch (key) {
    case 'name':
      return '`name` must be a lower-case identifier (a-z, 0-9, _; at most 64)';
    case 'description':
      return '`description` must be a non-empty string';
    case 'operand':
      return '`operand` must be a zod schema';
    default:
      return '`evaluate(operand, actual)` must be a function';
  }
}


/**
 * Why a plugin file could not be imported. A Node without type stripping (Node 20, which runs the
 * built server: README, "Runtime") refuses a `.ts` file with ERR_UNKNOWN_FILE_EXTENSION, and the
 * default PLUGINS_DIR holds the TypeScript sources; `npm run build` compiles them to dist/plugins.
 */
export function loadFailureText(path: string, err: unknown, nodeVersion: string = process.version): string {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.m?ts$/.test(path)) {
    return `Node ${nodeVersion} cannot load TypeScript files (ERR_UNKNOWN_FILE_EXTENSION). `
      + 'Run agentgate on Node 24 (npm start), or run the built server with PLUGINS_DIR=dist/plugins, '
      + 'where npm run build puts the compiled plugins (PLUGINS_DIR=dist/plugins node dist/src/main.js)';
  }
  return err instanceof Error ? err.message : String(err);
}

/**
 * Imports every plugin of `directory`. A file's modification time is part of its import URL, so a
 * reload after an edit loads the new code instead of Node's cached module.
 */
export async function loadPlugins(directory: string): Promise<OperatorDefinition[]> {
  const definitions: OperatorDefinition[] = [];
  for (const file of await pluginFiles(directory)) {
    const path = resolve(join(directory, file));
    let module: Record<string, unknown>;
    let url: string;
    try {
      const { mtimeMs, size } = await stat(path);
      // Integers only: a dot in the query would read as a file extension to some loaders.
      url = `${pathToFileURL(path).href}?version=${Math.trunc(mtimeMs * 1000)}-${size}`;
      module = (await import(url)) as Record<string, unknown>;
    } catch (err) {
      throw new PluginLoadError(`${path}: cannot be loaded: ${loadFailureText(path, err)}`);
    }
    definitions.push(definitionFrom(module, path, url));
  }
  return definitions;
}
