// The cache in front of the JWKS fetcher (src/auth/jwks-fetch.ts). Hosts and agents may deliver
// their public keys as a JWKS URL, and every authenticated request then needs the key that the
// JWT header's kid names at that URL. That is the hot path (execute runs at high throughput), so a
// cached key is answered without waiting on any fetch, and because the URLs and kids come from
// callers we do not trust, everything the cache does on their behalf is bounded:
//
//   1. Single flight: however many lookups need a URL fetched at once, one fetch runs and they all
//      share its outcome.
//   2. Fresh: for ttlMs after a fetch started, its set answers without fetching.
//   3. Stale while revalidate: from ttlMs to ttlMs + staleMs the set still answers at once, and one
//      background refresh runs; the refreshed set replaces the old one when it lands. If refreshes
//      keep failing, the set stops answering at ttlMs + staleMs and lookups fail closed; a set older
//      than the newest successful one is never kept, so it can never be served.
//   4. Expired (past ttlMs + staleMs) or never fetched: the lookup waits for a fetch (single flight).
//   5. A kid missing from a usable set (the host may have just rotated) triggers one refetch, and
//      then at most one more per kidMissIntervalMs for that URL; misses in between answer
//      "unknown kid" at once, so an attacker spraying random kids cannot make us hammer the host.
//   6. One budget over all URLs: at most maxFetchesPerMinute fetch starts in any rolling minute;
//      a lookup that needs a fetch beyond it fails closed at once and never queues.
//   7. Negative caching: after a fetch of a URL fails, no fetch of it starts for failureBackoffMs.
//   8. At most maxEntries URLs, least recently used evicted first. Every collection is bounded: the
//      entries by maxEntries, each set's keys by MAX_KEYS_PER_SET (validated upstream), the rate
//      limiter's record by maxFetchesPerMinute, and the in-flight fetches (held on their entries)
//      by the budget. Kid-miss and backoff state live on the entry, so they go when it goes.
//   9. Whatever a fetch throws becomes "unavailable" with a reason that never holds the URL's path
//      or query (JwksFetchError messages name the origin only; anything else gets a fixed text).
//  10. Kids are compared exactly (case-sensitive, in a Map, so "__proto__" is just a string).
//
// Revocation bound: a key removed from a JWKS stops being accepted at most ttlMs + staleMs after
// the removal, and sooner, at the first successful refresh after ttlMs. A set's age is counted from
// the moment its fetch STARTED (the document may have been read at any point of the fetch), which is
// what makes this bound exact rather than "plus however long the fetch took". forget(url) drops a
// URL at once, and a fetch of it that was in flight neither brings it back nor answers its waiters
// with a key.
//
// A recorded time later than now() (a wall clock stepped back) counts as long ago: the set is
// treated as expired and refetched (within the budget), so stepping the clock back can never make
// a set live longer. The cost is one refetch per URL, and one fresh budget window, after the step.
//
// The fetch function must settle: fetchJwks always does within its own timeoutMs, so a lookup
// waiting on a fetch is bounded by that deadline; this module adds no timers of its own.
import type { PublicJwk } from '../domain/types.ts';
import { JwksFetchError, type ValidatedJwkSet } from './jwks-fetch.ts';

export interface JwksCacheSettings {
  /** Fetches a set (fetchJwks bound to its settings in production; a fake in tests). */
  fetch: (url: string) => Promise<ValidatedJwkSet>;
  now: () => number;
  /** A set is fresh this long after it was fetched (default 5 min). */
  ttlMs: number;
  /** After ttlMs, a stale set still serves for at most this long while one background refresh runs (default 1 min); past it, a lookup waits for a refetch. */
  staleMs: number;
  /** A kid not in a cached set triggers at most one refetch of that URL per this interval (default 30 s); misses in between answer "unknown kid" at once. */
  kidMissIntervalMs: number;
  /** Fetches this cache may start per minute in all (default 60); beyond it, a lookup that needs a fetch fails closed (unavailable), never queues. */
  maxFetchesPerMinute: number;
  /** URLs cached at most (default 1000); the least recently used go first. */
  maxEntries: number;
  /** A failed fetch is not retried for this long for the same URL (negative caching, default 10 s), so a dead JWKS host is not hammered. */
  failureBackoffMs: number;
}

