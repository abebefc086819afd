// Generic reading and writing of records described by a field table (../records.ts), as Redis holds
// them: a hash has one field per record field (strings as they are, numbers as decimal strings,
// lists and nested records as JSON), and a JSON value (a grant, or a nested record inside a hash
// field) has one member per field. Reading is defensive: a stored record that does not have the
// expected shape throws an error naming the record and the field, so corrupt state is never served
// as data. The record codecs built on this are in codec.ts.
import type { FieldSpec } from '../records.ts';

/** Flat `[field, value, field, value, ...]`, as HSET takes and HGETALL returns. */
export type FlatFields = string[];

/**
 * A field table prepared once, at module load, for the loops below: an array of fields of one shape
 * walked in order, instead of the table object's keys reflected on for every record. Decoding runs
 * on every execute.
 */
export interface Field {
  readonly name: string;
  readonly kind: FieldSpec['kind'];
  readonly optional: boolean;
  /** Whether a patch may set this field; `removable` when it may also remove it with `null`. */
  readonly patchable: boolean;
  readonly removable: boolean;
  /** `enum`: the allowed values. */
  readonly values: readonly string[];
  /** `record`: the nested record's fields. */
  readonly fields: readonly Field[];
}

export function compileTable(table: Readonly<Record<string, FieldSpec>>): Field[] {
  return Object.entries(table).map(([name, spec]) => ({
    name,
    kind: spec.kind,
    optional: spec.optional === true,
    patchable: spec.patch !== undefined,
    removable: spec.patch === 'remove',
    values: spec.kind === 'enum' ? spec.values : [],
    fields: spec.kind === 'record' ? compileTable(spec.fields) : [],
  }));
}

/** One field of a compiled table, by name (for encoders that write a few named fields). */
export function fieldNamed(fields: readonly Field[], name: string): Field {
  const field = fields.find((candidate) => candidate.name === name);
  if (!field) throw new Error(`no field ${name} in this record table`);
  return field;
}

// ---- writing -------------------------------------------------------------------------------------

function encodeNumber(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new Error(`cannot store ${field}: ${String(value)} is not a finite number`);
  return value;
}

function missing(field: Field): never {
  throw new Error(`cannot store ${field.name}: it is missing`);
}

/** A record as `[field, value, ...]` for HSET, in table order; absent optional fields are not stored. */
export function encodeHash(fields: readonly Field[], record: object): FlatFields {
  const values = record as Record<string, unknown>;
  const out: FlatFields = [];
  for (const field of fields) {
    const value = values[field.name];
    if (value === undefined) {
      if (field.optional) continue;
      missing(field);
    }
    out.push(field.name, encodeHashValue(field, value));
  }
  return out;
}

/** One field's value as a hash holds it. */
export function encodeHashValue(field: Field, value: unknown): string {
  switch (field.kind) {
    case 'number':
      return String(encodeNumber(value, field.name));
    case 'list':
    case 'object':
    case 'record':
      return JSON.stringify(encodeJsonValue(field, value));
    default:
      return value as string;
  }
}

/**
 * The patch's fields as HSET and HDEL arguments. Fields the table does not let a patch change are
 * ignored, undefined leaves a field alone, and `null` removes a removable field (it lands in `unset`).
 */
export function encodeHashPatch(fields: readonly Field[], patch: object): { set: FlatFields; unset: string[] } {
  const values = patch as Record<string, unknown>;
  const set: FlatFields = [];
  const unset: string[] = [];
  for (const field of fields) {
    if (!field.patchable) continue;
    const value = values[field.name];
    if (value === undefined) continue;
    if (value === null && field.removable) unset.push(field.name);
    else set.push(field.name, encodeHashValue(field, value));
  }
  return { set, unset };
}

/**
 * A record as a plain object ready for JSON.stringify: only the table's fields (so nothing else on
 * the object, a private JWK member say, is stored), absent optional ones left out, and numbers
 * checked, since JSON would silently turn NaN or Infinity into null.
 */
export function encodeJson(fields: readonly Field[], record: object): Record<string, unknown> {
  const values = record as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const value = values[field.name];
    if (value === undefined) {
      if (field.optional) continue;
      missing(field);
    }
    out[field.name] = encodeJsonValue(field, value);
  }
  return out;
}

function encodeJsonValue(field: Field, value: unknown): unknown {
  switch (field.kind) {
    case 'number':
      return encodeNumber(value, field.name);
    case 'list':
      return [...(value as string[])];
    case 'record':
      return encodeJson(field.fields, value as object);
    default:
      return value;
  }
}

// ---- reading -------------------------------------------------------------------------------------

class MalformedRecordError extends Error {
  override name = 'MalformedRecordError';
}

/** Throws the error every reader throws for a stored value of the wrong shape. */
export function malformed(what: string, problem: string): never {
  throw new MalformedRecordError(`stored ${what} is malformed: ${problem}`);
}

function fieldIsNot(what: string, field: string, expected: string): never {
  return malformed(what, `field "${field}" is ${expected}`);
}

