// The Redis store's pending index (the PendingIndex role of store.ts): one sorted set per kind of
// what waits (agents, hosts, approvals) scored by time, for the clean-up job; the clean-up's
// removals, each one script in the record's slot and then one in its host's or thumbprint's; and
// the approval page's user-code index, one key per code that expires with the approval (a lookup
// by code comes before anyone knows the agent, so it cannot live in the agent's slot).
import { assertFiniteMs, assertTaggable, isTaggable, jwksUrlKey } from '../checks.ts';
import type { PendingIndex, PendingKind } from '../store.ts';
import { msString } from './codec.ts';
import { RedisRole } from './parts.ts';

export class RedisPendingIndex extends RedisRole implements PendingIndex {
  async trackPending(kind: PendingKind, id: string, atMs: number): Promise<void> {
    assertFiniteMs('atMs', atMs);
    await this.redis.connection.zadd(this.redis.keys.pendingSince(kind), String(atMs), id);
  }

  async untrackPending(kind: PendingKind, id: string): Promise<void> {
    await this.redis.connection.zrem(this.redis.keys.pendingSince(kind), id);
  }

  async listStalePending(kind: PendingKind, beforeMs: number, limit: number): Promise<string[]> {
    assertFiniteMs('beforeMs', beforeMs);
    return this.redis.connection.zrangebyscore(this.redis.keys.pendingSince(kind), '-inf', `(${beforeMs}`, 'LIMIT', 0, limit);
  }

  async removeStalePendingAgent(agentId: string, createdBeforeMs: number): Promise<boolean> {
    if (!isTaggable(agentId)) return false;
    const { scripts, keys: k } = this.redis;
    const removed = (await scripts.agentgateRemoveStalePendingAgent(
      ...k.agentRecord(agentId), msString(createdBeforeMs, 'createdBeforeMs'),
    )) as [string, string] | null;
    if (!removed) return false;
    // Only the instance that deleted the agent gets here, so the host-slot clean-up runs once.
    const [hostId, keyThumbprint] = removed;
    await scripts.agentgateForgetRemovedAgent(k.hostAgents(hostId), k.hostPendingAgents(hostId), k.hostAgentKey(hostId, keyThumbprint), agentId);
    await this.untrackPending('agent', agentId);
    return true;
  }

  async removeStalePendingHost(hostId: string, createdBeforeMs: number): Promise<boolean> {
    if (!isTaggable(hostId)) return false;
    const { scripts, keys: k } = this.redis;
    const removed = (await scripts.agentgateRemoveStalePendingHost(
      k.host(hostId), k.hostAgents(hostId), k.hostPendingAgents(hostId), msString(createdBeforeMs, 'createdBeforeMs'),
    )) as [string, string] | null;
    if (removed === null) return false;
    const [thumbprint, jwksUrl] = removed;
    await scripts.agentgateDeleteIfValue(k.hostByThumbprint(thumbprint), hostId);
    if (jwksUrl !== '') await scripts.agentgateDeleteIfValue(k.hostByJwksUrl(jwksUrlKey(jwksUrl)), hostId);
    await this.untrackPending('host', hostId);
    return true;
  }

  // ---- approvals ----------------------------------------------------------------------------

  async indexUserCode(lookupKey: string, agentId: string, untilMs: number): Promise<void> {
    assertTaggable('agent id', agentId);
    if (!isTaggable(lookupKey)) throw new Error('a user-code lookup key must be taggable');
    assertFiniteMs('untilMs', untilMs);
    await this.redis.connection.set(this.redis.keys.userCode(lookupKey), agentId, 'PXAT', String(Math.ceil(untilMs)));
  }

  async findAgentIdByUserCode(lookupKey: string): Promise<string | null> {
    if (!isTaggable(lookupKey)) return null;
    return this.redis.connection.get(this.redis.keys.userCode(lookupKey));
  }
}