/** The settings a caller uses unless configured otherwise (everything but fetch and now). */
export const JWKS_CACHE_DEFAULTS: Readonly<Omit<JwksCacheSettings, 'fetch' | 'now'>> = Object.freeze({
  ttlMs: 5 * 60_000,
  staleMs: 60_000,
  kidMissIntervalMs: 30_000,
  maxFetchesPerMinute: 60,
  maxEntries: 1000,
  failureBackoffMs: 10_000,
});

export type KeyLookup =
  | { kind: 'key'; jwk: PublicJwk }
  | { kind: 'unknown_kid' }
  | { kind: 'unavailable'; reason: string };

export interface JwksCacheCounters {
  /** Fetches started. */
  fetches: number;
  /** Fetches that delivered a set. */
  fetchSuccesses: number;
  /** Fetches that failed (threw anything). */
  fetchFailures: number;
  /** Fetches refused by the global budget (each refusal counted, including background refreshes). */
  rateLimited: number;
  /** Keys answered from a stale set (past ttlMs, within staleMs), by lookup or peek. */
  servedStale: number;
}

/** The rate limiter's window: the budget counts fetch starts in any rolling minute. */
const WINDOW_MS = 60_000;

/** The reason given for anything a fetch throws that is not a JwksFetchError: its text could hold the URL. */
const UNEXPECTED_FAILURE = 'the JWKS fetch failed unexpectedly';

/** The reason given to lookups that waited on a fetch of a URL forgotten meanwhile. */
const FORGOTTEN = 'the JWKS URL was forgotten while it was being fetched';

/** What one fetch came to, as every lookup sharing it sees it. */
type FetchOutcome = { ok: true; keys: ReadonlyMap<string, PublicJwk> } | { ok: false; reason: string };

/** What a lookup that needs a fetch gets: the fetch (started now or already running), or a refusal. */
type FetchTicket = { kind: 'fetching'; outcome: Promise<FetchOutcome> } | { kind: 'refused'; reason: string };

/** Everything known about one URL. Created only when a fetch of it starts. */
interface Entry {
  readonly url: string;
  /** The newest set fetched successfully, kid to key; undefined until the first success. */
  keys: ReadonlyMap<string, PublicJwk> | undefined;
  /** When the fetch that delivered `keys` started: the set's age is counted from here. */
  keysFetchStartedAt: number;
  /** The fetch of this URL now running, shared by every lookup that needs one (single flight). */
  inflight: Promise<FetchOutcome> | undefined;
  /** When the last fetch failed, if the last fetch to finish failed (backoff runs from here). */
  failedAt: number | undefined;
  failureReason: string;
  /** When a kid miss last started a refetch (the kid-miss interval runs from here). */
  kidMissFetchAt: number | undefined;
  /** Set by forget(), so a fetch in flight for a forgotten URL answers no key. */
  forgotten: boolean;
}

/**
 * Milliseconds from `since` to `now`. A `since` later than `now` (the clock stepped back), or a
 * value that is not a number, counts as infinitely long ago: see the module header for why that
 * is the safe reading for every use here.
 */
function elapsed(since: number, now: number): number {
  const ms = now - since;
  return ms >= 0 ? ms : Number.POSITIVE_INFINITY;
}

/**
 * The global fetch budget: an exact rolling window kept as a ring of the last `perMinute` start
 * times, so its memory is at most `perMinute` numbers however many lookups are refused. A fetch may
 * start when fewer than `perMinute` starts happened in the last minute, which is exactly when the
 * oldest of the last `perMinute` starts is a minute old or more.
 */