/** Each compiled table's field positions by name, made on first use (see decodeFlatHash). */
const positionsByTable = new WeakMap<readonly Field[], ReadonlyMap<string, number>>();

function positionsOf(fields: readonly Field[]): ReadonlyMap<string, number> {
  let positions = positionsByTable.get(fields);
  if (positions === undefined) {
    positions = new Map(fields.map((field, i) => [field.name, i]));
    positionsByTable.set(fields, positions);
  }
  return positions;
}

/**
 * Reads a record out of an HGETALL reply (`[field, value, ...]`, all strings), parsing numbers and
 * JSON explicitly. Anything that is not a flat list of strings is refused first (errors name
 * `what`, "agent"); then the table's fields are read in table order (errors name the record, "agent
 * agt_1"). A field repeated in the reply counts with its last value; fields the table does not name
 * are ignored. The execute hot path decodes an agent on every call, so no map of the reply's
 * fields is built (a Map of some twenty entries was the largest allocation of that decode): a small
 * array holds where each table field's value sits in the reply instead.
 */
export function decodeFlatHash<R>(fields: readonly Field[], flat: unknown, what: string): R {
  if (!Array.isArray(flat) || flat.length % 2 !== 0) malformed(what, 'expected a flat list of hash fields');
  const positions = positionsOf(fields);
  // Where each table field's value is in `flat` (-1: absent), in table order.
  const valueAt = new Array<number>(fields.length).fill(-1);
  let idAt = -1;
  for (let i = 0; i < flat.length; i += 2) {
    const field: unknown = flat[i];
    const value: unknown = flat[i + 1];
    if (typeof field !== 'string' || typeof value !== 'string') malformed(what, 'non-string hash field');
    const position = positions.get(field);
    if (position !== undefined) valueAt[position] = i + 1;
    if (field === 'id') idAt = i + 1;
  }
  const named = `${what} ${idAt === -1 ? '(no id)' : (flat[idAt] as string)}`;
  const out: Record<string, unknown> = {};
  for (let f = 0; f < fields.length; f++) {
    const field = fields[f]!;
    const at = valueAt[f]!;
    if (at === -1) {
      if (field.optional) continue;
      fieldIsNot(named, field.name, 'missing');
    }
    const raw = flat[at] as string;
    out[field.name] = field.kind === 'string' ? raw : decodeHashValue(field, raw, named);
  }
  return out as R;
}

function decodeHashValue(field: Field, raw: string, what: string): unknown {
  switch (field.kind) {
    case 'number': {
      const value = raw.trim() === '' ? Number.NaN : Number(raw);
      return Number.isFinite(value) ? value : fieldIsNot(what, field.name, 'not a number');
    }
    case 'enum':
      return field.values.includes(raw) ? raw : fieldIsNot(what, field.name, `not one of ${field.values.join(', ')}`);
    case 'list': {
      const list = parseJson(field, raw, what);
      return isStringList(list) ? [...list] : fieldIsNot(what, field.name, 'not a list of strings');
    }
    case 'object': {
      const value = parseJson(field, raw, what);
      return isObject(value) ? value : fieldIsNot(what, field.name, 'not an object');
    }
    case 'record':
      return decodeJson(field.fields, parseJson(field, raw, what), `${what} ${field.name}`);
    default:
      return raw;
  }
}

function parseJson(field: Field, raw: string, what: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return fieldIsNot(what, field.name, 'not valid JSON');
  }
}

/** Reads a record out of a parsed JSON value, refusing members of the wrong type. */
export function decodeJson<R>(fields: readonly Field[], value: unknown, what: string): R {
  if (!isObject(value)) malformed(what, 'not an object');
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const member = value[field.name];
    if (member === undefined && field.optional) continue;
    out[field.name] = decodeJsonValue(field, member, what);
  }
  return out as R;
}

function decodeJsonValue(field: Field, value: unknown, what: string): unknown {
  switch (field.kind) {
    case 'string':
      return typeof value === 'string' ? value : fieldIsNot(what, field.name, 'not a string');
    case 'number':
      return typeof value === 'number' && Number.isFinite(value) ? value : fieldIsNot(what, field.name, 'not a number');
    case 'enum':
      return field.values.includes(value as string) ? value : fieldIsNot(what, field.name, `not one of ${field.values.join(', ')}`);
    case 'list':
      return isStringList(value) ? [...value] : fieldIsNot(what, field.name, 'not a list of strings');
    case 'object':
      return isObject(value) ? value : fieldIsNot(what, field.name, 'not an object');
    case 'record':
      return decodeJson(field.fields, value, `${what} ${field.name}`);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isStringList(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((item) => typeof item === 'string');
}

/** A number stored as a decimal string (a session deadline), or absent. */
export function decodeOptionalMs(raw: unknown, what: string): number | null {
  if (raw === null || raw === undefined) return null;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(value)) malformed(what, 'not a number');
  return value;
}
