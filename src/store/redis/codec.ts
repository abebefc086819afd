// (De)serialisation of stored records, one explicit line per field. Hashes hold one field per record
// field (numbers as decimal strings, nested values as JSON) so the Lua scripts can read the fields
// they need without decoding anything; grants are JSON strings. Decoding is defensive: a stored
// record that does not have the expected shape throws, so corrupt state is never served as data.
import {
  AGENT_STATUSES,
  GRANT_STATUSES,
  HOST_STATUSES,
  MODES,
  type AgentRecord,
  type ApprovalRecord,
  type GrantRecord,
  type HostRecord,
  type PublicJwk,
} from '../../domain/types.ts';
import type { AgentPatch } from '../store.ts';

/** Flat `[field, value, field, value, ...]`, as HSET takes and HGETALL returns. */
export type FlatFields = string[];

// ---- encoding helpers ----------------------------------------------------------------------------

function encodeNumber(value: number, field: string): string {
  if (!Number.isFinite(value)) throw new Error(`cannot store ${field}: ${value} is not a finite number`);
  return String(value);
}

/** Keeps only the public members a JWK may carry, so a private `d` can never reach storage. */
function pickJwk(jwk: PublicJwk): PublicJwk {
  const out: PublicJwk = { kty: jwk.kty };
  for (const member of ['crv', 'x', 'y', 'n', 'e'] as const) {
    const value = jwk[member];
    if (value !== undefined) out[member] = value;
  }
  return out;
}

function encodeApproval(approval: ApprovalRecord): string {
  return JSON.stringify({
    id: approval.id,
    userCode: approval.userCode,
    grantIds: [...approval.grantIds],
    createdAtMs: approval.createdAtMs,
    expiresAtMs: approval.expiresAtMs,
    intervalSeconds: approval.intervalSeconds,
  });
}

/** Appends `field value` when the value is present; absent optional fields are simply not stored. */
function push(out: FlatFields, field: string, value: string | undefined): void {
  if (value !== undefined) out.push(field, value);
}

// ---- decoding helpers ----------------------------------------------------------------------------

class MalformedRecordError extends Error {
  override name = 'MalformedRecordError';
}

/** Turns an HGETALL reply into a field map, refusing anything that is not a flat list of strings. */
export function fieldsFromFlat(flat: unknown, what: string): Map<string, string> {
  if (!Array.isArray(flat) || flat.length % 2 !== 0) {
    throw new MalformedRecordError(`stored ${what} is malformed: expected a flat list of hash fields`);
  }
  const fields = new Map<string, string>();
  for (let i = 0; i < flat.length; i += 2) {
    const [field, value] = [flat[i], flat[i + 1]];
    if (typeof field !== 'string' || typeof value !== 'string') {
      throw new MalformedRecordError(`stored ${what} is malformed: non-string hash field`);
    }
    fields.set(field, value);
  }
  return fields;
}

/**
 * Reads typed values out of a plain object (a parsed JSON value), naming the record on failure.
 * A class rather than a bag of closures: grants and agents are decoded on every execute, and
 * methods on a prototype cost no allocation per record.
 */
class ObjectReader {
  readonly #obj: Record<string, unknown>;
  readonly #what: string;

  constructor(value: unknown, what: string) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new MalformedRecordError(`stored ${what} is malformed: not an object`);
    }
    this.#obj = value as Record<string, unknown>;
    this.#what = what;
  }

  #fail(field: string, expected: string): never {
    throw new MalformedRecordError(`stored ${this.#what} is malformed: field "${field}" is not ${expected}`);
  }

  string(field: string): string {
    const value = this.#obj[field];
    return typeof value === 'string' ? value : this.#fail(field, 'a string');
  }

  optionalString(field: string): string | undefined {
    const value = this.#obj[field];
    return value === undefined || typeof value === 'string' ? value : this.#fail(field, 'a string');
  }

  number(field: string): number {
    const value = this.#obj[field];
    return typeof value === 'number' && Number.isFinite(value) ? value : this.#fail(field, 'a number');
  }

  optionalNumber(field: string): number | undefined {
    const value = this.#obj[field];
    if (value === undefined) return undefined;
    return typeof value === 'number' && Number.isFinite(value) ? value : this.#fail(field, 'a number');
  }

  stringArray(field: string): string[] {
    const list = this.#obj[field];
    if (!Array.isArray(list) || !list.every((item) => typeof item === 'string')) return this.#fail(field, 'a list of strings');
    return [...(list as string[])];
  }

  oneOf<T extends string>(field: string, allowed: readonly T[]): T {
    const value = this.#obj[field];
    return allowed.includes(value as T) ? (value as T) : this.#fail(field, `one of ${allowed.join(', ')}`);
  }

  optionalObject(field: string): Record<string, unknown> | undefined {
    const inner = this.#obj[field];
    if (inner === undefined) return undefined;
    if (typeof inner !== 'object' || inner === null || Array.isArray(inner)) return this.#fail(field, 'an object');
    return inner as Record<string, unknown>;
  }
}

