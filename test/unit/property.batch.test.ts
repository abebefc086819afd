// Generated batches for POST /capability/batch-execute (protocol §3.2; docs/stances.md): the body
// goes through the parser the route uses (parseWith with batchExecuteBodySchema), and a plain model
// of the documented shape says whether it is well formed. A malformed batch must be refused whole
// with 400 invalid_request whose message starts with where the problem is (requests.3.id: ...), a
// well-formed one accepted as sent. Batches are well formed, broken in one place, or junk throughout.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_BATCH_CALLS, MAX_BATCH_ID_LENGTH } from '../../src/domain/batch.ts';
import { ApiError } from '../../src/errors.ts';
import { parseWith } from '../../src/http/parse.ts';
import { batchExecuteBodySchema, MAX_ARGUMENTS } from '../../src/http/schemas.ts';

const SEED = 7_351_002;
const RUNS = 600;

const MAX_CAPABILITY_CHARS = 128;
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

// ---- the model ----------------------------------------------------------------------------------

/** True when every number is finite and every string and key well formed (what JSON carries as sent). */
function carried(value: unknown): boolean {
  if (typeof value === 'number') return Number.isFinite(value);
  if (typeof value === 'string') return !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(value);
  if (Array.isArray(value)) return value.every(carried);
  if (isObject(value)) return Object.entries(value).every(([k, v]) => carried(k) && carried(v));
  return true;
}

const boundedString = (v: unknown, max: number) => typeof v === 'string' && v.length >= 1 && v.length <= max;

/**
 * Every place a batch breaks the documented shape, as the path a refusal names ('' for a body that
 * is not an object at all). A batch with none is well formed.
 */
function problems(body: unknown): string[] {
  if (!isObject(body)) return [''];
  const out: string[] = [];
  if (Object.keys(body).some((k) => k !== 'requests')) out.push('body');
  const requests = body.requests;
  if (!Array.isArray(requests) || requests.length < 1 || requests.length > MAX_BATCH_CALLS) {
    out.push('requests');
    if (!Array.isArray(requests)) return out;
  }
  requests.forEach((item, i) => {
    if (!isObject(item)) return void out.push(`requests.${i}`);
    if (Object.keys(item).some((k) => !['id', 'capability', 'arguments'].includes(k))) out.push(`requests.${i}`);
    if ('id' in item && item.id !== undefined && !boundedString(item.id, MAX_BATCH_ID_LENGTH)) out.push(`requests.${i}.id`);
    if (!boundedString(item.capability, MAX_CAPABILITY_CHARS)) out.push(`requests.${i}.capability`);
    const args = item.arguments;
    if (args !== undefined && (!isObject(args) || Object.keys(args).length > MAX_ARGUMENTS || !carried(args))) out.push(`requests.${i}.arguments`);
  });
  // Ids after defaulting (an item without one is its index) must be distinct; the later one is named.
  if (out.length === 0) {
    const seen = new Set<string>();
    requests.forEach((item, i) => {
      const id = isObject(item) && typeof item.id === 'string' ? item.id : String(i);
      if (seen.has(id)) out.push(`requests.${i}.id`);
      seen.add(id);
    });
  }
  return out;
}

// ---- generators ---------------------------------------------------------------------------------

const argumentValue = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { maxDepth: 2 },
    { weight: 5, arbitrary: fc.oneof(fc.constant(null), fc.boolean(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.string({ maxLength: 10 })) },
    { weight: 1, arbitrary: fc.array(tie('value'), { maxLength: 3 }) },
    { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 5 }), tie('value'), { maxKeys: 3, noNullPrototype: true }) },
  ),
})).value;
const wellFormedArguments = fc.dictionary(fc.string({ minLength: 1, maxLength: 12 }), argumentValue, { maxKeys: 4, noNullPrototype: true });
const capabilityName = fc.oneof(fc.constantFrom('echo', 'transfer_money', 'read_file'), fc.string({ minLength: 1, maxLength: MAX_CAPABILITY_CHARS }));
const itemId = fc.oneof(fc.constantFrom('a', 'b', 'first'), fc.string({ minLength: 1, maxLength: MAX_BATCH_ID_LENGTH }).map((s) => `id:${s}`.slice(0, MAX_BATCH_ID_LENGTH)));

