// The codecs of agentgate's records as Redis stores them, each derived from the record's field table
// (../records.ts) by the generic reader and writer in field-codec.ts. Agents and hosts are hashes
// with one field per record field, so the Lua scripts can read the fields they need without decoding
// anything; grants are JSON strings. Also here: the snapshot as the scripts return it.
import type { AgentRecord, AgentSnapshot, GrantRecord, HostRecord } from '../../domain/types.ts';
import { assertFiniteMs, byId } from '../checks.ts';
import { AGENT_FIELDS, GRANT_FIELDS, HOST_FIELDS, type AgentPatch, type HostPatch } from '../records.ts';
import type { CounterCount } from '../store.ts';
import {
  compileTable,
  decodeFlatHash,
  decodeJson,
  decodeOptionalMs,
  encodeHash,
  encodeHashPatch,
  encodeHashValue,
  encodeJson,
  fieldNamed,
  malformed,
  type FlatFields,
} from './field-codec.ts';

export { decodeOptionalMs, type FlatFields } from './field-codec.ts';

const AGENT = compileTable(AGENT_FIELDS);
const HOST = compileTable(HOST_FIELDS);
const GRANT = compileTable(GRANT_FIELDS);

// ---- agents --------------------------------------------------------------------------------------

export function encodeAgent(agent: AgentRecord): FlatFields {
  return encodeHash(AGENT, agent);
}

/**
 * Encodes the fields a transition sets. Undefined values are left alone; `approval: null` is the
 * one way to remove a field, and it lands in `unset`.
 */
export function encodeAgentPatch(patch: AgentPatch): { set: FlatFields; unset: string[] } {
  return encodeHashPatch(AGENT, patch);
}

export function decodeAgent(flat: unknown): AgentRecord {
  return decodeFlatHash<AgentRecord>(AGENT, flat, 'agent');
}

// ---- hosts ---------------------------------------------------------------------------------------

export function encodeHost(host: HostRecord): FlatFields {
  return encodeHash(HOST, host);
}

/** Encodes the fields a host write sets; `userId: null` (unlinking) lands in `unset`. */
export function encodeHostPatch(patch: HostPatch): { set: FlatFields; unset: string[] } {
  return encodeHashPatch(HOST, patch);
}

// The fields rotateHostKey replaces, together.
const HOST_THUMBPRINT = fieldNamed(HOST, 'thumbprint');
const HOST_PUBLIC_JWK = fieldNamed(HOST, 'publicJwk');
const HOST_UPDATED_AT_MS = fieldNamed(HOST, 'updatedAtMs');

/** Encodes the fields rotateHostKey replaces, in the order the rotate script expects. */
export function encodeHostKey(next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>): [string, string, string] {
  return [
    encodeHashValue(HOST_THUMBPRINT, next.thumbprint),
    encodeHashValue(HOST_PUBLIC_JWK, next.publicJwk),
    encodeHashValue(HOST_UPDATED_AT_MS, next.updatedAtMs),
  ];
}

export function decodeHost(flat: unknown): HostRecord {
  return decodeFlatHash<HostRecord>(HOST, flat, 'host');
}

// ---- grants --------------------------------------------------------------------------------------

export function encodeGrant(grant: GrantRecord): string {
  return JSON.stringify(encodeJson(GRANT, grant));
}

export function decodeGrant(raw: unknown): GrantRecord {
  if (typeof raw !== 'string') malformed('grant', 'not a string');
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    malformed('grant', 'not valid JSON');
  }
  const id = typeof (parsed as { id?: unknown } | null)?.id === 'string' ? (parsed as { id: string }).id : '(no id)';
  return decodeJson<GrantRecord>(GRANT, parsed, `grant ${id}`);
}

/** `[id, capability, json]`, as the create and cas scripts take a grant. */
export function grantTriple(grant: GrantRecord): [string, string, string] {
  return [grant.id, grant.capability, encodeGrant(grant)];
}

export function decodeGrants(reply: unknown): GrantRecord[] {
  if (!Array.isArray(reply)) throw new Error('stored grants are malformed: expected a list');
  return reply.map(decodeGrant);
}

// ---- snapshots -----------------------------------------------------------------------------------

/** Grants come back in hash order; sorting by id makes every read of one state identical. */
export function decodeSnapshot(agentFields: unknown, grantJsons: unknown, session: unknown): AgentSnapshot {
  const agent: AgentRecord = decodeAgent(agentFields);
  const grants = decodeGrants(grantJsons).sort(byId);
  return { agent, grants, sessionExpiresAtMs: decodeOptionalMs(session, `session of agent ${agent.id}`) };
}

/** The snapshot exactly as a later read would decode it (only the stored fields, grants sorted). */
export function normalizeSnapshot(snapshot: AgentSnapshot): AgentSnapshot {
  const session = snapshot.sessionExpiresAtMs === null ? null : String(snapshot.sessionExpiresAtMs);
  return decodeSnapshot(encodeAgent(snapshot.agent), snapshot.grants.map(encodeGrant), session);
}

/** Epoch milliseconds as the scripts store them; refuses NaN and Infinity. */
export function msString(value: number, what: string): string {
  assertFiniteMs(what, value);
  return String(value);
}

// ---- the execute script's counts and append flags ------------------------------------------------

/** A script's flat list of (consumed, ms left) pairs, one per counter it spent. */
export function decodeCounts(reply: unknown): CounterCount[] {
  if (!Array.isArray(reply) || reply.length % 2 !== 0) throw new Error('counter counts are malformed: expected pairs');
  const counts: CounterCount[] = [];
  for (let i = 0; i < reply.length; i += 2) {
    const consumed = Number(reply[i]);
    const msBeforeNext = Number(reply[i + 1]);
    if (!Number.isSafeInteger(consumed) || !Number.isSafeInteger(msBeforeNext)) throw new Error('counter counts are malformed: expected integers');
    counts.push({ consumed, msBeforeNext });
  }
  return counts;
}

/** A script's 1/0 per event it tried to append. */
export function decodeFlags(reply: unknown): boolean[] {
  if (!Array.isArray(reply)) throw new Error('append flags are malformed: expected a list');
  return reply.map((flag) => flag === 1);
}
