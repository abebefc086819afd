// The Redis store's records outside agents and hosts, one key each: the approval page's user-code
// index, people's sessions, status-poll marks and shared secrets (all with an expiry), and people's
// passkeys and host links. None of them belongs to an agent's
// slot (a lookup by code or session comes before anyone knows the agent), so each is a single key
// touched alone, and Redis's own expiry is their clean-up.
import { randomBytes } from 'node:crypto';
import { assertFiniteMs, assertTaggable, isTaggable, normalizeTtlMs, personKey } from '../checks.ts';
import { RedisAuditRecords } from './audit-records.ts';
import type { RedisConnection } from './connection.ts';
import type { KeyLayout } from './keys.ts';
import type { PendingKind } from '../store.ts';

/**
 * The Redis store's side records; RedisStore extends this class, so they need no forwarding. It
 * extends the audit trail's records (audit-records.ts) in turn, for the same reason.
 */
export class RedisSideRecords extends RedisAuditRecords {
  readonly #connection: RedisConnection;
  readonly #keys: KeyLayout;

  constructor(connection: RedisConnection, keys: KeyLayout) {
    super(connection, keys);
    this.#connection = connection;
    this.#keys = keys;
  }

  async indexUserCode(lookupKey: string, agentId: string, untilMs: number): Promise<void> {
    assertTaggable('agent id', agentId);
    if (!isTaggable(lookupKey)) throw new Error('a user-code lookup key must be taggable');
    assertFiniteMs('untilMs', untilMs);
    await this.#connection.set(this.#keys.userCode(lookupKey), agentId, 'PXAT', String(Math.ceil(untilMs)));
  }

  async findAgentIdByUserCode(lookupKey: string): Promise<string | null> {
    if (!isTaggable(lookupKey)) return null;
    return this.#connection.get(this.#keys.userCode(lookupKey));
  }

  async sharedSecret(name: string): Promise<string> {
    const key = this.#keys.sharedSecret(name);
    await this.#connection.set(key, randomBytes(32).toString('base64url'), 'NX');
    const secret = await this.#connection.get(key);
    if (secret === null) throw new Error(`shared secret ${name} vanished right after it was set`);
    return secret;
  }

  async recordStatusPoll(agentId: string, windowMs: number): Promise<boolean> {
    if (!isTaggable(agentId)) return true;
    return (await this.#connection.set(this.#keys.statusPoll(agentId), '1', 'PX', normalizeTtlMs(windowMs), 'NX')) === 'OK';
  }

  async useChallenge(challengeKey: string, ttlMs: number): Promise<boolean> {
    if (!isTaggable(challengeKey)) throw new Error('a challenge key must be taggable');
    return (await this.#connection.set(this.#keys.usedChallenge(challengeKey), '1', 'PX', normalizeTtlMs(ttlMs), 'NX')) === 'OK';
  }

  async saveSession(key: string, json: string, ttlMs: number): Promise<void> {
    if (!isTaggable(key)) throw new Error('a session key must be taggable');
    await this.#connection.set(this.#keys.personSession(key), json, 'PX', normalizeTtlMs(ttlMs));
  }

  async loadSession(key: string): Promise<string | null> {
    if (!isTaggable(key)) return null;
    return this.#connection.get(this.#keys.personSession(key));
  }

  async trackPending(kind: PendingKind, id: string, atMs: number): Promise<void> {
    assertFiniteMs('atMs', atMs);
    await this.#connection.zadd(this.#keys.pendingSince(kind), String(atMs), id);
  }

  async untrackPending(kind: PendingKind, id: string): Promise<void> {
    await this.#connection.zrem(this.#keys.pendingSince(kind), id);
  }

  async listStalePending(kind: PendingKind, beforeMs: number, limit: number): Promise<string[]> {
    assertFiniteMs('beforeMs', beforeMs);
    return this.#connection.zrangebyscore(this.#keys.pendingSince(kind), '-inf', `(${beforeMs}`, 'LIMIT', 0, limit);
  }

  async addPersonHost(personId: string, hostId: string): Promise<void> {
    await this.#connection.sadd(this.#keys.personHosts(personKey(personId)), hostId);
  }

  async removePersonHost(personId: string, hostId: string): Promise<void> {
    await this.#connection.srem(this.#keys.personHosts(personKey(personId)), hostId);
  }

  async listPersonHostIds(personId: string): Promise<string[]> {
    return (await this.#connection.smembers(this.#keys.personHosts(personKey(personId)))).sort();
  }

  async listPasskeys(personId: string): Promise<Array<{ id: string; json: string }>> {
    const all = await this.#connection.hgetall(this.#keys.personPasskeys(personKey(personId)));
    return Object.entries(all).map(([id, json]) => ({ id, json }));
  }

  async addPasskey(personId: string, passkeyId: string, json: string, max: number): Promise<'added' | 'exists' | 'full'> {
    const scripts = this.#connection as unknown as { agentgateAddPasskey: (...keysThenArgs: string[]) => Promise<string> };
    const outcome = await scripts.agentgateAddPasskey(this.#keys.personPasskeys(personKey(personId)), passkeyId, json, String(max));
    if (outcome !== 'added' && outcome !== 'exists' && outcome !== 'full') throw new Error(`unexpected answer from the passkey script: ${String(outcome)}`);
    return outcome;
  }

  async updatePasskey(personId: string, passkeyId: string, json: string): Promise<boolean> {
    const scripts = this.#connection as unknown as { agentgateUpdatePasskey: (...keysThenArgs: string[]) => Promise<number> };
    return (await scripts.agentgateUpdatePasskey(this.#keys.personPasskeys(personKey(personId)), passkeyId, json)) === 1;
  }

  async removePasskey(personId: string, passkeyId: string): Promise<boolean> {
    return (await this.#connection.hdel(this.#keys.personPasskeys(personKey(personId)), passkeyId)) === 1;
  }

  async deleteSession(key: string): Promise<void> {
    if (!isTaggable(key)) return;
    await this.#connection.del(this.#keys.personSession(key));
  }
}