class FetchBudget {
  private readonly perMinute: number;
  private readonly starts: number[] = [];
  /** Once the ring is full, the index of its oldest start (the one the next start replaces). */
  private oldest = 0;

  constructor(perMinute: number) {
    this.perMinute = perMinute;
  }

  /** Takes one start if the budget allows it now. */
  take(now: number): boolean {
    if (this.starts.length < this.perMinute) {
      this.starts.push(now);
      return true;
    }
    if (elapsed(this.starts[this.oldest] ?? 0, now) < WINDOW_MS) return false;
    this.starts[this.oldest] = now;
    this.oldest = (this.oldest + 1) % this.perMinute;
    return true;
  }
}

/** The reason a failed fetch gives: the JwksFetchError message (origin only), or a fixed text. */
function failureReason(error: unknown): string {
  return error instanceof JwksFetchError ? error.message : UNEXPECTED_FAILURE;
}

/**
 * The set as a Map from kid to a frozen copy of its key. Frozen, because the same object is handed
 * to every caller: one that mutated it would otherwise change the key for all later requests.
 * Upstream validation already refuses repeated kids; a set that repeats one anyway is refused here
 * too rather than letting the last one silently win.
 */
function toKeyMap(set: ValidatedJwkSet): ReadonlyMap<string, PublicJwk> {
  const keys = new Map<string, PublicJwk>();
  for (const { kid, jwk } of set.keys) {
    if (keys.has(kid)) throw new JwksFetchError('invalid_jwks', 'the JWK Set repeats a "kid"');
    keys.set(kid, Object.freeze({ ...jwk }));
  }
  return keys;
}

function checkSetting(name: string, value: number, minimum: number, integer: boolean): void {
  if (!Number.isFinite(value) || value < minimum || (integer && !Number.isInteger(value))) {
    throw new Error(`JwksCache: ${name} must be ${integer ? 'an integer' : 'a finite number'} of at least ${minimum}, got ${value}`);
  }
}

export class JwksCache {
  private readonly fetchSet: (url: string) => Promise<ValidatedJwkSet>;
  private readonly now: () => number;
  private readonly ttlMs: number;
  private readonly usableMs: number;
  private readonly kidMissIntervalMs: number;
  private readonly maxEntries: number;
  private readonly failureBackoffMs: number;
  private readonly maxFetchesPerMinute: number;
  private readonly budget: FetchBudget;
  /** URL to entry, in least-recently-used-first order (a Map iterates in insertion order). */
  private readonly entries = new Map<string, Entry>();
  private readonly count: JwksCacheCounters = { fetches: 0, fetchSuccesses: 0, fetchFailures: 0, rateLimited: 0, servedStale: 0 };

  /** For metrics and tests. Read-only to callers; the cache updates it in place. */
  readonly counters: Readonly<JwksCacheCounters> = this.count;

  constructor(settings: JwksCacheSettings) {
    // A nonsensical setting (NaN, negative, a fractional entry count) would quietly disable a bound,
    // so it is refused at start-up instead.
    checkSetting('ttlMs', settings.ttlMs, 0, false);
    checkSetting('staleMs', settings.staleMs, 0, false);
    checkSetting('kidMissIntervalMs', settings.kidMissIntervalMs, 0, false);
    checkSetting('failureBackoffMs', settings.failureBackoffMs, 0, false);
    checkSetting('maxFetchesPerMinute', settings.maxFetchesPerMinute, 1, true);
    checkSetting('maxEntries', settings.maxEntries, 1, true);
    this.fetchSet = settings.fetch;
    this.now = settings.now;
    this.ttlMs = settings.ttlMs;
    this.usableMs = settings.ttlMs + settings.staleMs;
    this.kidMissIntervalMs = settings.kidMissIntervalMs;
    this.maxEntries = settings.maxEntries;
    this.failureBackoffMs = settings.failureBackoffMs;
    this.maxFetchesPerMinute = settings.maxFetchesPerMinute;
    this.budget = new FetchBudget(settings.maxFetchesPerMinute);
  }