/** Reads typed values out of hash fields (all strings), parsing numbers and JSON explicitly. */
class HashReader {
  readonly #fields: Map<string, string>;
  readonly #what: string;

  constructor(fields: Map<string, string>, what: string) {
    this.#fields = fields;
    this.#what = what;
  }

  #fail(field: string, expected: string): never {
    throw new MalformedRecordError(`stored ${this.#what} is malformed: field "${field}" ${expected}`);
  }

  #parseNumber(field: string, raw: string): number {
    const value = raw.trim() === '' ? Number.NaN : Number(raw);
    return Number.isFinite(value) ? value : this.#fail(field, 'is not a number');
  }

  #parseJson(field: string, raw: string): unknown {
    try {
      return JSON.parse(raw);
    } catch {
      return this.#fail(field, 'is not valid JSON');
    }
  }

  string(field: string): string {
    return this.#fields.get(field) ?? this.#fail(field, 'is missing');
  }

  optionalString(field: string): string | undefined {
    return this.#fields.get(field);
  }

  number(field: string): number {
    return this.#parseNumber(field, this.string(field));
  }

  optionalNumber(field: string): number | undefined {
    const raw = this.#fields.get(field);
    return raw === undefined ? undefined : this.#parseNumber(field, raw);
  }

  oneOf<T extends string>(field: string, allowed: readonly T[]): T {
    const raw = this.string(field);
    return allowed.includes(raw as T) ? (raw as T) : this.#fail(field, `is not one of ${allowed.join(', ')}`);
  }

  json(field: string): unknown {
    return this.#parseJson(field, this.string(field));
  }

  optionalJson(field: string): unknown {
    const raw = this.#fields.get(field);
    return raw === undefined ? undefined : this.#parseJson(field, raw);
  }
}

function decodeJwk(value: unknown, what: string): PublicJwk {
  const read = new ObjectReader(value, what);
  const jwk: PublicJwk = { kty: read.string('kty') };
  for (const member of ['crv', 'x', 'y', 'n', 'e'] as const) {
    const memberValue = read.optionalString(member);
    if (memberValue !== undefined) jwk[member] = memberValue;
  }
  return jwk;
}

function decodeApproval(value: unknown, what: string): ApprovalRecord {
  const read = new ObjectReader(value, what);
  return {
    id: read.string('id'),
    userCode: read.string('userCode'),
    grantIds: read.stringArray('grantIds'),
    createdAtMs: read.number('createdAtMs'),
    expiresAtMs: read.number('expiresAtMs'),
    intervalSeconds: read.number('intervalSeconds'),
  };
}

/**
 * The record without its undefined members, so decoded records omit absent optional fields. Copies
 * instead of deleting: `delete` turns an object into a slow dictionary, and decoded agents and
 * grants are read on every execute.
 */
function definedOnly<T extends object>(record: T): T {
  const out: Partial<T> = {};
  // Own keys only: for...in would also copy anything enumerable on a (polluted) prototype.
  for (const key of Object.keys(record) as (keyof T)[]) {
    if (record[key] !== undefined) out[key] = record[key];
  }
  return out as T;
}

// ---- agents --------------------------------------------------------------------------------------

export function encodeAgent(agent: AgentRecord): FlatFields {
  const out: FlatFields = [];
  push(out, 'id', agent.id);
  push(out, 'hostId', agent.hostId);
  push(out, 'name', agent.name);
  push(out, 'mode', agent.mode);
  push(out, 'status', agent.status);
  push(out, 'publicJwk', JSON.stringify(pickJwk(agent.publicJwk)));
  push(out, 'keyThumbprint', agent.keyThumbprint);
  push(out, 'keyVersion', encodeNumber(agent.keyVersion, 'keyVersion'));
  push(out, 'version', encodeNumber(agent.version, 'version'));
  push(out, 'hostStatus', agent.hostStatus);
  push(out, 'hostThumbprint', agent.hostThumbprint);
  push(out, 'userId', agent.userId);
  push(out, 'reason', agent.reason);
  push(out, 'createdAtMs', encodeNumber(agent.createdAtMs, 'createdAtMs'));
  push(out, 'updatedAtMs', encodeNumber(agent.updatedAtMs, 'updatedAtMs'));
  push(out, 'activatedAtMs', agent.activatedAtMs === undefined ? undefined : encodeNumber(agent.activatedAtMs, 'activatedAtMs'));
  push(out, 'lastUsedAtMs', agent.lastUsedAtMs === undefined ? undefined : encodeNumber(agent.lastUsedAtMs, 'lastUsedAtMs'));
  push(out, 'absoluteExpiresAtMs', encodeNumber(agent.absoluteExpiresAtMs, 'absoluteExpiresAtMs'));
  push(out, 'maxLifetimeExpiresAtMs', encodeNumber(agent.maxLifetimeExpiresAtMs, 'maxLifetimeExpiresAtMs'));
  push(out, 'approval', agent.approval === undefined ? undefined : encodeApproval(agent.approval));
  return out;
}

