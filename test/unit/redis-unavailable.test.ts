// Which Redis failures are an outage (503, retry later) and which are bugs or corrupt data (500):
// docs/stances.md. The strings are the ones ioredis and Redis use.
import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/common/deadline.ts';
import { isRedisUnavailable } from '../../src/store/redis/connection.ts';

const named = (name: string, message: string) => Object.assign(new Error(message), { name });
const withCode = (code: string) => Object.assign(new Error(`connect ${code} 127.0.0.1:6379`), { code });

describe('isRedisUnavailable', () => {
  it.each([
    ['a command timeout', new Error('Command timed out')],
    ['a closed connection', new Error('Connection is closed.')],
    ['a command while disconnected', new Error("Stream isn't writeable and enableOfflineQueue options is false")],
    ['retries exhausted', named('MaxRetriesPerRequestError', 'Reached the max retries per request limit (which is 1).')],
    ['a refused connection', withCode('ECONNREFUSED')],
    ['a reset connection', withCode('ECONNRESET')],
    ['a cluster that is down', new Error('CLUSTERDOWN The cluster is down')],
    ['a node still loading', new Error('LOADING Redis is loading the dataset in memory')],
    ['a full Redis under noeviction', new Error("OOM command not allowed when used memory > 'maxmemory'.")],
    ['our own deadline', new DeadlineError('storage call getAgent did not finish within 2100 ms')],
    // A failover, as ioredis passes it up: before these were classified, MOVED came back as a 500.
    ['a redirection to a master that died', named('ReplyError', 'MOVED 5474 127.0.0.1:7001')],
    ['an ASK to a node mid-migration that died', named('ReplyError', 'ASK 5474 127.0.0.1:7002')],
    ['a slot being moved', new Error('TRYAGAIN Multiple keys request during rehashing of slot')],
    ['redirections that never settle', new Error('Too many Cluster redirections. Last error: Error: Connection is closed.')],
    ['a cluster whose slot map is not read yet', new Error("Cluster isn't ready and enableOfflineQueue options is false")],
    ['a cluster none of whose seed nodes answers', named('ClusterAllFailedError', 'Failed to refresh slots cache.')],
    ['a replica that lost its master', new Error('MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to no')],
    ['a write to a demoted master', new Error("READONLY You can't write against a read only replica.")],
    ['a master refusing writes for want of replicas', new Error('NOREPLICAS Not enough good replicas to write.')],
    ['a blocked command a failover released', new Error('UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)')],
    ['no sentinel answering', new Error('All sentinels are unreachable. Retrying from scratch after 100ms.')],
  ])('%s is an outage', (_what, error) => {
    expect(isRedisUnavailable(error)).toBe(true);
  });

  it.each([
    ['a script error', new Error('ERR Error running script (call to f_x): user_script:3: attempt to compare nil with number')],
    ['a decoding bug', new TypeError("Cannot read properties of undefined (reading 'status')")],
    ['a corrupt record', new Error('stored agent agt_x is malformed: mode')],
    ['a wrong type', new Error('WRONGTYPE Operation against a key holding the wrong kind of value')],
    ['keys in two slots (a bug in a script\'s keys)', new Error("CROSSSLOT Keys in request don't hash to the same slot")],
    ['a word that merely starts like a code', new Error('MOVEDX is not a Redis reply')],
    ['not an error at all', 'boom'],
  ])('%s is not', (_what, error) => {
    expect(isRedisUnavailable(error)).toBe(false);
  });
});
