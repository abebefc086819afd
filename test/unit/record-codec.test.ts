// The Redis record codecs derived from the field tables , without Redis: each
// record reads back exactly as written, nothing outside its table is stored, corrupt state throws
// an error naming the record and the field, and patches change only what the table allows.
import { describe, expect, it } from 'vitest';
import { definedOnly } from '../../src/common/defined-only.ts';
import type { AgentRecord, GrantRecord, HostRecord } from '../../src/domain/types.ts';
import { AGENT_PATCH_FIELDS, HOST_PATCH_FIELDS } from '../../src/store/records.ts';
import {
  decodeAgent,
  decodeGrant,
  decodeHost,
  encodeAgent,
  encodeAgentPatch,
  encodeGrant,
  encodeHost,
  encodeHostKey,
  encodeHostPatch,
} from '../../src/store/redis/codec.ts';

const NOW_MS = 1_750_000_000_000;

const agent: AgentRecord = {
  id: 'agt_1',
  hostId: 'hst_1',
  name: 'deploy bot',
  mode: 'delegated',
  status: 'pending',
  publicJwk: { kty: 'OKP', crv: 'Ed25519', x: 'abc' },
  keyThumbprint: 'akt_1',
  keyVersion: 2,
  version: 7,
  hostStatus: 'active',
  hostThumbprint: 'thp_1',
  userId: 'usr_1',
  reason: 'because',
  createdAtMs: NOW_MS,
  updatedAtMs: NOW_MS + 1,
  activatedAtMs: NOW_MS + 2,
  lastUsedAtMs: NOW_MS + 3,
  absoluteExpiresAtMs: NOW_MS + 4,
  maxLifetimeExpiresAtMs: NOW_MS + 5,
  approval: { id: 'apr_1', grantIds: ['grt_1'], createdAtMs: NOW_MS, expiresAtMs: NOW_MS + 6, intervalSeconds: 5 },
};

const host: HostRecord = {
  id: 'hst_1',
  thumbprint: 'thp_1',
  publicJwk: { kty: 'RSA', n: 'modulus', e: 'AQAB' },
  name: 'runner',
  status: 'active',
  userId: 'usr_1',
  defaultCapabilities: ['echo'],
  createdAtMs: NOW_MS,
  updatedAtMs: NOW_MS,
  activatedAtMs: NOW_MS,
};

const grant: GrantRecord = {
  id: 'grt_1',
  agentId: 'agt_1',
  capability: 'transfer_money',
  status: 'active',
  constraints: { amount: { max: 1000 } },
  grantedBy: 'usr_1',
  createdAtMs: NOW_MS,
  updatedAtMs: NOW_MS,
  expiresAtMs: NOW_MS + 1,
};

/** The agent's hash with one field replaced (or removed, for undefined). */
function agentHashWith(field: string, value: string | undefined): string[] {
  const fields = new Map<string, string>();
  const flat = encodeAgent(agent);
  for (let i = 0; i < flat.length; i += 2) fields.set(flat[i]!, flat[i + 1]!);
  if (value === undefined) fields.delete(field);
  else fields.set(field, value);
  return [...fields].flat();
}

describe('record codecs: what is written reads back exactly', () => {
  it('agents, hosts and grants survive a round trip, every field included', () => {
    expect(decodeAgent(encodeAgent(agent))).toEqual(agent);
    expect(decodeHost(encodeHost(host))).toEqual(host);
    expect(decodeGrant(encodeGrant(grant))).toEqual(grant);
  });

  it('absent optional fields stay absent (not present as undefined)', () => {
    const { userId: _u, reason: _r, activatedAtMs: _a, lastUsedAtMs: _l, approval: _p, ...bare } = agent;
    const decoded = decodeAgent(encodeAgent(bare));
    expect(decoded).toEqual(bare);
    expect(Object.keys(decoded)).not.toContain('approval');
    expect(Object.keys(decodeGrant(encodeGrant({ ...grant, constraints: undefined })))).not.toContain('constraints');
  });

  it('a private JWK member, or anything else outside the table, is never stored', () => {
    const leaky = { ...agent, publicJwk: { ...agent.publicJwk, d: 'PRIVATE' }, extra: 'x' } as AgentRecord;
    expect(encodeAgent(leaky).join(' ')).not.toMatch(/PRIVATE|extra/);
    expect(encodeGrant({ ...grant, extra: 'x' } as GrantRecord)).not.toContain('extra');
    expect(encodeHostKey({ thumbprint: 'thp_2', publicJwk: { kty: 'OKP', x: 'k', d: 'PRIVATE' } as HostRecord['publicJwk'], updatedAtMs: 9 })).toEqual([
      'thp_2',
      '{"kty":"OKP","x":"k"}',
      '9',
    ]);
  });

  it('a number that JSON or Redis would mangle (NaN, Infinity) is refused at write', () => {
    expect(() => encodeAgent({ ...agent, keyVersion: Number.NaN })).toThrow(/keyVersion/);
    expect(() => encodeGrant({ ...grant, expiresAtMs: Number.POSITIVE_INFINITY })).toThrow(/expiresAtMs/);
  });
});

