// The constraint operator registry (DESIGN §6): built-in operators, evaluated inside the Rego
// policy, plus plugin operators loaded from plugins/, which the policy reaches through the custom
// builtin `agentgate.operator(name, operand, actual)`. The registry knows every operator's operand
// schema, so grants are validated when they are requested, not when they are used. The server
// evaluates plugins in worker threads (sandbox.ts), with the reading of an answer in outcome.ts.
import { z } from 'zod';
import { GRANT_LIMITS } from '../domain/limits.ts';
import type { WorkerModule } from './sandbox-worker.ts';

/** What a plugin module provides (see plugins/README.md). */
interface OperatorPlugin {
  name: string;
  description: string;
  /** Schema of the operand; checked when a grant is requested or approved. */
  operand: z.ZodType;
  /** True when `actual` (null for a missing argument) satisfies the operand. */
  evaluate(operand: unknown, actual: unknown): boolean;
}

export interface OperatorDefinition {
  name: string;
  description: string;
  operand: z.ZodType;
  /** Absent for built-ins, which the policy evaluates itself. */
  evaluate?: OperatorPlugin['evaluate'];
  /** The file a plugin came from (for messages). */
  source: string;
  /** The URL the plugin was imported from; the plugin worker imports the same one. */
  moduleUrl?: string;
}

const finiteNumber = z.number().refine(Number.isFinite, 'must be a finite number');
const jsonList = z.array(z.unknown()).max(GRANT_LIMITS.listOperandItems);

export const BUILTIN_OPERATORS: readonly OperatorDefinition[] = [
  { name: 'eq', description: 'the argument equals the operand (JSON structural equality)', operand: z.unknown(), source: 'built-in' },
  { name: 'min', description: 'the argument is a number >= the operand', operand: finiteNumber, source: 'built-in' },
  { name: 'max', description: 'the argument is a number <= the operand', operand: finiteNumber, source: 'built-in' },
  { name: 'in', description: 'the argument equals one of the listed values', operand: jsonList, source: 'built-in' },
  { name: 'not_in', description: 'the argument equals none of the listed values (a missing argument passes)', operand: jsonList, source: 'built-in' },
];

export class OperatorRegistry {
  #byName = new Map<string, OperatorDefinition>();

  constructor(plugins: readonly OperatorDefinition[] = []) {
    this.replacePlugins(plugins);
  }

  /**
   * Swaps the plugin set in one assignment (a reload); throws, changing nothing, on a duplicate
   * name or a plugin that shadows a built-in.
   */
  replacePlugins(plugins: readonly OperatorDefinition[]): void {
    const next = new Map(BUILTIN_OPERATORS.map((d) => [d.name, d]));
    for (const plugin of plugins) {
      const existing = next.get(plugin.name);
      if (existing) {
        const why = existing.source === 'built-in' ? 'shadows the built-in operator' : `is also defined by ${existing.source}`;
        throw new Error(`${plugin.source}: operator "${plugin.name}" ${why}`);
      }
      next.set(plugin.name, plugin);
    }
    this.#byName = next;
  }

  get(name: string): OperatorDefinition | undefined {
    return this.#byName.get(name);
  }

  has(name: string): boolean {
    return this.#byName.has(name);
  }

  names(): string[] {
    return [...this.#byName.keys()];
  }

  /** True for an operator a plugin provides (the policy asks agentgate.operator about these). */
  isPlugin(name: string): boolean {
    return this.#byName.get(name)?.evaluate !== undefined;
  }

  /** The plugin definitions (built-ins excluded). */
  plugins(): OperatorDefinition[] {
    return [...this.#byName.values()].filter((d) => d.evaluate !== undefined);
  }

  /** What the plugin workers import: every plugin that came from a file. */
  pluginModules(): WorkerModule[] {
    return [...this.#byName.values()].flatMap((d) => (d.evaluate && d.moduleUrl ? [{ name: d.name, url: d.moduleUrl }] : []));
  }
}
