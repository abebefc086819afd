// The pure helpers that replaced allocating code on the execute hot path: each answers exactly what
// the code it replaced answered.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ed25519SignatureVerifies, type DecodedJwt } from '../../src/auth/jwt.ts';
import type { Ed25519PublicKey } from '../../src/auth/ed25519-verify.ts';
import { IsoTimeFormatter } from '../../src/common/iso-time.ts';
import { unknownOperators, usesUnknownOperator } from '../../src/domain/constraints.ts';
import { uncarriedJsonValue } from '../../src/domain/json-values.ts';
import { bodyDepthLimit } from '../../src/http/body-depth.ts';
import type { OperatorRegistry } from '../../src/operators/registry.ts';
import { decodeAgent } from '../../src/store/redis/codec.ts';

describe('IsoTimeFormatter: exactly Date#toISOString', () => {
  it('agrees on whole milliseconds, in order, out of order and across seconds', () => {
    const formatter = new IsoTimeFormatter();
    const times = [0, 1, 9, 10, 99, 100, 999, 1000, 1_750_000_000_000, 1_750_000_000_007, 1_750_000_000_999, 1_750_000_001_000, 1_750_000_000_500, 253_402_300_799_999];
    for (let i = 0; i < 2000; i++) times.push(Math.floor(Math.random() * 253_402_300_800_000));
    for (const ms of times) expect(formatter.format(ms)).toBe(new Date(ms).toISOString());
  });

  it('leaves fractions, negative and five-digit-year times to Date, and throws as Date does for NaN', () => {
    const formatter = new IsoTimeFormatter();
    for (const ms of [1.5, 1_750_000_000_000.75, -1, -86_400_001, 253_402_300_800_000, 8.64e15]) {
      expect(formatter.format(ms)).toBe(new Date(ms).toISOString());
    }
    expect(() => formatter.format(Number.NaN)).toThrow(RangeError);
  });
});

describe('usesUnknownOperator: unknownOperators(...).length > 0', () => {
  const registry = { has: (name: string) => ['max', 'min', 'in', 'eq'].includes(name) } as unknown as OperatorRegistry;
  it('agrees on every shape a grant may hold', () => {
    const cases: Array<Record<string, unknown> | null | undefined> = [
      undefined, null, {}, { amount: { max: 5 } }, { amount: 5 }, { amount: [1, 2] }, { amount: null },
      { amount: { max: 5, frobnicate: 1 } }, { a: { max: 1 }, b: { nope: 2 } }, { a: { eq: { nested: 1 } } },
      Object.assign(Object.create({ inherited: { bogus: 1 } }) as Record<string, unknown>, { a: { max: 1 } }),
    ];
    for (const constraints of cases) {
      expect(usesUnknownOperator(constraints, registry)).toBe(unknownOperators(constraints, registry).length > 0);
    }
  });
});

describe('uncarriedJsonValue: primitives answered without the walk', () => {
  it('answers what the walk answers', () => {
    expect(uncarriedJsonValue('plain')).toBeNull();
    expect(uncarriedJsonValue('\ud800')).toMatch(/lone surrogate/);
    expect(uncarriedJsonValue(1e308)).toBeNull();
    expect(uncarriedJsonValue(Number.POSITIVE_INFINITY)).toMatch(/outside the range/);
    expect(uncarriedJsonValue(null)).toBeNull();
    expect(uncarriedJsonValue(true)).toBeNull();
    expect(uncarriedJsonValue([1, ['\udfff']])).toMatch(/lone surrogate/);
    expect(uncarriedJsonValue({ ['\ud800']: 1 })).toMatch(/key that is not Unicode/);
  });
});

describe('bodyDepthLimit', () => {
  const depthOf = (maxDepth: number, body: unknown): 'ok' | 'refused' => {
    let result: 'ok' | 'refused' = 'refused';
    try {
      bodyDepthLimit(maxDepth)({ body } as never, {} as never, () => {
        result = 'ok';
      });
    } catch {
      result = 'refused';
    }
    return result;
  };
  const nested = (levels: number): unknown => {
    let value: unknown = 1;
    for (let i = 0; i < levels; i++) value = i % 2 === 0 ? { v: value } : [value];
    return value;
  };

  it('counts objects and arrays as levels, `{}` as one, and refuses beyond the limit', () => {
    for (let levels = 0; levels <= 6; levels++) {
      for (let maxDepth = 0; maxDepth <= 6; maxDepth++) {
        expect(depthOf(maxDepth, nested(levels)), `levels ${levels}, max ${maxDepth}`).toBe(levels > maxDepth ? 'refused' : 'ok');
      }
    }
    expect(depthOf(1, { a: 1, b: 'x', c: null })).toBe('ok');
    expect(depthOf(1, { a: 1, b: {} })).toBe('refused');
    expect(depthOf(2, { a: [1, 2], b: { c: 3 } })).toBe('ok');
    expect(depthOf(2, { a: [1, [2]] })).toBe('refused');
    expect(depthOf(5, undefined)).toBe('ok');
    expect(depthOf(0, 'text')).toBe('ok');
  });
});