describe('record codecs: a malformed stored record throws an error naming the record and the field', () => {
  const cases: [string, () => unknown, RegExp][] = [
    ['a number field that is not a number', () => decodeAgent(agentHashWith('keyVersion', 'one')), /^stored agent agt_1 is malformed: field "keyVersion" is not a number$/],
    ['an empty number field', () => decodeAgent(agentHashWith('createdAtMs', ' ')), /field "createdAtMs" is not a number/],
    ['a missing required field', () => decodeAgent(agentHashWith('hostId', undefined)), /^stored agent agt_1 is malformed: field "hostId" is missing$/],
    ['an unknown status', () => decodeAgent(agentHashWith('status', 'superuser')), /field "status" is not one of active, pending/],
    ['a JSON field that is not JSON', () => decodeAgent(agentHashWith('publicJwk', '{not json')), /field "publicJwk" is not valid JSON/],
    ['a key without kty', () => decodeAgent(agentHashWith('publicJwk', '{"x":"a"}')), /^stored agent agt_1 publicJwk is malformed: field "kty" is not a string$/],
    ['an approval that is not an object', () => decodeAgent(agentHashWith('approval', '[]')), /^stored agent agt_1 approval is malformed: not an object$/],
    ['approval grant ids that are not strings', () => decodeAgent(agentHashWith('approval', JSON.stringify({ ...agent.approval, grantIds: [1] }))), /agent agt_1 approval is malformed: field "grantIds" is not a list of strings/],
    ['a reply that is not a flat list', () => decodeAgent(['id']), /^stored agent is malformed: expected a flat list of hash fields$/],
    ['host default capabilities that are not a list', () => decodeHost([...encodeHost(host), 'defaultCapabilities', '{}']), /^stored host hst_1 is malformed: field "defaultCapabilities" is not a list of strings$/],
    ['a grant with an unknown status', () => decodeGrant(JSON.stringify({ ...grant, status: 'maybe' })), /^stored grant grt_1 is malformed: field "status" is not one of active, pending, denied, revoked$/],
    ['grant constraints that are not an object', () => decodeGrant(JSON.stringify({ ...grant, constraints: [] })), /field "constraints" is not an object/],
    ['a grant that is not JSON', () => decodeGrant('{'), /^stored grant is malformed: not valid JSON$/],
  ];
  it.each(cases)('%s', (_label, decode, message) => {
    expect(decode).toThrow(message);
    expect(decode).toThrow(Error);
  });
});

describe('record patches: only what the table lets a write change', () => {
  it('identity fields smuggled into a patch are ignored; approval null removes the approval', () => {
    const smuggled = { status: 'revoked', id: 'agt_other', version: 42, createdAtMs: 0, approval: null } as Parameters<typeof encodeAgentPatch>[0];
    expect(encodeAgentPatch(smuggled)).toEqual({ set: ['status', 'revoked'], unset: ['approval'] });
    expect(encodeHostPatch({ status: 'revoked', id: 'hst_other', thumbprint: 'thp_other' } as Parameters<typeof encodeHostPatch>[0])).toEqual({ set: ['status', 'revoked'], unset: [] });
    expect(encodeHostPatch({ userId: null })).toEqual({ set: [], unset: ['userId'] });
  });

  it('the patchable fields are the ones the stores have always accepted', () => {
    expect([...AGENT_PATCH_FIELDS.set].sort()).toEqual(
      ['status', 'publicJwk', 'keyThumbprint', 'keyVersion', 'hostStatus', 'hostThumbprint', 'userId', 'activatedAtMs', 'lastUsedAtMs', 'absoluteExpiresAtMs', 'maxLifetimeExpiresAtMs', 'updatedAtMs'].sort(),
    );
    expect(AGENT_PATCH_FIELDS.remove).toEqual(['approval']);
    expect([...HOST_PATCH_FIELDS.set].sort()).toEqual(['name', 'status', 'defaultCapabilities', 'activatedAtMs', 'updatedAtMs'].sort());
    expect(HOST_PATCH_FIELDS.remove).toEqual(['userId']);
  });
});

describe('definedOnly: absent means absent', () => {
  it('drops undefined members, keeps null, and leaves its argument untouched', () => {
    const value = { a: 1, b: undefined, c: null };
    expect(definedOnly(value)).toEqual({ a: 1, c: null });
    expect(Object.keys(definedOnly(value))).toEqual(['a', 'c']);
    expect(Object.keys(value)).toEqual(['a', 'b', 'c']);
  });

  it('with keys, copies only those', () => {
    expect(definedOnly({ a: 1, b: 2, c: undefined }, ['a', 'c'])).toEqual({ a: 1 });
  });
});