/**
 * Encodes the fields a transition sets. Undefined values are left alone; `approval: null` is the
 * one way to remove a field, and it lands in `unset`.
 */
export function encodeAgentPatch(patch: AgentPatch): { set: FlatFields; unset: string[] } {
  const set: FlatFields = [];
  const optNum = (value: number | undefined, field: string): string | undefined =>
    value === undefined ? undefined : encodeNumber(value, field);
  push(set, 'status', patch.status);
  push(set, 'publicJwk', patch.publicJwk === undefined ? undefined : JSON.stringify(pickJwk(patch.publicJwk)));
  push(set, 'keyThumbprint', patch.keyThumbprint);
  push(set, 'keyVersion', optNum(patch.keyVersion, 'keyVersion'));
  push(set, 'hostStatus', patch.hostStatus);
  push(set, 'hostThumbprint', patch.hostThumbprint);
  push(set, 'userId', patch.userId);
  push(set, 'activatedAtMs', optNum(patch.activatedAtMs, 'activatedAtMs'));
  push(set, 'lastUsedAtMs', optNum(patch.lastUsedAtMs, 'lastUsedAtMs'));
  push(set, 'absoluteExpiresAtMs', optNum(patch.absoluteExpiresAtMs, 'absoluteExpiresAtMs'));
  push(set, 'maxLifetimeExpiresAtMs', optNum(patch.maxLifetimeExpiresAtMs, 'maxLifetimeExpiresAtMs'));
  push(set, 'updatedAtMs', optNum(patch.updatedAtMs, 'updatedAtMs'));
  push(set, 'approval', patch.approval ? encodeApproval(patch.approval) : undefined);
  return { set, unset: patch.approval === null ? ['approval'] : [] };
}

export function decodeAgent(flat: unknown): AgentRecord {
  const fields = fieldsFromFlat(flat, 'agent');
  const what = `agent ${fields.get('id') ?? '(no id)'}`;
  const read = new HashReader(fields, what);
  const approval = read.optionalJson('approval');
  return definedOnly<AgentRecord>({
    id: read.string('id'),
    hostId: read.string('hostId'),
    name: read.string('name'),
    mode: read.oneOf('mode', MODES),
    status: read.oneOf('status', AGENT_STATUSES),
    publicJwk: decodeJwk(read.json('publicJwk'), `${what} publicJwk`),
    keyThumbprint: read.string('keyThumbprint'),
    keyVersion: read.number('keyVersion'),
    version: read.number('version'),
    hostStatus: read.oneOf('hostStatus', HOST_STATUSES),
    hostThumbprint: read.string('hostThumbprint'),
    userId: read.optionalString('userId'),
    reason: read.optionalString('reason'),
    createdAtMs: read.number('createdAtMs'),
    updatedAtMs: read.number('updatedAtMs'),
    activatedAtMs: read.optionalNumber('activatedAtMs'),
    lastUsedAtMs: read.optionalNumber('lastUsedAtMs'),
    absoluteExpiresAtMs: read.number('absoluteExpiresAtMs'),
    maxLifetimeExpiresAtMs: read.number('maxLifetimeExpiresAtMs'),
    approval: approval === undefined ? undefined : decodeApproval(approval, `${what} approval`),
  });
}

// ---- hosts ---------------------------------------------------------------------------------------

export type HostPatch = Partial<
  Pick<HostRecord, 'name' | 'status' | 'userId' | 'defaultCapabilities' | 'activatedAtMs' | 'updatedAtMs'>
>;

export function encodeHost(host: HostRecord): FlatFields {
  const out: FlatFields = [];
  push(out, 'id', host.id);
  push(out, 'thumbprint', host.thumbprint);
  push(out, 'publicJwk', JSON.stringify(pickJwk(host.publicJwk)));
  push(out, 'name', host.name);
  push(out, 'status', host.status);
  push(out, 'userId', host.userId);
  push(out, 'defaultCapabilities', JSON.stringify([...host.defaultCapabilities]));
  push(out, 'createdAtMs', encodeNumber(host.createdAtMs, 'createdAtMs'));
  push(out, 'updatedAtMs', encodeNumber(host.updatedAtMs, 'updatedAtMs'));
  push(out, 'activatedAtMs', host.activatedAtMs === undefined ? undefined : encodeNumber(host.activatedAtMs, 'activatedAtMs'));
  return out;
}

