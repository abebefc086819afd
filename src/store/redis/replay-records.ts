// The Redis store's replay records (the ReplayRecords role of store.ts): each is one key set with
// SET PX NX, so recording it again before it expires answers false, atomically, and Redis's own
// expiry forgets it. An agent's jti key is in the agent's slot and is the one executeRoundTrip's
// script sets (keys.ts agentJti), so a jti is accepted once across every agent-JWT endpoint.
import { assertTaggable, isTaggable, normalizeTtlMs } from '../checks.ts';
import type { ReplayRecords } from '../store.ts';
import { RedisRole } from './parts.ts';

export class RedisReplayRecords extends RedisRole implements ReplayRecords {
  async recordAgentJti(agentId: string, jti: string, ttlMs: number): Promise<boolean> {
    assertTaggable('agent id', agentId);
    return this.#recordOnce(this.redis.keys.agentJti(agentId, jti), ttlMs);
  }

  async recordHostJti(hostThumbprint: string, jti: string, ttlMs: number): Promise<boolean> {
    assertTaggable('host thumbprint', hostThumbprint);
    return this.#recordOnce(this.redis.keys.hostJti(hostThumbprint, jti), ttlMs);
  }

  async recordStatusPoll(agentId: string, windowMs: number): Promise<boolean> {
    if (!isTaggable(agentId)) return true;
    return this.#recordOnce(this.redis.keys.statusPoll(agentId), windowMs);
  }

  async useChallenge(challengeKey: string, ttlMs: number): Promise<boolean> {
    if (!isTaggable(challengeKey)) throw new Error('a challenge key must be taggable');
    return this.#recordOnce(this.redis.keys.usedChallenge(challengeKey), ttlMs);
  }

  async #recordOnce(key: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.connection.set(key, '1', 'PX', normalizeTtlMs(ttlMs), 'NX')) === 'OK';
  }
}