  /** How many URLs are cached (at most maxEntries). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * The key for `kid` at `url`. With a fresh set, or a stale one within staleMs, a present kid is
   * answered without awaiting any fetch (a stale set starts one background refresh). Otherwise the
   * lookup waits for the URL's one shared fetch, or fails closed at once when the budget or the
   * failure backoff refuses to start one.
   */
  async lookup(url: string, kid: string): Promise<KeyLookup> {
    const now = this.now();
    const entry = this.touch(url);
    const usable = entry ? this.usableKeys(entry, now) : undefined;
    if (entry && usable) {
      const jwk = usable.keys.get(kid);
      if (usable.stale) {
        // The refresh is due whatever the kid: start it if none is running. A refusal (budget,
        // backoff) does not stop a present kid being served: the set is still within staleMs.
        const refresh = this.fetchFor(entry, now);
        if (jwk) {
          this.count.servedStale++;
          return { kind: 'key', jwk };
        }
        // A kid the stale set lacks may be a rotated key the refresh will bring: wait for it.
        if (refresh.kind === 'refused') return { kind: 'unavailable', reason: refresh.reason };
        return answer(await refresh.outcome, kid);
      }
      if (jwk) return { kind: 'key', jwk };
      return this.kidMiss(entry, kid, now);
    }
    const ticket = this.fetchFor(entry ?? url, now);
    if (ticket.kind === 'refused') return { kind: 'unavailable', reason: ticket.reason };
    return answer(await ticket.outcome, kid);
  }

  /**
   * The cached key if the set is fresh or within staleMs, else undefined. Synchronous, and it never
   * starts a fetch, not even the refresh a stale set is due: a caller that only ever peeked would
   * let the set expire and then wait on a refetch, so the hot path calls lookup() whenever peek()
   * has no answer, and lookup() is what keeps the set refreshed.
   */
  peek(url: string, kid: string): PublicJwk | undefined {
    const entry = this.touch(url);
    if (!entry) return undefined;
    const usable = this.usableKeys(entry, this.now());
    if (!usable) return undefined;
    const jwk = usable.keys.get(kid);
    if (jwk && usable.stale) this.count.servedStale++;
    return jwk;
  }

  /** Forgets a URL (e.g. on a host's revocation). A fetch of it in flight answers its waiters with no key and is not stored. */
  forget(url: string): void {
    const entry = this.entries.get(url);
    if (!entry) return;
    entry.forgotten = true;
    this.entries.delete(url);
  }

  /** A kid missing from a fresh set: one refetch (the host may have rotated), then at most one per interval. */
  private async kidMiss(entry: Entry, kid: string, now: number): Promise<KeyLookup> {
    // A fetch already running answers this miss too, at no cost: in particular, when a host starts
    // signing with a newly published key, every request that arrives while the one refetch runs
    // gets the new key, not only the first.
    if (entry.inflight) return answer(await entry.inflight, kid);
    if (entry.kidMissFetchAt !== undefined && elapsed(entry.kidMissFetchAt, now) < this.kidMissIntervalMs) {
      return { kind: 'unknown_kid' };
    }
    const ticket = this.fetchFor(entry, now);
    if (ticket.kind === 'refused') return { kind: 'unavailable', reason: ticket.reason };
    // Only a refetch that actually started uses up the interval: a refused one (budget, backoff)
    // must not keep a legitimate rotation waiting afterwards.
    entry.kidMissFetchAt = now;
    return answer(await ticket.outcome, kid);
  }

  /** The entry's set if it is still usable at `now`, and whether it is stale. */
  private usableKeys(entry: Entry, now: number): { keys: ReadonlyMap<string, PublicJwk>; stale: boolean } | undefined {
    if (!entry.keys) return undefined;
    const age = elapsed(entry.keysFetchStartedAt, now);
    if (age < this.ttlMs) return { keys: entry.keys, stale: false };
    if (age < this.usableMs) return { keys: entry.keys, stale: true };
    return undefined;
  }

