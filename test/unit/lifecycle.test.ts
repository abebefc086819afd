import { describe, expect, it } from 'vitest';
import { agentRefusal, effectiveStatus } from '../../src/domain/lifecycle.ts';
import type { AgentRecord } from '../../src/domain/types.ts';

const NOW = 10_000_000;
const agent = (over: Partial<AgentRecord> = {}): AgentRecord => ({
  id: 'agt_1', hostId: 'hst_1', name: 'a', mode: 'delegated', status: 'active',
  publicJwk: { kty: 'OKP', crv: 'Ed25519', x: 'x' }, keyThumbprint: 't', keyVersion: 1, version: 1,
  hostStatus: 'active', hostThumbprint: 'h', createdAtMs: 0, updatedAtMs: 0,
  absoluteExpiresAtMs: NOW + 1000, maxLifetimeExpiresAtMs: NOW + 1000, ...over,
});

describe('effective agent status (protocol §7.3)', () => {
  it('is active while the session, max lifetime and absolute lifetime all run', () => {
    expect(effectiveStatus(agent(), NOW + 1, NOW)).toEqual({ status: 'active' });
  });

  it('expires when the session TTL or the max lifetime elapses', () => {
    expect(effectiveStatus(agent(), NOW, NOW)).toEqual({ status: 'expired', because: 'session_ttl' });
    expect(effectiveStatus(agent(), null, NOW)).toEqual({ status: 'expired', because: 'session_ttl' });
    expect(effectiveStatus(agent({ maxLifetimeExpiresAtMs: NOW }), NOW + 5, NOW)).toEqual({ status: 'expired', because: 'max_lifetime' });
  });

  it('revokes when the absolute lifetime elapses, even for an expired agent', () => {
    expect(effectiveStatus(agent({ absoluteExpiresAtMs: NOW }), NOW + 5, NOW)).toEqual({ status: 'revoked', because: 'absolute_lifetime' });
    expect(effectiveStatus(agent({ status: 'expired', absoluteExpiresAtMs: NOW }), null, NOW).because).toBe('absolute_lifetime');
  });

  it('a revoked agent whose absolute lifetime elapsed reports the lifetime, however far its revocation got', () => {
    expect(effectiveStatus(agent({ status: 'revoked', absoluteExpiresAtMs: NOW }), null, NOW)).toEqual({ status: 'revoked', because: 'absolute_lifetime' });
    expect(effectiveStatus(agent({ status: 'claimed', absoluteExpiresAtMs: NOW }), null, NOW)).toEqual({ status: 'claimed' });
  });

  it('keeps terminal statuses whatever the clock says', () => {
    for (const status of ['revoked', 'rejected', 'claimed', 'pending'] as const) {
      expect(effectiveStatus(agent({ status }), NOW + 5, NOW).status).toBe(status);
    }
  });
});

describe('agent refusals', () => {
  it('names the host state before the agent state (cascade)', () => {
    expect(agentRefusal(agent({ hostStatus: 'revoked' }), NOW + 5, NOW)?.code).toBe('host_revoked');
    expect(agentRefusal(agent({ hostStatus: 'pending' }), NOW + 5, NOW)?.code).toBe('host_pending');
  });

  it('maps each agent state to its contract code', () => {
    expect(agentRefusal(agent(), NOW + 5, NOW)).toBeNull();
    expect(agentRefusal(agent(), NOW - 1, NOW)?.code).toBe('agent_expired');
    expect(agentRefusal(agent({ absoluteExpiresAtMs: NOW }), NOW + 5, NOW)?.code).toBe('absolute_lifetime_exceeded');
    expect(agentRefusal(agent({ status: 'revoked' }), NOW + 5, NOW)?.code).toBe('agent_revoked');
    expect(agentRefusal(agent({ status: 'pending' }), NOW + 5, NOW)?.code).toBe('agent_pending');
    expect(agentRefusal(agent({ status: 'rejected' }), NOW + 5, NOW)?.code).toBe('agent_rejected');
    expect(agentRefusal(agent({ status: 'claimed' }), NOW + 5, NOW)?.code).toBe('agent_claimed');
  });
});
