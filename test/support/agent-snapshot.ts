// An active autonomous agent with one active `echo` grant and a live session, as the store keeps
// one: for tests that put an agent straight into a Redis store and drive its round trip.
import { randomUUID } from 'node:crypto';
import type { AgentSnapshot } from '../../src/domain/types.ts';

export function activeAgentSnapshot(hostId = 'hst_1'): AgentSnapshot {
  const nowMs = Date.now();
  const id = `agt_${randomUUID()}`;
  return {
    agent: {
      id,
      hostId,
      name: 'bot',
      mode: 'autonomous',
      status: 'active',
      publicJwk: { kty: 'OKP', crv: 'Ed25519', x: 'abc' },
      keyThumbprint: `akt_${randomUUID()}`,
      keyVersion: 1,
      version: 1,
      hostStatus: 'active',
      hostThumbprint: 'thp_x',
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      absoluteExpiresAtMs: nowMs + 86_400_000,
      maxLifetimeExpiresAtMs: nowMs + 3_600_000,
    },
    grants: [{ id: `grt_${randomUUID()}`, agentId: id, capability: 'echo', status: 'active', createdAtMs: nowMs, updatedAtMs: nowMs }],
    sessionExpiresAtMs: nowMs + 600_000,
  };
}
