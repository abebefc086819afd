// Host key rotation on Redis (rotateHostKey of the HostRecords role, for host-records.ts): the host
// hash and the two thumbprint indexes live in three different slots, so it is a sequence of
// single-slot steps, ordered so that every state between them is safe.
import type { HostRecord } from '../../domain/types.ts';
import { assertTaggable, isTaggable } from '../checks.ts';
import { encodeHostKey } from './codec.ts';
import type { RedisConnection } from './connection.ts';
import type { RedisParts } from './parts.ts';

/**
 * The host hash and the two thumbprint indexes live in three different slots, so rotation is a
 * sequence whose every intermediate state is safe:
 *   1. claim the new thumbprint's index with SET NX ('taken' if another host owns it); from here
 *      on no other host can register or rotate onto that key;
 *   2. compare-and-set the thumbprint in the host hash ('conflict' or 'not_found' if it is no
 *      longer the expected one), releasing the index claimed in step 1 on failure;
 *   3. delete the old thumbprint's index, only if it still points at this host.
 * A crash after 1 leaves the new index pointing at a host that does not use it, and a crash after
 * 2 leaves the old index behind; findHostByThumbprint checks the host's own thumbprint, so
 * neither ever resolves to the wrong key.
 */
export async function rotateHostKeyInRedis(
  redis: RedisParts,
  hostId: string,
  expectedThumbprint: string,
  next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
): Promise<'ok' | 'not_found' | 'conflict' | 'taken'> {
  if (!isTaggable(hostId)) return 'not_found';
  assertTaggable('host thumbprint', next.thumbprint);
  const newIndex = redis.keys.hostByThumbprint(next.thumbprint);
  const claim = next.thumbprint === expectedThumbprint ? 'ours' : await claimThumbprint(redis.connection, newIndex, hostId);
  if (claim === 'taken') return 'taken';
  const [outcome, current] = (await redis.scripts.agentgateRotateHostKey(
    redis.keys.host(hostId),
    expectedThumbprint,
    ...encodeHostKey(next),
  )) as [string, string | undefined];
  if (outcome !== 'ok') {
    // Release only a claim this call made, and never while the host actually uses that key
    // (a concurrent rotation of the same host onto the same key may have won).
    if (claim === 'claimed' && current !== next.thumbprint) {
      await redis.scripts.agentgateDeleteIfValue(newIndex, hostId);
    }
    return outcome === 'not_found' ? 'not_found' : 'conflict';
  }
  if (next.thumbprint !== expectedThumbprint) {
    await redis.scripts.agentgateDeleteIfValue(redis.keys.hostByThumbprint(expectedThumbprint), hostId);
  }
  return 'ok';
}

/** Step 1 of rotateHostKey: 'claimed' by this call, 'ours' already (a retry), or 'taken'. */
async function claimThumbprint(connection: RedisConnection, indexKey: string, hostId: string): Promise<'claimed' | 'ours' | 'taken'> {
  for (let attempt = 0; attempt < 2; attempt++) {
    if ((await connection.set(indexKey, hostId, 'NX')) === 'OK') return 'claimed';
    const owner = await connection.get(indexKey);
    if (owner === hostId) return 'ours';
    if (owner !== null) return 'taken';
    // The owner released the index between our two commands; try the claim once more.
  }
  return 'taken';
}