const wellFormedItem = fc.record(
  { id: itemId, capability: capabilityName, arguments: wellFormedArguments },
  { requiredKeys: ['capability'], noNullPrototype: true },
);

/**
 * 1 to 50 items whose ids are distinct after defaulting: an explicit id ends in "#<index>", so it
 * never repeats another and never looks like an index. Mostly short batches, sometimes full ones.
 */
const wellFormedBatch = fc.oneof(
  { weight: 4, arbitrary: fc.array(wellFormedItem, { minLength: 1, maxLength: 8 }) },
  { weight: 1, arbitrary: fc.array(wellFormedItem, { minLength: MAX_BATCH_CALLS - 2, maxLength: MAX_BATCH_CALLS }) },
).map((items) => ({ requests: items.map((item, i) => (item.id === undefined ? item : { ...item, id: `${item.id}#${i}`.slice(-MAX_BATCH_ID_LENGTH) })) }));

/** Values that are none of the right type for any member. */
const junk = fc.oneof(
  fc.constant(null), fc.boolean(), fc.integer(), fc.constantFrom(1.5, -0, '', [], {}, [[]], { a: { b: [1, { c: null }] } }),
  fc.string({ maxLength: 4 }), fc.array(fc.integer(), { maxLength: 3 }),
);
const hugeString = fc.integer({ min: 129, max: 5000 }).map((n) => 'x'.repeat(n));
const tooManyKeys = fc.integer({ min: MAX_ARGUMENTS + 1, max: MAX_ARGUMENTS + 40 }).map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i])));
const uncarried = fc.constantFrom<unknown>(JSON.parse('{"n": 1e400}'), JSON.parse('{"n": [-1e400]}'), JSON.parse('{"s": "\\ud800"}'), JSON.parse('{"\\udc00": 1}'), JSON.parse('{"o": {"deep": ["ok", "\\udbff"]}}'));

type Batch = { requests: Array<Record<string, unknown>> };

/** One defect, put into a well-formed batch at a random item. */
const DEFECTS: Record<string, (b: Batch, i: number) => fc.Arbitrary<unknown>> = {
  'body not an object': () => fc.oneof(junk.filter((v) => !isObject(v)), fc.constant('{"requests": []}')),
  'unknown member beside requests': (b) => fc.constantFrom('request', 'args', 'calls', '\u0430requests').map((k) => ({ ...b, [k]: [] })),
  'requests missing': () => fc.constant({}),
  'requests not a list': () => junk.filter((v) => !Array.isArray(v)).map((requests) => ({ requests })),
  'requests empty': () => fc.constant({ requests: [] }),
  'too many requests': (b) => fc.integer({ min: MAX_BATCH_CALLS + 1, max: MAX_BATCH_CALLS + 30 }).map((n) => ({ requests: Array.from({ length: n }, (_, i) => ({ ...b.requests[i % b.requests.length], id: `n${i}` })) })),
  'item not an object': (b, i) => junk.filter((v) => !isObject(v)).map((v) => withItem(b, i, v)),
  'item with an unknown member': (b, i) => fc.constantFrom('args', 'name', 'constraints', 'Arguments').map((k) => withItem(b, i, { ...b.requests[i], [k]: {} })),
  'capability missing': (b, i) => fc.constant(withItem(b, i, withoutKey(b.requests[i]!, 'capability'))),
  'capability of another type': (b, i) => junk.filter((v) => typeof v !== 'string' || v === '').map((v) => withItem(b, i, { ...b.requests[i], capability: v })),
  'capability huge': (b, i) => hugeString.map((v) => withItem(b, i, { ...b.requests[i], capability: v })),
  'id of another type': (b, i) => junk.filter((v) => typeof v !== 'string' || v === '').map((v) => withItem(b, i, { ...b.requests[i], id: v })),
  'id huge': (b, i) => hugeString.map((v) => withItem(b, i, { ...b.requests[i], id: v })),
  'id repeated': (b, i) => fc.constant(b.requests.length < 2 ? { requests: [{ ...b.requests[0], id: 'same' }, { ...b.requests[0], id: 'same' }] } : withItem(b, i === 0 ? 1 : i, { ...b.requests[i === 0 ? 1 : i], id: b.requests[0]!.id ?? '0' })),
  'id equal to another item\'s index': (b) => fc.constant({ requests: [withoutKey(b.requests[0]!, 'id'), { ...b.requests[0], id: '0' }] }),
  'arguments not an object': (b, i) => junk.filter((v) => !isObject(v)).map((v) => withItem(b, i, { ...b.requests[i], arguments: v })),
  'arguments over the count': (b, i) => tooManyKeys.map((v) => withItem(b, i, { ...b.requests[i], arguments: v })),
  'arguments JSON cannot carry (1e400, lone surrogate)': (b, i) => uncarried.map((v) => withItem(b, i, { ...b.requests[i], arguments: v })),
};