export function encodeHostPatch(patch: HostPatch): FlatFields {
  const out: FlatFields = [];
  push(out, 'name', patch.name);
  push(out, 'status', patch.status);
  push(out, 'userId', patch.userId);
  push(out, 'defaultCapabilities', patch.defaultCapabilities === undefined ? undefined : JSON.stringify([...patch.defaultCapabilities]));
  push(out, 'activatedAtMs', patch.activatedAtMs === undefined ? undefined : encodeNumber(patch.activatedAtMs, 'activatedAtMs'));
  push(out, 'updatedAtMs', patch.updatedAtMs === undefined ? undefined : encodeNumber(patch.updatedAtMs, 'updatedAtMs'));
  return out;
}

/** Encodes the fields rotateHostKey replaces, in the order the rotate script expects. */
export function encodeHostKey(next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>): [string, string, string] {
  return [next.thumbprint, JSON.stringify(pickJwk(next.publicJwk)), encodeNumber(next.updatedAtMs, 'updatedAtMs')];
}

export function decodeHost(flat: unknown): HostRecord {
  const fields = fieldsFromFlat(flat, 'host');
  const what = `host ${fields.get('id') ?? '(no id)'}`;
  const read = new HashReader(fields, what);
  const defaults = new ObjectReader({ list: read.json('defaultCapabilities') }, `${what} defaultCapabilities`);
  return definedOnly<HostRecord>({
    id: read.string('id'),
    thumbprint: read.string('thumbprint'),
    publicJwk: decodeJwk(read.json('publicJwk'), `${what} publicJwk`),
    name: read.optionalString('name'),
    status: read.oneOf('status', HOST_STATUSES),
    userId: read.optionalString('userId'),
    defaultCapabilities: defaults.stringArray('list'),
    createdAtMs: read.number('createdAtMs'),
    updatedAtMs: read.number('updatedAtMs'),
    activatedAtMs: read.optionalNumber('activatedAtMs'),
  });
}

// ---- grants --------------------------------------------------------------------------------------

export function encodeGrant(grant: GrantRecord): string {
  // JSON.stringify leaves out members whose value is undefined.
  return JSON.stringify({
    id: grant.id,
    agentId: grant.agentId,
    capability: grant.capability,
    status: grant.status,
    constraints: grant.constraints,
    grantedBy: grant.grantedBy,
    deniedBy: grant.deniedBy,
    reason: grant.reason,
    createdAtMs: encodeNumberForJson(grant.createdAtMs, 'createdAtMs'),
    updatedAtMs: encodeNumberForJson(grant.updatedAtMs, 'updatedAtMs'),
    expiresAtMs: grant.expiresAtMs === undefined ? undefined : encodeNumberForJson(grant.expiresAtMs, 'expiresAtMs'),
  });
}

/** JSON would silently turn NaN or Infinity into null; refuse them instead. */
function encodeNumberForJson(value: number, field: string): number {
  encodeNumber(value, field);
  return value;
}

export function decodeGrant(raw: unknown): GrantRecord {
  if (typeof raw !== 'string') throw new MalformedRecordError('stored grant is malformed: not a string');
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new MalformedRecordError('stored grant is malformed: not valid JSON');
  }
  const id = typeof (parsed as { id?: unknown } | null)?.id === 'string' ? (parsed as { id: string }).id : '(no id)';
  const read = new ObjectReader(parsed, `grant ${id}`);
  return definedOnly<GrantRecord>({
    id: read.string('id'),
    agentId: read.string('agentId'),
    capability: read.string('capability'),
    status: read.oneOf('status', GRANT_STATUSES),
    constraints: read.optionalObject('constraints'),
    grantedBy: read.optionalString('grantedBy'),
    deniedBy: read.optionalString('deniedBy'),
    reason: read.optionalString('reason'),
    createdAtMs: read.number('createdAtMs'),
    updatedAtMs: read.number('updatedAtMs'),
    expiresAtMs: read.optionalNumber('expiresAtMs'),
  });
}

// ---- numbers in replies --------------------------------------------------------------------------

/** A session deadline as stored (decimal string) or absent. */
export function decodeOptionalMs(raw: unknown, what: string): number | null {
  if (raw === null || raw === undefined) return null;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(value)) throw new MalformedRecordError(`stored ${what} is malformed: not a number`);
  return value;
}
