// The Redis store's people (the PersonRecords role of store.ts): a set of linked hosts and a hash
// of passkeys per person (keyed by a hash of the person's id, personKey in src/store/checks.ts, so
// any id is storable), and one key per signed-in session, whose expiry is its clean-up. None of
// them belongs to an agent's or host's slot, so each is a single key touched alone; the passkey
// writes that must check and write in one step are scripts on that one key.
import { hintHash, isTaggable, normalizeTtlMs, personKey } from '../checks.ts';
import type { PersonRecords } from '../store.ts';
import { RedisRole } from './parts.ts';

export class RedisPersonRecords extends RedisRole implements PersonRecords {
  async addPersonHost(personId: string, hostId: string): Promise<void> {
    await this.redis.connection.sadd(this.redis.keys.personHosts(personKey(personId)), hostId);
  }

  async removePersonHost(personId: string, hostId: string): Promise<void> {
    await this.redis.connection.srem(this.redis.keys.personHosts(personKey(personId)), hostId);
  }

  async listPersonHostIds(personId: string): Promise<string[]> {
    return (await this.redis.connection.smembers(this.redis.keys.personHosts(personKey(personId)))).sort();
  }

  async listPasskeys(personId: string): Promise<Array<{ id: string; json: string }>> {
    const all = await this.redis.connection.hgetall(this.redis.keys.personPasskeys(personKey(personId)));
    return Object.entries(all).map(([id, json]) => ({ id, json }));
  }

  async addPasskey(personId: string, passkeyId: string, json: string, max: number): Promise<'added' | 'exists' | 'full'> {
    const outcome = await this.redis.scripts.agentgateAddPasskey(this.redis.keys.personPasskeys(personKey(personId)), passkeyId, json, String(max));
    if (outcome === 'added' || outcome === 'exists' || outcome === 'full') return outcome;
    throw new Error(`unexpected answer from the passkey script: ${String(outcome)}`);
  }

  async updatePasskey(personId: string, passkeyId: string, json: string): Promise<boolean> {
    return (await this.redis.scripts.agentgateUpdatePasskey(this.redis.keys.personPasskeys(personKey(personId)), passkeyId, json)) === 1;
  }

  async removePasskey(personId: string, passkeyId: string): Promise<boolean> {
    return (await this.redis.connection.hdel(this.redis.keys.personPasskeys(personKey(personId)), passkeyId)) === 1;
  }

  // ---- how a person is reached, and what waits for them ----------------------------------------

  async savePersonContact(personId: string, email: string | undefined): Promise<void> {
    // Each key is in its own slot, so these are separate commands, not a transaction: a hint saved
    // without its address (or the reverse) names the person, or is simply not found.
    const { connection, keys } = this.redis;
    await connection.set(keys.loginHint(hintHash(personId)), personId);
    if (email === undefined) {
      await connection.del(keys.personEmail(personKey(personId)));
      return;
    }
    await connection.set(keys.personEmail(personKey(personId)), email);
    await connection.set(keys.loginHint(hintHash(email.toLowerCase())), personId);
  }

  async findPersonByHint(hintKey: string): Promise<string | null> {
    return this.redis.connection.get(this.redis.keys.loginHint(hintHash(hintKey)));
  }

  async getPersonEmail(personId: string): Promise<string | null> {
    return this.redis.connection.get(this.redis.keys.personEmail(personKey(personId)));
  }

  async addToInbox(personId: string, agentId: string, untilMs: number, maxItems: number): Promise<void> {
    await this.redis.scripts.agentgateAddToInbox(this.redis.keys.personInbox(personKey(personId)), agentId, String(Math.trunc(untilMs)), String(Math.max(1, Math.trunc(maxItems))));
  }

  async listInbox(personId: string, nowMs: number, limit: number): Promise<string[]> {
    const count = Math.max(1, Math.trunc(limit));
    return this.redis.connection.zrevrangebyscore(this.redis.keys.personInbox(personKey(personId)), '+inf', `(${Math.trunc(nowMs)}`, 'LIMIT', 0, count);
  }

  // ---- people's sessions ----------------------------------------------------------------------

  async saveSession(key: string, json: string, ttlMs: number): Promise<void> {
    if (!isTaggable(key)) throw new Error('a session key must be taggable');
    await this.redis.connection.set(this.redis.keys.personSession(key), json, 'PX', normalizeTtlMs(ttlMs));
  }

  async loadSession(key: string): Promise<string | null> {
    if (!isTaggable(key)) return null;
    return this.redis.connection.get(this.redis.keys.personSession(key));
  }

  async deleteSession(key: string): Promise<void> {
    if (!isTaggable(key)) return;
    await this.redis.connection.del(this.redis.keys.personSession(key));
  }
}
