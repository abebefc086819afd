import { describe, expect, it } from 'vitest';
import { grantCovers, narrowConstraints, validateConstraints } from '../../src/domain/constraints.ts';
import { ApiError } from '../../src/errors.ts';
import { OperatorRegistry } from '../../src/operators/registry.ts';

const registry = new OperatorRegistry();
const refusal = (all: unknown[]) => {
  try {
    validateConstraints((all as Array<Record<string, unknown> | undefined>).map((constraints) => ({ capability: 'cap', constraints })), registry);
    return null;
  } catch (err) {
    return (err as ApiError).body();
  }
};

describe('constraint validation at grant time (DESIGN §6)', () => {
  it('accepts built-in operators and exact values', () => {
    expect(refusal([{ amount: { min: 1, max: 100 }, currency: 'USD', region: { in: ['eu'], not_in: [] }, x: { eq: { a: 1 } } }])).toBeNull();
  });

  it('lists every unknown operator once, across all requested capabilities', () => {
    expect(refusal([{ a: { max: 1, between: [1, 2] } }, { b: { pattern: '^x' }, c: { between: 1 } }])).toMatchObject({
      error: 'unknown_constraint_operator',
      unknown_operators: ['between', 'pattern'],
    });
  });

  it('refuses an operand that fails its schema, naming the field and operator', () => {
    const body = refusal([{ amount: { max: 'lots' } }]);
    expect(body?.error).toBe('invalid_request');
    expect(String(body?.message)).toMatch(/max.*amount/);
    expect(refusal([{ currency: { in: 'USD' } }])?.error).toBe('invalid_request');
    expect(refusal([{ amount: {} }])?.error).toBe('invalid_request');
  });
});

describe('narrowing by server-imposed constraints (protocol §8.4)', () => {
  it('never widens: max takes the smaller, min the larger, in intersects, not_in unites', () => {
    expect(narrowConstraints({ amount: { max: 100, min: 1 } }, { amount: { max: 50, min: 5 } })).toEqual({ amount: { max: 50, min: 5 } });
    expect(narrowConstraints({ amount: { max: 10 } }, { amount: { max: 50 } })).toEqual({ amount: { max: 10 } });
    expect(narrowConstraints({ c: { in: ['USD', 'EUR'] } }, { c: { in: ['EUR', 'GBP'] } })).toEqual({ c: { in: ['EUR'] } });
    expect(narrowConstraints({ r: { not_in: ['n'] } }, { r: { not_in: ['s'] } })).toEqual({ r: { not_in: ['n', 's'] } });
  });

  it('adds server-only fields and keeps agent-only fields', () => {
    expect(narrowConstraints({ a: 1 }, { b: { max: 2 } })).toEqual({ a: 1, b: { max: 2 } });
    expect(narrowConstraints(undefined, { b: 2 })).toEqual({ b: 2 });
    expect(narrowConstraints({ a: 1 }, undefined)).toEqual({ a: 1 });
  });
});

describe('already granted', () => {
  it('an unconstrained grant covers any request; a constrained one only the same constraints', () => {
    expect(grantCovers(undefined, { a: { max: 1 } })).toBe(true);
    expect(grantCovers({ a: { max: 1 } }, { a: { max: 1 } })).toBe(true);
    expect(grantCovers({ a: { max: 1 } }, undefined)).toBe(false);
    expect(grantCovers({ a: { max: 1 } }, { a: { max: 2 } })).toBe(false);
  });
});
