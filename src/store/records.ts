// One description of each stored record: which fields it has, what kind of value
// each holds, which are optional, and which a write may change. The Redis codec (redis/codec.ts),
// the patch types of store.ts and the memory store's patching are all derived from these tables, so
// a field is added in one place. Each table is checked against its type in domain/types.ts: a field
// missing from the table, a kind that does not fit the type, or an optional field not marked so is
// a compile error.
import {
  AGENT_STATUSES,
  APPROVAL_METHODS,
  ENROLLMENT_STATES,
  GRANT_STATUSES,
  HOST_STATUSES,
  MODES,
  type AgentRecord,
  type ApprovalRecord,
  type EnrollmentRecord,
  type GrantRecord,
  type HostRecord,
  type PublicJwk,
} from '../domain/types.ts';

/**
 * How one field is stored and checked when read back:
 * - `string`, `number` (finite: epoch milliseconds, versions, seconds), `enum` (one of `values`);
 * - `list`: a list of strings; `object`: any JSON object (grant constraints);
 * - `record`: a nested record described by its own table (`fields`).
 * `patch`: 'set' when a write may change the field, 'remove' when it may also remove it (with
 * `null`); fields without it are identity or history, fixed once the record exists.
 */
export type FieldSpec =
  | { readonly kind: 'string' | 'number' | 'list' | 'object'; readonly optional?: true; readonly patch?: Patchable }
  | { readonly kind: 'enum'; readonly values: readonly string[]; readonly optional?: true; readonly patch?: Patchable }
  | { readonly kind: 'record'; readonly fields: Readonly<Record<string, FieldSpec>>; readonly optional?: true; readonly patch?: Patchable };

type Patchable = 'set' | 'remove';

/** The spec a value of type V may have: the kind must fit the type, and `enum` lists V's values. */
type SpecFor<V> = [V] extends [number]
  ? { readonly kind: 'number' }
  : [V] extends [string]
    ? string extends V
      ? { readonly kind: 'string' }
      : { readonly kind: 'enum'; readonly values: readonly V[] }
    : [V] extends [readonly string[]]
      ? { readonly kind: 'list' }
      : [V] extends [object]
        ? { readonly kind: 'record'; readonly fields: FieldTable<V> } | { readonly kind: 'object' }
        : never;

/** Optional fields say so (and only they may be removed by a patch); required fields do not. */
type Presence<R, K extends keyof R> = object extends Pick<R, K>
  ? { readonly optional: true; readonly patch?: Patchable }
  : { readonly optional?: never; readonly patch?: 'set' };

/** A table describing record type R: exactly R's fields, each with a spec that fits its type. */
type FieldTable<R> = { readonly [K in keyof R]-?: SpecFor<NonNullable<R[K]>> & Presence<R, K> };

/** The fields of a table a patch may change in the given way. */
type PatchKeys<T, How extends Patchable> = {
  [K in keyof T]: T[K] extends { readonly patch: How } ? K : never;
}[keyof T];

/** A patch of record R described by table T: settable fields, plus `null` to remove a removable one. */
type PatchOf<R, T> = Partial<Pick<R, PatchKeys<T, 'set'> & keyof R>> & {
  [K in PatchKeys<T, 'remove'> & keyof R]?: R[K] | null;
};

// ---- the tables ----------------------------------------------------------------------------------
// Field order is the order records are written and decoded in; keep it the order of domain/types.ts.

/** Only the public members a JWK may carry: a private `d` is not in the table, so it never reaches storage. */
const JWK_FIELDS = {
  kty: { kind: 'string' },
  crv: { kind: 'string', optional: true },
  x: { kind: 'string', optional: true },
  y: { kind: 'string', optional: true },
  n: { kind: 'string', optional: true },
  e: { kind: 'string', optional: true },
  kid: { kind: 'string', optional: true },
} as const satisfies FieldTable<PublicJwk>;

const APPROVAL_FIELDS = {
  id: { kind: 'string' },
  grantIds: { kind: 'list' },
  createdAtMs: { kind: 'number' },
  expiresAtMs: { kind: 'number' },
  intervalSeconds: { kind: 'number' },
  method: { kind: 'enum', values: APPROVAL_METHODS, optional: true },
  personId: { kind: 'string', optional: true },
  bindingMessage: { kind: 'string', optional: true },
} as const satisfies FieldTable<ApprovalRecord>;

