import { describe, expect, it } from 'vitest';
import { grantCovers, narrowConstraints, validateConstraints } from '../../src/domain/constraints.ts';
import { ApiError } from '../../src/errors.ts';
import { OperatorRegistry } from '../../src/operators/registry.ts';

const registry = new OperatorRegistry();
/** 'cap' declares every name these tests constrain; 'closed_cap' declares amount and currency only. */
const declared = (capability: string) => (capability === 'closed_cap' ? new Set(['amount', 'currency']) : capability === 'cap' ? undefined : new Set<string>());
const refusal = (all: unknown[], capability = 'cap') => {
  try {
    validateConstraints((all as Array<Record<string, unknown> | undefined>).map((constraints) => ({ capability, constraints })), registry, declared);
    return null;
  } catch (err) {
    return (err as ApiError).body();
  }
};

describe('constraint validation at grant time (DESIGN §6)', () => {
  it('look-alike names: a constraint on an argument the capability does not declare is refused, the name escaped', () => {
    const body = refusal([{ '\u0430mount': { max: 10 } }], 'closed_cap');
    expect(body?.error).toBe('invalid_request');
    expect(body?.message).toContain('"\\u0430mount" is not an argument of closed_cap; it declares amount, currency');
    expect(refusal([{ amount: { max: 10 }, currency: 'USD' }], 'closed_cap')).toBeNull();
  });

  it('a constraint value with characters a person cannot see (a bidi override, a zero-width space) is refused at request time', () => {
    expect(refusal([{ currency: { in: ['US\u202eD'] } }], 'closed_cap')?.message).toMatch(/characters a person cannot see \(U\+202E\)/);
    expect(refusal([{ currency: 'U\u200bSD' }], 'closed_cap')?.message).toMatch(/U\+200B/);
    expect(refusal([{ currency: { in: ['USD', 'EUR'] } }], 'closed_cap')).toBeNull();
  });

  it('a capability that declares no arguments takes no constraints', () => {
    expect(refusal([{ amount: { max: 10 } }], 'open_cap')?.message).toMatch(/open_cap declares no arguments, so it takes no constraints/);
  });

  it('unknown operators are reported before undeclared names (the client fixes its operators first)', () => {
    expect(refusal([{ nope: { between: [1, 2] } }], 'closed_cap')?.error).toBe('unknown_constraint_operator');
  });

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