function withItem(b: Batch, i: number, item: unknown): unknown {
  return { requests: b.requests.map((existing, j) => (j === i ? item : existing)) };
}

function withoutKey(item: Record<string, unknown>, key: string): Record<string, unknown> {
  return Object.fromEntries(Object.entries(item).filter(([k]) => k !== key));
}

const brokenBatch = fc.tuple(wellFormedBatch, fc.constantFrom(...Object.keys(DEFECTS)), fc.nat())
  .chain(([b, defect, n]) => fc.tuple(fc.constant(defect), DEFECTS[defect]!(b, n % b.requests.length)));

/** Junk throughout: any JSON at every level, so several defects can meet. */
const junkBatch = fc.oneof(
  junk,
  fc.record({ requests: fc.array(fc.oneof(junk, fc.dictionary(fc.constantFrom('id', 'capability', 'arguments', 'args'), fc.oneof(junk, hugeString, fc.string()), { maxKeys: 4, noNullPrototype: true })), { maxLength: 60 }) }),
);

// ---- the properties -----------------------------------------------------------------------------

type Parsed = { ok: true; value: unknown } | { ok: false; status: number; code: string; message: string };

function parse(body: unknown): Parsed {
  try {
    return { ok: true, value: parseWith(batchExecuteBodySchema, body, 'body') };
  } catch (err) {
    expect(err, 'the parser threw something other than an ApiError').toBeInstanceOf(ApiError);
    const e = err as ApiError;
    return { ok: false, status: e.status, code: e.code, message: e.message };
  }
}

/** The refusal names one of the model's problem places first (a body that is no object: in words). */
function expectRefusedAt(parsed: Parsed, places: string[], label: string): void {
  expect(parsed, label).toMatchObject({ ok: false, status: 400, code: 'invalid_request' });
  if (parsed.ok) return;
  const named = places.some((p) => (p === '' ? parsed.message.startsWith('the request body must be a JSON object') : parsed.message.startsWith(`${p}: `)));
  expect(named, `${label}: "${parsed.message}" should start with one of ${JSON.stringify(places)}`).toBe(true);
}

describe('the batch-execute parser on generated batches', () => {
  it('a well-formed batch of 1 to 50 calls is accepted as sent', () => {
    fc.assert(fc.property(wellFormedBatch, (batch) => {
      expect(problems(batch)).toStrictEqual([]);
      const parsed = parse(batch);
      expect(parsed).toStrictEqual({ ok: true, value: batch });
    }), { seed: SEED, numRuns: RUNS / 4 });
  });

  it('a batch broken in one place is refused whole with 400 naming that place', () => {
    fc.assert(fc.property(brokenBatch, ([defect, body]) => {
      const places = problems(body);
      expect(places.length, `the model sees the defect "${defect}"`).toBeGreaterThan(0);
      expectRefusedAt(parse(body), places, defect);
    }), { seed: SEED + 1, numRuns: RUNS });
  });

  it('junk at every level is refused with 400 naming a place the model also finds, never a crash', () => {
    fc.assert(fc.property(junkBatch, (body) => {
      const places = problems(body);
      const parsed = parse(body);
      if (places.length === 0) expect(parsed.ok, JSON.stringify(body).slice(0, 300)).toBe(true);
      else expectRefusedAt(parsed, places, JSON.stringify(body).slice(0, 300));
    }), { seed: SEED + 2, numRuns: RUNS / 2 });
  });
});
