// The JWKS cache (src/auth/jwks-cache.ts), one test per rule of its header, each named after what
// the rule stops. The JWKS host is a fake whose answers the test sets, and whose fetches the test
// can hold open to see what waits on them; time is a manual clock. The only real waiting is
// settle(), which lets pending promise callbacks run, so no test depends on how fast the machine is.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { JWKS_CACHE_DEFAULTS, JwksCache, type JwksCacheSettings, type KeyLookup } from '../../src/auth/jwks-cache.ts';
import { JwksFetchError, type ValidatedJwkSet } from '../../src/auth/jwks-fetch.ts';
import { ManualClock } from '../../src/common/clock.ts';
import type { PublicJwk } from '../../src/domain/types.ts';

const URL_A = 'https://jwks.example/hosts/a/jwks.json';

const { ttlMs: TTL, staleMs: STALE, kidMissIntervalMs: KID_MISS, failureBackoffMs: BACKOFF } = JWKS_CACHE_DEFAULTS;

function jwk(kid: string): PublicJwk {
  return { kty: 'OKP', crv: 'Ed25519', x: `x-of-${kid}` };
}

function jwkSet(...kids: string[]): ValidatedJwkSet {
  return { keys: kids.map((kid) => ({ kid, jwk: jwk(kid) })) };
}

/** Lets every promise callback that is ready run (one turn of the event loop). */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A JWKS host under the test's control: what each URL serves, and whether fetches are held open. */
class FakeJwksHost {
  readonly calls: string[] = [];
  /** What each URL serves: a set, or something to throw. A URL not here answers 404. */
  readonly served = new Map<string, ValidatedJwkSet | { throws: unknown }>();
  private held = false;
  private waiting: Array<() => void> = [];

  readonly fetch = async (url: string): Promise<ValidatedJwkSet> => {
    this.calls.push(url);
    // What is served is read when a held fetch is released, so a test can change the JWKS while
    // a fetch is in flight.
    if (this.held) await new Promise<void>((resolve) => this.waiting.push(resolve));
    const served = this.served.get(url);
    if (served === undefined) throw new JwksFetchError('http_status', `JWKS URL ${new URL(url).origin}: answered HTTP 404; only 200 is accepted`);
    if ('throws' in served) throw served.throws;
    return served;
  };

  hold(): void {
    this.held = true;
  }

  release(): void {
    this.held = false;
    const waiting = this.waiting;
    this.waiting = [];
    for (const resolve of waiting) resolve();
  }

  fetchesOf(url: string): number {
    return this.calls.filter((call) => call === url).length;
  }
}

function setup(overrides: Partial<JwksCacheSettings> = {}) {
  const host = new FakeJwksHost();
  const clock = new ManualClock(1_000_000);
  const cache = new JwksCache({ ...JWKS_CACHE_DEFAULTS, fetch: host.fetch, now: () => clock.nowMs(), ...overrides });
  return { host, clock, cache };
}

/** How many of the promises have settled by now (without waiting for the rest). */
async function settledCount(promises: ReadonlyArray<Promise<unknown>>): Promise<number> {
  let settled = 0;
  for (const promise of promises) void promise.then(() => settled++, () => settled++);
  await settle();
  return settled;
}

const key = (kid: string): KeyLookup => ({ kind: 'key', jwk: jwk(kid) });

