// Which Redis failures are an outage (503, retry later) and which are bugs or corrupt data (500):
// docs/stances.md. The strings are the ones ioredis and Redis use.
import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/deadline.ts';
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
  ])('%s is an outage', (_what, error) => {
    expect(isRedisUnavailable(error)).toBe(true);
  });

  it.each([
    ['a script error', new Error('ERR Error running script (call to f_x): user_script:3: attempt to compare nil with number')],
    ['a decoding bug', new TypeError("Cannot read properties of undefined (reading 'status')")],
    ['a corrupt record', new Error('stored agent agt_x is malformed: mode')],
    ['a wrong type', new Error('WRONGTYPE Operation against a key holding the wrong kind of value')],
    ['not an error at all', 'boom'],
  ])('%s is not', (_what, error) => {
    expect(isRedisUnavailable(error)).toBe(false);
  });
});