describe('ed25519SignatureVerifies: only the canonical spelling of a 64-byte signature reaches the key', () => {
  const accepting: Ed25519PublicKey = { verify: () => true };
  const key = { alg: 'EdDSA' as const, ed25519: accepting };
  const decoded = (signature: string, alg = 'EdDSA'): DecodedJwt => ({ token: `aGVhZA.cGF5bG9hZA.${signature}`, header: { alg }, claims: {} });
  const canonical = (text: string) => text.length === 86 && Buffer.from(text, 'base64url').toString('base64url') === text;

  it('agrees with decoding and re-encoding on random signatures and their other spellings', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    for (let i = 0; i < 500; i++) {
      const encoded = randomBytes(64).toString('base64url');
      for (const last of alphabet) {
        const spelling = encoded.slice(0, 85) + last;
        expect(ed25519SignatureVerifies(decoded(spelling), key)).toBe(canonical(spelling));
      }
    }
    for (const odd of ['', 'A'.repeat(85), 'A'.repeat(87), `${'A'.repeat(84)}+A`, `${'A'.repeat(84)}/A`, `${'A'.repeat(84)}=A`, `${'A'.repeat(85)}=`]) {
      expect(ed25519SignatureVerifies(decoded(odd), key)).toBe(false);
      expect(canonical(odd)).toBe(false);
    }
  });

  it('refuses a header that names another algorithm, and a key that refuses', () => {
    const signature = randomBytes(64).toString('base64url');
    expect(ed25519SignatureVerifies(decoded(signature, 'ES256'), key)).toBe(false);
    expect(ed25519SignatureVerifies(decoded(signature), { alg: 'EdDSA', ed25519: { verify: () => false } })).toBe(false);
  });
});

describe('decodeAgent straight from the HGETALL reply', () => {
  const flat = [
    'id', 'agt_1', 'hostId', 'hst_1', 'name', 'bot', 'mode', 'delegated', 'status', 'active', 'publicJwk', '{"kty":"OKP","crv":"Ed25519","x":"abc"}',
    'keyThumbprint', 'akt', 'keyVersion', '1', 'version', '3', 'hostStatus', 'active', 'hostThumbprint', 'hkt', 'createdAtMs', '1', 'updatedAtMs', '2',
    'absoluteExpiresAtMs', '10', 'maxLifetimeExpiresAtMs', '9',
  ];

  it('keeps a repeated field\'s last value, ignores fields outside the table, and keeps the table\'s order', () => {
    const agent = decodeAgent([...flat, 'name', 'renamed', 'somethingElse', 'x', 'lastUsedAtMs', '7']);
    expect(agent.name).toBe('renamed');
    // The table puts lastUsedAtMs after updatedAtMs (the 13th pair of `flat`): the record follows the table, not the reply.
    const inTableOrder = decodeAgent([...flat.slice(0, 26), 'lastUsedAtMs', '7', ...flat.slice(26)]);
    expect(Object.keys(agent)).toEqual(Object.keys(inTableOrder));
    expect(agent).not.toHaveProperty('somethingElse');
    expect(agent.lastUsedAtMs).toBe(7);
    const reordered: string[] = [];
    for (let i = flat.length - 2; i >= 0; i -= 2) reordered.push(flat[i]!, flat[i + 1]!);
    expect(Object.keys(decodeAgent(reordered))).toEqual(Object.keys(decodeAgent(flat)));
  });

  it('refuses what is not a flat list of strings before reading any field, then names the record', () => {
    expect(() => decodeAgent('nope')).toThrow('stored agent is malformed: expected a flat list of hash fields');
    expect(() => decodeAgent(['id'])).toThrow('stored agent is malformed: expected a flat list of hash fields');
    expect(() => decodeAgent(['id', 'agt_1', 'status', 5])).toThrow('stored agent is malformed: non-string hash field');
    const withoutName = flat.filter((_, i) => flat[i - (i % 2)] !== 'name');
    expect(() => decodeAgent(withoutName)).toThrow('stored agent agt_1 is malformed: field "name" is missing');
    const withoutId = flat.slice(2);
    expect(() => decodeAgent(withoutId)).toThrow('stored agent (no id) is malformed: field "id" is missing');
    expect(() => decodeAgent([...flat, 'keyVersion', 'x'])).toThrow('stored agent agt_1 is malformed: field "keyVersion" is not a number');
  });
});