  /**
   * The fetch of a URL: the one running (shared), or a new one if the failure backoff and the
   * global budget allow it, else a refusal. Given a URL string, the entry is created only once a
   * fetch actually starts, so refused lookups of unknown URLs leave nothing behind and cannot push
   * live entries out of the cache; new entries arrive no faster than the budget allows.
   */
  private fetchFor(target: Entry | string, now: number): FetchTicket {
    const known = typeof target === 'string' ? undefined : target;
    if (known?.inflight) return { kind: 'fetching', outcome: known.inflight };
    if (known?.failedAt !== undefined && elapsed(known.failedAt, now) < this.failureBackoffMs) {
      return { kind: 'refused', reason: `${known.failureReason} (a failed JWKS fetch is not retried for ${this.failureBackoffMs} ms)` };
    }
    if (!this.budget.take(now)) {
      this.count.rateLimited++;
      return { kind: 'refused', reason: `JWKS fetches are rate limited (at most ${this.maxFetchesPerMinute} a minute); try again later` };
    }
    const entry = typeof target === 'string' ? this.insert(target) : target;
    this.count.fetches++;
    const outcome = this.run(entry, now);
    entry.inflight = outcome;
    return { kind: 'fetching', outcome };
  }

  /** Runs one fetch and records its outcome on the entry. Never rejects. */
  private async run(entry: Entry, startedAt: number): Promise<FetchOutcome> {
    let outcome: FetchOutcome;
    try {
      // Called from a microtask, so even a fetch that throws synchronously settles only after
      // fetchFor has recorded this promise as the entry's fetch in flight (and it is cleared below).
      const set = await Promise.resolve(entry.url).then((url) => this.fetchSet(url));
      outcome = { ok: true, keys: toKeyMap(set) };
    } catch (error) {
      outcome = { ok: false, reason: failureReason(error) };
    }
    entry.inflight = undefined;
    if (outcome.ok) {
      this.count.fetchSuccesses++;
      // Single flight makes fetches of one entry land in order; the check keeps it impossible for
      // an older set to replace a newer one even so.
      if (!entry.keys || startedAt >= entry.keysFetchStartedAt) {
        entry.keys = outcome.keys;
        entry.keysFetchStartedAt = startedAt;
      }
      entry.failedAt = undefined;
    } else {
      this.count.fetchFailures++;
      entry.failedAt = this.now();
      entry.failureReason = outcome.reason;
    }
    // An evicted entry's outcome still answers the lookups that waited for it (the fetch was
    // legitimate), but it is stored nowhere. A forgotten one answers no key: forget() is revocation.
    if (entry.forgotten) return { ok: false, reason: FORGOTTEN };
    return outcome;
  }

  /** The entry for a URL, marked as the most recently used. */
  private touch(url: string): Entry | undefined {
    const entry = this.entries.get(url);
    if (entry) {
      this.entries.delete(url);
      this.entries.set(url, entry);
    }
    return entry;
  }

  /** A new entry for a URL, evicting the least recently used ones to stay within maxEntries. */
  private insert(url: string): Entry {
    while (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.entries.delete(oldest.value);
    }
    const entry: Entry = {
      url,
      keys: undefined,
      keysFetchStartedAt: 0,
      inflight: undefined,
      failedAt: undefined,
      failureReason: '',
      kidMissFetchAt: undefined,
      forgotten: false,
    };
    this.entries.set(url, entry);
    return entry;
  }
}

/** A lookup's answer from a fetch's outcome. */
function answer(outcome: FetchOutcome, kid: string): KeyLookup {
  if (!outcome.ok) return { kind: 'unavailable', reason: outcome.reason };
  const jwk = outcome.keys.get(kid);
  return jwk ? { kind: 'key', jwk } : { kind: 'unknown_kid' };
}
