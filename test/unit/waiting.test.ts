// What an agent waits on a person for (src/domain/waiting.ts): the rule behind GET /admin/approvals.
import { describe, expect, it } from 'vitest';
import type { AgentRecord, AgentSnapshot, GrantRecord } from '../../src/domain/types.ts';
import { byRegistrationTime, whatAgentWaitsFor } from '../../src/domain/waiting.ts';

const NOW = 10_000_000;
const grant = (id: string, status: GrantRecord['status']): GrantRecord => ({ id, agentId: 'agt_1', capability: `cap_${id}`, status, createdAtMs: 0, updatedAtMs: 0 });
const snapshot = (over: Partial<AgentRecord>, grants: GrantRecord[] = []): AgentSnapshot => ({
  agent: {
    id: 'agt_1', hostId: 'hst_1', name: 'a', mode: 'delegated', status: 'pending',
    publicJwk: { kty: 'OKP', crv: 'Ed25519', x: 'x' }, keyThumbprint: 't', keyVersion: 1, version: 1,
    hostStatus: 'active', hostThumbprint: 'h', createdAtMs: 0, updatedAtMs: 0,
    absoluteExpiresAtMs: NOW * 2, maxLifetimeExpiresAtMs: NOW * 2, ...over,
  },
  grants,
  sessionExpiresAtMs: null,
});
const approval = (grantIds: string[], expiresAtMs: number) => ({ id: 'apr_1', grantIds, createdAtMs: 0, expiresAtMs, intervalSeconds: 5 });

describe('what an agent waits on a person for', () => {
  it('a pending agent waits, with the grants its open approval decides', () => {
    const waiting = whatAgentWaitsFor(snapshot({ approval: approval(['g1'], NOW + 1) }, [grant('g1', 'pending'), grant('g2', 'pending'), grant('g3', 'active')]), NOW);
    expect(waiting).toMatchObject({ registration: true, openApproval: { id: 'apr_1' } });
    expect(waiting!.requested.map((g) => g.id)).toEqual(['g1']);
  });

  it('a pending agent whose approval lapsed still waits, with no open approval', () => {
    const waiting = whatAgentWaitsFor(snapshot({ approval: approval(['g1'], NOW) }, [grant('g1', 'pending')]), NOW);
    expect(waiting).toMatchObject({ registration: true, openApproval: null, approval: { expiresAtMs: NOW } });
  });

  it('a pending agent without an approval record waits with all its pending grants, by capability name', () => {
    const grants = [grant('g3', 'pending'), grant('g1', 'pending'), grant('g2', 'denied')];
    expect(whatAgentWaitsFor(snapshot({}, grants), NOW)!.requested.map((g) => g.id)).toEqual(['g1', 'g3']);
  });

  it('an active agent waits only while an open approval has pending grants', () => {
    const grants = [grant('g1', 'pending')];
    expect(whatAgentWaitsFor(snapshot({ status: 'active', approval: approval(['g1'], NOW + 1) }, grants), NOW)).toMatchObject({ registration: false });
    expect(whatAgentWaitsFor(snapshot({ status: 'active', approval: approval(['g1'], NOW) }, grants), NOW)).toBeNull();
    expect(whatAgentWaitsFor(snapshot({ status: 'active', approval: approval(['g1'], NOW + 1) }, [grant('g1', 'active')]), NOW)).toBeNull();
    expect(whatAgentWaitsFor(snapshot({ status: 'active' }, grants), NOW)).toBeNull();
  });

  it('revoked, rejected, claimed and expired agents wait on nobody', () => {
    for (const status of ['revoked', 'rejected', 'claimed', 'expired'] as const) {
      expect(whatAgentWaitsFor(snapshot({ status, approval: approval(['g1'], NOW + 1) }, [grant('g1', 'pending')]), NOW)).toBeNull();
    }
  });

  it('lists the oldest registration first, then by id', () => {
    const item = (id: string, createdAtMs: number) => whatAgentWaitsFor(snapshot({ id, createdAtMs }), NOW)!;
    expect([item('b', 2), item('c', 1), item('a', 2)].sort(byRegistrationTime).map((w) => w.snapshot.agent.id)).toEqual(['c', 'a', 'b']);
  });
});
