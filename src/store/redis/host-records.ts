// The Redis store's hosts (the HostRecords role of store.ts): one hash per host, the thumbprint
// index (one key per thumbprint, in its own slot), and the set of the host's agents, which the
// agent records' admission script writes (agent-records.ts) in the host's slot.
import type { HostRecord, HostStatus } from '../../domain/types.ts';
import { assertTaggable, isTaggable, jwksUrlKey } from '../checks.ts';
import type { HostPatch, HostRecords, HostUpdate } from '../store.ts';
import { decodeHost, encodeHost, encodeHostPatch } from './codec.ts';
import { rotateHostKeyInRedis } from './host-rotation.ts';
import { RedisRole } from './parts.ts';

/** How often createHost re-reads a thumbprint index that another writer holds (see createHost). */
const THUMBPRINT_CLAIM_ATTEMPTS = 3;

export class RedisHostRecords extends RedisRole implements HostRecords {
  async getHost(hostId: string): Promise<HostRecord | null> {
    if (!isTaggable(hostId)) return null;
    const fields = await this.redis.connection.hgetall(this.redis.keys.host(hostId));
    return Object.keys(fields).length === 0 ? null : decodeHost(Object.entries(fields).flat());
  }

  /** Resolves through the thumbprint index, then confirms the host still holds that thumbprint,
   * so an index left behind by an interrupted rotation can never resolve to the wrong key. */
  async findHostByThumbprint(thumbprint: string): Promise<HostRecord | null> {
    if (!isTaggable(thumbprint)) return null;
    const hostId = await this.redis.connection.get(this.redis.keys.hostByThumbprint(thumbprint));
    if (hostId === null) return null;
    const host = await this.getHost(hostId);
    return host?.thumbprint === thumbprint ? host : null;
  }

  /** Resolves through the URL index, then confirms the host still has that URL (as above). */
  async findHostByJwksUrl(jwksUrl: string): Promise<HostRecord | null> {
    const hostId = await this.redis.connection.get(this.redis.keys.hostByJwksUrl(jwksUrlKey(jwksUrl)));
    if (hostId === null) return null;
    const host = await this.getHost(hostId);
    return host?.jwksUrl === jwksUrl ? host : null;
  }

  /**
   * Writes the host hash first (under its fresh id, which nobody else knows), then claims the
   * thumbprint index with SET NX. This order means the index only ever points at a complete host:
   * a crash between the steps leaves an unreachable hash, never an index to nothing. When the
   * index is taken, our hash is deleted and the existing host returned. The index may briefly name
   * a host that is mid-rotation onto this thumbprint, so that case is re-read a few times.
   */
  async createHost(host: HostRecord): Promise<{ host: HostRecord; created: boolean }> {
    const { connection, scripts, keys } = this.redis;
    assertTaggable('host id', host.id);
    assertTaggable('host thumbprint', host.thumbprint);
    const hostKey = keys.host(host.id);
    const wrote = await scripts.agentgateCreateHash(hostKey, ...encodeHost(host));
    if (wrote !== 1) throw new Error(`host id ${host.id} already exists`);
    const indexKey = keys.hostByThumbprint(host.thumbprint);
    for (let attempt = 1; attempt <= THUMBPRINT_CLAIM_ATTEMPTS; attempt++) {
      if ((await connection.set(indexKey, host.id, 'NX')) === 'OK') {
        if (host.jwksUrl === undefined) return { host: decodeHost(encodeHost(host)), created: true };
        return this.claimJwksUrl(host, hostKey, indexKey);
      }
      const existing = await this.findHostByThumbprint(host.thumbprint);
      if (existing) {
        await connection.del(hostKey);
        return { host: existing, created: false };
      }
      await sleep(20 * attempt);
    }
    await connection.del(hostKey);
    throw new Error(
      `host thumbprint ${host.thumbprint} is held by a host that does not use it (a rotation in flight or interrupted); retry later`,
    );
  }

  /**
   * The second index of a JWKS host, claimed after the thumbprint's: a URL names one host whichever
   * of its keys signs, so when another host holds it, both our claims are released and that host
   * returned, as for a thumbprint. Until this claim the host is reachable by its thumbprint only,
   * which is the key it signed its registration with: nothing it could not reach anyway.
   */
  private async claimJwksUrl(host: HostRecord, hostKey: string, thumbprintIndexKey: string): Promise<{ host: HostRecord; created: boolean }> {
    const { connection, scripts, keys } = this.redis;
    const urlIndexKey = keys.hostByJwksUrl(jwksUrlKey(host.jwksUrl!));
    if ((await connection.set(urlIndexKey, host.id, 'NX')) === 'OK') return { host: decodeHost(encodeHost(host)), created: true };
    const owner = await this.findHostByJwksUrl(host.jwksUrl!);
    await scripts.agentgateDeleteIfValue(thumbprintIndexKey, host.id);
    await connection.del(hostKey);
    if (!owner) throw new Error('the JWKS URL is held by a host that does not use it; retry later');
    return { host: owner, created: false };
  }

  async updateHost(hostId: string, patch: HostPatch, fromStatuses?: readonly HostStatus[]): Promise<HostUpdate> {
    if (!isTaggable(hostId)) return null;
    const allowed = fromStatuses === undefined ? '' : fromStatuses.join(',');
    if (fromStatuses !== undefined && fromStatuses.length === 0) throw new Error('updateHost: fromStatuses must name at least one status');
    const { set, unset } = encodeHostPatch(patch);
    const reply = (await this.redis.scripts.agentgateUpdateHost(this.redis.keys.host(hostId), allowed, String(unset.length), ...unset, ...set)) as [string, unknown] | null;
    if (reply === null) return null;
    return { host: decodeHost(reply[1]), updated: reply[0] === 'ok' };
  }

  /** See host-rotation.ts for the order of its steps and why every intermediate state is safe. */
  rotateHostKey(
    hostId: string,
    expectedThumbprint: string,
    next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
  ): Promise<'ok' | 'not_found' | 'conflict' | 'taken'> {
    return rotateHostKeyInRedis(this.redis, hostId, expectedThumbprint, next);
  }

  async listHostAgentIds(hostId: string): Promise<string[]> {
    if (!isTaggable(hostId)) return [];
    const ids = await this.redis.connection.smembers(this.redis.keys.hostAgents(hostId));
    return ids.sort();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