describe('JwksCache', () => {
  it('50 concurrent lookups of an uncached URL share one fetch (a request burst cannot multiply fetches)', async () => {
    const { host, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    host.hold();
    const lookups = Array.from({ length: 50 }, () => cache.lookup(URL_A, 'k1'));
    await settle();
    expect(host.calls).toHaveLength(1);
    host.release();
    for (const result of await Promise.all(lookups)) expect(result).toEqual(key('k1'));
    expect(cache.counters.fetches).toBe(1);
    expect(cache.counters.fetchSuccesses).toBe(1);
  });

  it('a fresh set answers lookups and peeks without fetching until ttlMs (the JWKS host is not asked per request)', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1', 'k2'));
    expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    for (const step of [0, 1, TTL / 2, TTL - 1]) {
      clock.set(1_000_000 + step);
      for (let i = 0; i < 100; i++) expect(await cache.lookup(URL_A, i % 2 === 0 ? 'k1' : 'k2')).toEqual(key(i % 2 === 0 ? 'k1' : 'k2'));
      expect(cache.peek(URL_A, 'k2')).toEqual(jwk('k2'));
    }
    expect(host.calls).toHaveLength(1);
    expect(cache.counters.servedStale).toBe(0);
  });

  it('peek never starts a fetch, neither for an unknown URL nor for an expired set', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    expect(cache.peek(URL_A, 'k1')).toBeUndefined();
    expect(host.calls).toHaveLength(0);
    await cache.lookup(URL_A, 'k1');
    clock.advance(TTL + STALE);
    expect(cache.peek(URL_A, 'k1')).toBeUndefined();
    await settle();
    expect(host.calls).toHaveLength(1);
  });

  it('a stale set answers at once while exactly one background refresh runs (a slow JWKS host cannot delay requests)', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    clock.advance(TTL);
    // The refresh is held open: if any lookup waited on it, it would not have settled below.
    host.hold();
    const lookups = Array.from({ length: 20 }, () => cache.lookup(URL_A, 'k1'));
    expect(await settledCount(lookups)).toBe(20);
    for (const result of await Promise.all(lookups)) expect(result).toEqual(key('k1'));
    expect(cache.peek(URL_A, 'k1')).toEqual(jwk('k1'));
    expect(host.calls).toHaveLength(2);
    expect(cache.counters.servedStale).toBe(21);
    host.release();
    await settle();
    expect(cache.counters.fetchSuccesses).toBe(2);
  });

  it('a key removed from the JWKS stops being accepted once the background refresh lands', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('old', 'new'));
    expect(await cache.lookup(URL_A, 'old')).toEqual(key('old'));
    // The host drops the old key (it leaked, say); until the set is stale, the cache still has it.
    host.served.set(URL_A, jwkSet('new'));
    clock.advance(TTL);
    expect(await cache.lookup(URL_A, 'old')).toEqual(key('old'));
    await settle();
    // The refresh has landed: the old key is gone for peek and lookup alike, well before ttl + stale.
    expect(cache.peek(URL_A, 'old')).toBeUndefined();
    expect(await cache.lookup(URL_A, 'old')).toEqual({ kind: 'unknown_kid' });
    expect(await cache.lookup(URL_A, 'new')).toEqual(key('new'));
  });

  it('when refreshes fail, a stale set serves only until ttlMs + staleMs, then lookups fail closed and never fall back to an older set', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('v1'));
    await cache.lookup(URL_A, 'v1');
    // A successful refresh replaces v1 by v2, fetched (started) at t = TTL.
    host.served.set(URL_A, jwkSet('v2'));
    clock.advance(TTL);
    await cache.lookup(URL_A, 'v1');
    await settle();
    expect(cache.peek(URL_A, 'v2')).toEqual(jwk('v2'));
    // From now on the JWKS host is down.
    host.served.set(URL_A, { throws: new JwksFetchError('network', 'JWKS URL https://jwks.example: the request to 192.0.2.1 failed (ECONNREFUSED)') });
    clock.advance(TTL);
    for (let t = 0; t < STALE; t += BACKOFF / 2) {
      expect(await cache.lookup(URL_A, 'v2')).toEqual(key('v2'));
      await settle();
      clock.advance(BACKOFF / 2);
    }
    expect(cache.counters.fetchFailures).toBeGreaterThan(0);
    // Exactly ttl + stale after v2's fetch started: nothing answers, not v2 and not the older v1.
    clock.set(1_000_000 + TTL + TTL + STALE);
    expect(cache.peek(URL_A, 'v2')).toBeUndefined();
    const v2 = await cache.lookup(URL_A, 'v2');
    const v1 = await cache.lookup(URL_A, 'v1');
    expect(v2.kind).toBe('unavailable');
    expect(v1.kind).toBe('unavailable');
  });

  it('past ttlMs + staleMs an expired set is never served: lookups wait for one shared refetch, and a failed refetch fails closed', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    clock.advance(TTL + STALE);
    host.hold();
    const waiting = Array.from({ length: 50 }, () => cache.lookup(URL_A, 'k1'));
    expect(await settledCount(waiting)).toBe(0);
    expect(host.calls).toHaveLength(2);
    host.release();
    for (const result of await Promise.all(waiting)) expect(result).toEqual(key('k1'));

    clock.advance(TTL + STALE);
    host.served.set(URL_A, { throws: new JwksFetchError('timeout', 'JWKS URL https://jwks.example: the fetch did not finish within 5000 ms') });
    const failing = await Promise.all(Array.from({ length: 50 }, () => cache.lookup(URL_A, 'k1')));
    for (const result of failing) expect(result).toEqual({ kind: 'unavailable', reason: 'JWKS URL https://jwks.example: the fetch did not finish within 5000 ms' });
    expect(host.calls).toHaveLength(3);
  });

  it('a kid missing from a fresh set triggers one refetch, so a key the host has just rotated in is accepted', async () => {
    const { host, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    host.served.set(URL_A, jwkSet('k1', 'k2'));
    expect(await cache.lookup(URL_A, 'k2')).toEqual(key('k2'));
    expect(host.calls).toHaveLength(2);
    // A kid still missing after that refetch is unknown, and asking again within the interval
    // answers at once without another fetch.
    expect(await cache.lookup(URL_A, 'k3')).toEqual({ kind: 'unknown_kid' });
    expect(await cache.lookup(URL_A, 'k3')).toEqual({ kind: 'unknown_kid' });
    expect(host.calls).toHaveLength(2);
  });

  it('concurrent requests signed with a newly rotated key all share the one refetch (none is refused for arriving second)', async () => {
    const { host, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    host.served.set(URL_A, jwkSet('k1', 'k2'));
    host.hold();
    const lookups = Array.from({ length: 20 }, () => cache.lookup(URL_A, 'k2'));
    await settle();
    host.release();
    for (const result of await Promise.all(lookups)) expect(result).toEqual(key('k2'));
    expect(host.calls).toHaveLength(2);
  });

  it('1000 lookups with random kids (a kid-spraying attacker) cause at most one refetch per interval', async () => {
    // A long TTL keeps stale refreshes out of the count: only kid misses can cause fetches here.
    const { host, clock, cache } = setup({ ttlMs: 60 * 60_000 });
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    const intervals = 10;
    for (let i = 0; i < intervals; i++) {
      clock.advance(KID_MISS);
      const before = host.calls.length;
      // Half sent one after another, half all at once.
      for (let j = 0; j < 500; j++) expect(await cache.lookup(URL_A, randomUUID())).toEqual({ kind: 'unknown_kid' });
      const burst = await Promise.all(Array.from({ length: 500 }, () => cache.lookup(URL_A, randomUUID())));
      for (const result of burst) expect(result).toEqual({ kind: 'unknown_kid' });
      expect(host.calls.length - before).toBeLessThanOrEqual(1);
      // The legitimate key keeps working throughout.
      expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    }
    expect(host.calls.length).toBeLessThanOrEqual(1 + intervals);
  });

  it('new URLs cannot start more than maxFetchesPerMinute fetches in any rolling minute (a URL-spraying caller is refused, never queued)', async () => {
    const { host, cache } = setup({ maxFetchesPerMinute: 3 });
    const urls = Array.from({ length: 10 }, (_, i) => `https://jwks.example/spray/${i}`);
    for (const url of urls) host.served.set(url, jwkSet('k'));
    const results = await Promise.all(urls.map((url) => cache.lookup(url, 'k')));
    expect(results.filter((result) => result.kind === 'key')).toHaveLength(3);
    const refused = results.filter((result) => result.kind === 'unavailable');
    expect(refused).toHaveLength(7);
    for (const result of refused) expect(result.kind === 'unavailable' && result.reason).toMatch(/rate limited/);
    expect(host.calls).toHaveLength(3);
    expect(cache.counters.rateLimited).toBe(7);

    // The window rolls: with starts at 0, 20 s and 40 s, one more is allowed at 60 s, not before.
    const rolling = setup({ maxFetchesPerMinute: 3 });
    const at = (ms: number) => rolling.clock.set(1_000_000 + ms);
    const fetchAt = async (ms: number, i: number) => {
      at(ms);
      rolling.host.served.set(`https://jwks.example/r/${i}`, jwkSet('k'));
      return (await rolling.cache.lookup(`https://jwks.example/r/${i}`, 'k')).kind;
    };
    expect(await fetchAt(0, 0)).toBe('key');
    expect(await fetchAt(20_000, 1)).toBe('key');
    expect(await fetchAt(40_000, 2)).toBe('key');
    expect(await fetchAt(59_999, 3)).toBe('unavailable');
    expect(await fetchAt(60_000, 4)).toBe('key');
    expect(await fetchAt(61_000, 5)).toBe('unavailable');
    expect(await fetchAt(80_000, 6)).toBe('key');
    expect(rolling.host.calls).toHaveLength(5);
  });

  it('the rate limit never fails a cached key: a stale set whose refresh is refused keeps answering', async () => {
    const { host, clock, cache } = setup({ maxFetchesPerMinute: 1 });
    host.served.set(URL_A, jwkSet('k1'));
    host.served.set('https://jwks.example/other', jwkSet('k'));
    await cache.lookup(URL_A, 'k1');
    clock.advance(TTL);
    // Another URL takes this minute's only fetch; URL_A's refresh is then refused.
    expect((await cache.lookup('https://jwks.example/other', 'k')).kind).toBe('key');
    expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    expect(cache.counters.rateLimited).toBe(1);
    expect(host.calls).toHaveLength(2);
  });

  it('a dead JWKS host is not fetched again within failureBackoffMs (negative caching)', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, { throws: new JwksFetchError('network', 'JWKS URL https://jwks.example: the request to 192.0.2.1 failed (ECONNREFUSED)') });
    expect((await cache.lookup(URL_A, 'k1')).kind).toBe('unavailable');
    clock.advance(BACKOFF - 1);
    for (let i = 0; i < 100; i++) {
      const result = await cache.lookup(URL_A, `k${i}`);
      expect(result.kind).toBe('unavailable');
      expect(result.kind === 'unavailable' && result.reason).toMatch(/ECONNREFUSED.*not retried/);
    }
    expect(host.calls).toHaveLength(1);
    expect(cache.counters.fetchFailures).toBe(1);
    // Once the backoff has passed, one retry; it succeeds, and the key is served.
    clock.advance(1);
    host.served.set(URL_A, jwkSet('k1'));
    expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    expect(host.calls).toHaveLength(2);
  });

  it('with maxEntries 3, a fourth URL evicts the least recently used one (memory stays bounded)', async () => {
    const { host, cache } = setup({ maxEntries: 3 });
    const [u1, u2, u3, u4] = [1, 2, 3, 4].map((i) => `https://jwks.example/lru/${i}`) as [string, string, string, string];
    for (const url of [u1, u2, u3, u4]) host.served.set(url, jwkSet('k'));
    await cache.lookup(u1, 'k');
    await cache.lookup(u2, 'k');
    await cache.lookup(u3, 'k');
    // u1 is used again, so u2 is now the least recently used.
    await cache.lookup(u1, 'k');
    await cache.lookup(u4, 'k');
    expect(cache.size).toBe(3);
    expect(cache.peek(u2, 'k')).toBeUndefined();
    for (const url of [u1, u3, u4]) expect(cache.peek(url, 'k')).toEqual(jwk('k'));
    expect(host.fetchesOf(u2)).toBe(1);
    expect(await cache.lookup(u2, 'k')).toEqual(key('k'));
    expect(host.fetchesOf(u2)).toBe(2);
    expect(cache.size).toBe(3);
  });

  it('refused lookups of unknown URLs leave nothing behind, so they cannot push live URLs out of the cache', async () => {
    const { host, cache } = setup({ maxEntries: 3, maxFetchesPerMinute: 1 });
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    for (let i = 0; i < 1000; i++) expect((await cache.lookup(`https://jwks.example/spray/${i}`, 'k')).kind).toBe('unavailable');
    expect(cache.size).toBe(1);
    expect(cache.peek(URL_A, 'k1')).toEqual(jwk('k1'));
    expect(host.calls).toHaveLength(1);
  });

  it('forget drops a URL at once, and a refresh in flight for it neither answers with a key nor brings it back (revocation)', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    clock.advance(TTL);
    host.hold();
    expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    // This lookup's kid is not in the stale set, so it waits on the refresh.
    const waiting = cache.lookup(URL_A, 'k2');
    host.served.set(URL_A, jwkSet('k1', 'k2'));
    cache.forget(URL_A);
    expect(cache.peek(URL_A, 'k1')).toBeUndefined();
    host.release();
    expect(await waiting).toEqual({ kind: 'unavailable', reason: 'the JWKS URL was forgotten while it was being fetched' });
    expect(cache.size).toBe(0);
    expect(cache.peek(URL_A, 'k1')).toBeUndefined();
    // A later lookup fetches afresh.
    expect(await cache.lookup(URL_A, 'k2')).toEqual(key('k2'));
    expect(host.calls).toHaveLength(3);
  });

  it("a failed fetch's reason never carries the URL's path or query (they often hold tokens, and reasons reach logs)", async () => {
    const secretUrl = 'https://jwks.example/tenant/secret-path/jwks.json?token=s3cret';
    const throwers: Array<[string, () => Promise<ValidatedJwkSet>, string]> = [
      ['a JwksFetchError', () => Promise.reject(new JwksFetchError('http_status', 'JWKS URL https://jwks.example: answered HTTP 500; only 200 is accepted')), 'JWKS URL https://jwks.example: answered HTTP 500; only 200 is accepted'],
      ['an Error naming the URL', () => Promise.reject(new Error(`GET ${secretUrl} failed`)), 'the JWKS fetch failed unexpectedly'],
      ['a thrown string', () => Promise.reject(secretUrl), 'the JWKS fetch failed unexpectedly'],
      ['undefined', () => Promise.reject(undefined), 'the JWKS fetch failed unexpectedly'],
      ['a synchronous throw', () => {
        throw new Error(secretUrl);
      }, 'the JWKS fetch failed unexpectedly'],
      ['a set that repeats a kid', () => Promise.resolve({ keys: [{ kid: 'k', jwk: jwk('k') }, { kid: 'k', jwk: jwk('other') }] }), 'the JWK Set repeats a "kid"'],
    ];
    for (const [what, fetch, reason] of throwers) {
      const clock = new ManualClock(0);
      const cache = new JwksCache({ ...JWKS_CACHE_DEFAULTS, fetch, now: () => clock.nowMs() });
      // Two at once: single flight holds even for a fetch that throws before returning a promise.
      const [first, second] = await Promise.all([cache.lookup(secretUrl, 'k'), cache.lookup(secretUrl, 'k')]);
      expect(first, what).toEqual({ kind: 'unavailable', reason });
      expect(second, what).toEqual(first);
      expect(cache.counters.fetches, what).toBe(1);
      // The backoff's answer repeats the reason, so it must be just as clean.
      const backedOff = await cache.lookup(secretUrl, 'k');
      for (const result of [first, backedOff]) {
        const text = JSON.stringify(result);
        expect(text, what).not.toContain('secret-path');
        expect(text, what).not.toContain('s3cret');
      }
      // And once the backoff has passed, the URL is fetched again: a failed fetch, even one that
      // threw synchronously, does not stay recorded as the fetch in flight.
      clock.advance(JWKS_CACHE_DEFAULTS.failureBackoffMs);
      expect((await cache.lookup(secretUrl, 'k')).kind, what).toBe('unavailable');
      expect(cache.counters.fetches, what).toBe(2);
    }
  });

  it('kids are compared exactly: a case variant or a prototype member name matches no key', async () => {
    const { host, cache } = setup();
    host.served.set(URL_A, jwkSet('Key-1'));
    expect(await cache.lookup(URL_A, 'Key-1')).toEqual(key('Key-1'));
    for (const kid of ['key-1', 'KEY-1', 'Key-1 ', '__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      expect(await cache.lookup(URL_A, kid), kid).toEqual({ kind: 'unknown_kid' });
      expect(cache.peek(URL_A, kid), kid).toBeUndefined();
    }
  });

  it('a caller cannot alter a cached key for later requests (keys are handed out frozen)', async () => {
    const { host, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    const result = await cache.lookup(URL_A, 'k1');
    if (result.kind !== 'key') throw new Error('expected a key');
    expect(() => {
      result.jwk.x = 'attacker-chosen';
    }).toThrow(TypeError);
    expect(cache.peek(URL_A, 'k1')).toEqual(jwk('k1'));
  });

  it('a clock stepped back cannot make a set live longer than ttlMs + staleMs', async () => {
    const { host, clock, cache } = setup();
    host.served.set(URL_A, jwkSet('k1'));
    await cache.lookup(URL_A, 'k1');
    clock.advance(-60 * 60_000);
    // The set's fetch time now lies in the future, which counts as long ago: the set is refetched.
    expect(cache.peek(URL_A, 'k1')).toBeUndefined();
    expect(await cache.lookup(URL_A, 'k1')).toEqual(key('k1'));
    expect(host.calls).toHaveLength(2);
  });

  it('settings that would disable a bound are refused at construction', () => {
    const host = new FakeJwksHost();
    const base: JwksCacheSettings = { ...JWKS_CACHE_DEFAULTS, fetch: host.fetch, now: () => 0 };
    const bad: Array<Partial<JwksCacheSettings>> = [
      { ttlMs: Number.NaN },
      { staleMs: -1 },
      { kidMissIntervalMs: Number.POSITIVE_INFINITY },
      { failureBackoffMs: -5 },
      { maxFetchesPerMinute: 0 },
      { maxFetchesPerMinute: 1.5 },
      { maxEntries: 0 },
      { maxEntries: Number.NaN },
    ];
    for (const override of bad) expect(() => new JwksCache({ ...base, ...override }), JSON.stringify(override)).toThrow(/JwksCache/);
    expect(() => new JwksCache(base)).not.toThrow();
  });
});