export const AGENT_FIELDS = {
  id: { kind: 'string' },
  hostId: { kind: 'string' },
  name: { kind: 'string' },
  mode: { kind: 'enum', values: MODES },
  status: { kind: 'enum', values: AGENT_STATUSES, patch: 'set' },
  publicJwk: { kind: 'record', fields: JWK_FIELDS, patch: 'set' },
  jwksUrl: { kind: 'string', optional: true },
  keyThumbprint: { kind: 'string', patch: 'set' },
  keyVersion: { kind: 'number', patch: 'set' },
  // Bumped by the compare-and-set itself, never by a patch.
  version: { kind: 'number' },
  hostStatus: { kind: 'enum', values: HOST_STATUSES, patch: 'set' },
  hostThumbprint: { kind: 'string', patch: 'set' },
  userId: { kind: 'string', optional: true, patch: 'set' },
  reason: { kind: 'string', optional: true },
  createdAtMs: { kind: 'number' },
  updatedAtMs: { kind: 'number', patch: 'set' },
  activatedAtMs: { kind: 'number', optional: true, patch: 'set' },
  lastUsedAtMs: { kind: 'number', optional: true, patch: 'set' },
  absoluteExpiresAtMs: { kind: 'number', patch: 'set' },
  maxLifetimeExpiresAtMs: { kind: 'number', patch: 'set' },
  // `null` in a patch removes the pending approval.
  approval: { kind: 'record', fields: APPROVAL_FIELDS, optional: true, patch: 'remove' },
} as const satisfies FieldTable<AgentRecord>;

export const HOST_FIELDS = {
  id: { kind: 'string' },
  // The thumbprint and key change only together, through rotateHostKey.
  thumbprint: { kind: 'string' },
  publicJwk: { kind: 'record', fields: JWK_FIELDS },
  // The delivery mode is fixed at registration (protocol §5.1), so no patch changes it.
  jwksUrl: { kind: 'string', optional: true },
  name: { kind: 'string', optional: true, patch: 'set' },
  status: { kind: 'enum', values: HOST_STATUSES, patch: 'set' },
  // `null` in a patch unlinks the host from its person (the people's API).
  userId: { kind: 'string', optional: true, patch: 'remove' },
  defaultCapabilities: { kind: 'list', patch: 'set' },
  createdAtMs: { kind: 'number' },
  updatedAtMs: { kind: 'number', patch: 'set' },
  activatedAtMs: { kind: 'number', optional: true, patch: 'set' },
} as const satisfies FieldTable<HostRecord>;

/** Grants are stored whole (one JSON value each) and replaced whole, so none has a patch. */
export const GRANT_FIELDS = {
  id: { kind: 'string' },
  agentId: { kind: 'string' },
  capability: { kind: 'string' },
  status: { kind: 'enum', values: GRANT_STATUSES },
  constraints: { kind: 'object', optional: true },
  grantedBy: { kind: 'string', optional: true },
  deniedBy: { kind: 'string', optional: true },
  reason: { kind: 'string', optional: true },
  reasonBy: { kind: 'enum', values: ['requester', 'policy'], optional: true },
  createdAtMs: { kind: 'number' },
  updatedAtMs: { kind: 'number' },
  expiresAtMs: { kind: 'number', optional: true },
} as const satisfies FieldTable<GrantRecord>;

/** An enrollment is written whole once; only completeEnrollment moves it, so none of its fields has a patch. */
export const ENROLLMENT_FIELDS = {
  id: { kind: 'string' },
  personId: { kind: 'string' },
  name: { kind: 'string' },
  defaultCapabilities: { kind: 'list' },
  tokenHash: { kind: 'string' },
  keyThumbprint: { kind: 'string', optional: true },
  createdAtMs: { kind: 'number' },
  expiresAtMs: { kind: 'number' },
  state: { kind: 'enum', values: ENROLLMENT_STATES },
  hostId: { kind: 'string', optional: true },
  enrolledAtMs: { kind: 'number', optional: true },
} as const satisfies FieldTable<EnrollmentRecord>;

// ---- patches -------------------------------------------------------------------------------------

/** Fields of an agent that a transition may set (identity fields never change); `approval: null` removes it. */
export type AgentPatch = PatchOf<AgentRecord, typeof AGENT_FIELDS>;

/** Fields of a host that updateHost may set (its key changes only through rotateHostKey). */
export type HostPatch = PatchOf<HostRecord, typeof HOST_FIELDS>;

/** The names of a table's fields a patch may change in the given way, in table order. */
function patchKeys<T extends Readonly<Record<string, FieldSpec>>, How extends Patchable>(table: T, how: How): PatchKeys<T, How>[] {
  return Object.keys(table).filter((name) => table[name]!.patch === how) as PatchKeys<T, How>[];
}

/**
 * The fields a patch may set or remove, as both stores apply them: anything else on a patch object
 * (an `id` or `version` smuggled in by a spread) is ignored.
 */
export const AGENT_PATCH_FIELDS = { set: patchKeys(AGENT_FIELDS, 'set'), remove: patchKeys(AGENT_FIELDS, 'remove') };
export const HOST_PATCH_FIELDS = { set: patchKeys(HOST_FIELDS, 'set'), remove: patchKeys(HOST_FIELDS, 'remove') };
