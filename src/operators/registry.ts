// The constraint operator registry (DESIGN §6). Built-in operators are evaluated inside the Rego
// policy; the registry knows their names and operand shapes so grants are validated when they are
// requested, not when they are used.
import { z } from 'zod';

export interface OperatorDefinition {
  name: string;
  description: string;
  /** Schema of the operand; checked when a grant is requested or approved. */
  operand: z.ZodType;
  builtin: boolean;
}

/** Bounds that keep one constraint cheap to store and evaluate. */
export const MAX_LIST_OPERAND_ITEMS = 1000;

const finiteNumber = z.number().refine(Number.isFinite, 'must be a finite number');
const jsonList = z.array(z.unknown()).max(MAX_LIST_OPERAND_ITEMS);

export const BUILTIN_OPERATORS: readonly OperatorDefinition[] = [
  { name: 'eq', description: 'the argument equals the operand (JSON structural equality)', operand: z.unknown(), builtin: true },
  { name: 'min', description: 'the argument is a number >= the operand', operand: finiteNumber, builtin: true },
  { name: 'max', description: 'the argument is a number <= the operand', operand: finiteNumber, builtin: true },
  { name: 'in', description: 'the argument equals one of the listed values', operand: jsonList, builtin: true },
  { name: 'not_in', description: 'the argument equals none of the listed values (a missing argument passes)', operand: jsonList, builtin: true },
];

export class OperatorRegistry {
  private readonly byName = new Map<string, OperatorDefinition>();

  constructor(definitions: readonly OperatorDefinition[] = BUILTIN_OPERATORS) {
    for (const definition of definitions) {
      if (this.byName.has(definition.name)) throw new Error(`operator ${definition.name} is defined twice`);
      this.byName.set(definition.name, definition);
    }
  }

  get(name: string): OperatorDefinition | undefined {
    return this.byName.get(name);
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }
}
