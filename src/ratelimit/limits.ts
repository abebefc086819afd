// Rate limits (protocol §11.5) with rate-limiter-flexible: on Redis when the store is Redis, so
// every instance shares one budget; in memory with the memory store. Over a limit the answer is
// 429 rate_limited with Retry-After in whole seconds. If the limiter's Redis call fails the
// request is refused (503), for known and unknown callers alike: fail closed.
// Refusals are counted by budget (metrics); at LOG_LEVEL debug every verdict is logged with the
// points left, which is how an operator sees a budget running down before it refuses.
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Config } from '../config.ts';
import { redisCallDeadlineMs, within } from '../common/deadline.ts';
import { ApiError } from '../errors.ts';
import { debugEnabled, type Logger } from '../logger.ts';
import { noMetrics, type Metrics } from '../metrics/metrics.ts';
import type { CounterCount, CounterSpend } from '../store/store.ts';

export const LIMIT_NAMES = ['agent', 'host', 'status', 'ip', 'registration', 'unknownHostRegistration', 'userCodeAttempt', 'userCodeSession', 'cibaPerson', 'cibaHost', 'jwksFetch', 'enrollment'] as const;
export type LimitName = (typeof LIMIT_NAMES)[number];

/** Wrong user codes one session may enter per window before it must wait. */
export const USER_CODE_SESSION_ATTEMPTS = 5;
const USER_CODE_SESSION_WINDOW_SECONDS = 15 * 60;

interface LimitSpec {
  points: number;
  durationSeconds: number;
}

function limitSpecs(config: Config): Record<LimitName, LimitSpec> {
  return {
    agent: { points: config.RATE_LIMIT_AGENT_PER_MINUTE, durationSeconds: 60 },
    host: { points: config.RATE_LIMIT_HOST_PER_MINUTE, durationSeconds: 60 },
    status: { points: config.RATE_LIMIT_STATUS_PER_MINUTE, durationSeconds: 60 },
    ip: { points: config.RATE_LIMIT_IP_PER_MINUTE, durationSeconds: 60 },
    registration: { points: config.RATE_LIMIT_REGISTRATIONS_PER_HOUR, durationSeconds: 3600 },
    unknownHostRegistration: { points: config.RATE_LIMIT_UNKNOWN_HOST_REGISTRATIONS_PER_HOUR, durationSeconds: 3600 },
    userCodeAttempt: { points: config.RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR, durationSeconds: 3600 },
    // Wrong codes one signed-in session may try (a right one gives its point back): spent before
    // the lookup, atomically in the store, so parallel guesses cannot all pass one check.
    userCodeSession: { points: USER_CODE_SESSION_ATTEMPTS, durationSeconds: USER_CODE_SESSION_WINDOW_SECONDS },
    // Protocol §11.5 (CIBA: rate limits, notification fatigue): requests that would tell one person, and that one host sends (services/approvals/ciba.ts).
    cibaPerson: { points: config.RATE_LIMIT_CIBA_PER_PERSON_PER_HOUR, durationSeconds: 3600 },
    cibaHost: { points: config.RATE_LIMIT_CIBA_PER_HOST_PER_HOUR, durationSeconds: 3600 },
    // JWKS fetches one host may cause (auth/jwks-keys.ts), so no host can spend the fetch budget every other host's rotation needs.
    jwksFetch: { points: config.RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR, durationSeconds: 3600 },
    // Hosts a person enrolls (services/enrollments.ts): a token guess per address, an enrollment made per person.
    enrollment: { points: config.RATE_LIMIT_ENROLLMENTS_PER_HOUR, durationSeconds: 3600 },
  };
}

/**
 * The key a budget is counted under, as a Redis Cluster hash tag (DESIGN §10, blast radius): an
 * agent's budget (`ag:rl:agent:{agt_x}`) then lives in the slot of the agent's own records
 * (`ag:{agt_x}`), and a host's (`ag:rl:host:{host_x}`) in the slot of the host's
 * (`ag:host:{host_x}`). An execute thus needs the master of its agent's slot and the master of its
 * host's slot, and no other: losing any other master refuses none of its calls.
 */
export function budgetKey(key: string): string {
  return `{${key}}`;
}

/** The agent's and host's budgets of one execute request (RateLimits.callerSpend). */
export interface CallerSpend {
  /** For the store to spend in the round trip (none when the budgets are kept in process). */
  counters: CounterSpend[];
  /** Settles when the budgets cover the request; else refuses it (429, or 503 when they cannot be counted). */
  verdict(counts: readonly CounterCount[] | undefined): Promise<void>;
}

export class RateLimits {
  private readonly limiters: Record<LimitName, RateLimiterAbstract>;
  private readonly capabilityLimiters: ReadonlyMap<string, RateLimiterAbstract>;
  private readonly logger: Logger;

  /** Redis-backed limiters answer within this or count as unavailable (see store/guard.ts). */
  private readonly deadlineMs: number | undefined;
  private readonly metrics: Metrics;
  /** Decided once: a verdict's debug line is built only when it would be written. */
  private readonly logVerdicts: boolean;
  /** Redis-backed: the execute round trip spends the agent's and host's budgets in its own command (callerSpend). */
  private readonly countersInStore: boolean;

  constructor(
    limiters: Record<LimitName, RateLimiterAbstract>, logger: Logger, capabilityLimiters: ReadonlyMap<string, RateLimiterAbstract> = new Map(), deadlineMs?: number,
    metrics: Metrics = noMetrics,
  ) {
    this.limiters = limiters;
    this.capabilityLimiters = capabilityLimiters;
    this.logger = logger;
    this.deadlineMs = deadlineMs;
    this.metrics = metrics;
    this.logVerdicts = debugEnabled(logger);
    this.countersInStore = limiters.agent instanceof RateLimiterRedis && limiters.host instanceof RateLimiterRedis;
  }

  /**
   * Spends `points` of `name` for `key` (one per call: a batch of N calls spends N at once, so it
   * is admitted whole or not at all); throws 429 rate_limited or 503 when the limiter fails. A
   * refused spend still counts, as rate-limiter-flexible counts every consume.
   */
  consume(name: LimitName, key: string, points = 1): Promise<void> {
    return this.spend(this.limiters[name], name, name, key, points);
  }

  /**
   * Spends one point of a capability's own budget for this agent. Null when the capability has no
   * budget of its own: nothing is spent, so nothing is awaited or given back. A promise that
   * resolved means a point was spent, so a call refused before it could reach the capability can
   * give it back (refundCapability).
   */
  consumeCapability(capability: string, agentId: string): Promise<void> | null {
    const limiter = this.capabilityLimiters.get(capability);
    if (!limiter) return null;
    // A refused spend gives back at once the count it added, so a capability's budget counts only
    // the calls it let through and the points still in flight. Otherwise a call refused only because
    // a replay's point was in flight (given back a moment later) would keep its own point for the
    // whole window: a captured token, replayed while the agent calls, could drain a small budget.
    return this.spend(limiter, 'capability', `capability ${capability}`, agentId, 1).catch(async (err: unknown) => {
      if (err instanceof ApiError && err.code === 'rate_limited') await this.refundCapability(capability, agentId);
      throw err;
    });
  }

  /**
   * Gives back a point `consume` spent (an attempt that turned out right). Never throws: a point
   * that cannot be given back stays spent, which errs towards refusing, and the log says so.
   */
  async refund(name: LimitName, key: string): Promise<void> {
    try {
      await this.limiters[name].reward(budgetKey(key), 1);
    } catch (err) {
      this.logger.warn('could not give back a budget point', { limit: name, err });
    }
  }

  /**
   * Gives back a point consumeCapability spent. Never throws: if Redis cannot take it back, the
   * point stays spent, which errs towards refusing, and the log says so.
   */
  async refundCapability(capability: string, agentId: string): Promise<void> {
    const limiter = this.capabilityLimiters.get(capability);
    if (!limiter) return;
    try {
      await limiter.reward(budgetKey(agentId), 1);
    } catch (err) {
      this.logger.warn('could not give back a capability budget point', { capability, agentId, err });
    }
  }

  /**
   * The agent's and the host's budgets for `points` calls, as execute spends them. Redis-backed,
   * they are `counters` for the store to spend in the execute round trip's own command (their keys
   * are rate-limiter-flexible's, so every other endpoint's spends of these budgets count with
   * them), and `verdict` judges the counts the store answered. In process they are spent here, at
   * once, and `verdict` reads their answer. Either way the verdict is the same 429 or 503 that
   * `consume` gives, and a refused spend still counts.
   */
  callerSpend(agentId: string, hostId: string, points: number): CallerSpend {
    if (!this.countersInStore) {
      const spent = Promise.all([this.consume('agent', agentId, points), this.consume('host', hostId, points)]);
      spent.catch(() => undefined);
      return { counters: [], verdict: async () => void (await spent) };
    }
    // The two budgets written out, with no list of them to map over: this runs on every execute.
    const { agent, host } = this.limiters;
    const counters = [
      { key: agent.getKey(budgetKey(agentId)), points, windowSeconds: agent.duration },
      { key: host.getKey(budgetKey(hostId)), points, windowSeconds: host.duration },
    ];
    return {
      counters,
      verdict: async (counts) => {
        if (counts?.length !== counters.length) throw new Error('the store did not count the budgets it was given');
        this.judge(agent, 'agent', 'agent', agentId, points, counts[0]!);
        this.judge(host, 'host', 'host', hostId, points, counts[1]!);
      },
    };
  }

  /** A counted spend (`consumed` in its window) against its limiter's points: a refusal throws as `spend` does. */
  private judge(limiter: RateLimiterAbstract, dimension: LimitName | 'capability', name: string, key: string, points: number, count: CounterCount): void {
    const remaining = Math.max(limiter.points - count.consumed, 0);
    if (count.consumed > limiter.points) throw this.refusal(dimension, name, key, points, remaining, count.msBeforeNext);
    if (this.logVerdicts) this.logger.debug('rate limit verdict', { dimension, ...(name !== dimension ? { budget: name } : {}), key, points, allowed: true, remaining });
  }

  /** A budget's refusal: counted by metrics, logged at debug, answered 429 with Retry-After in whole seconds. */
  private refusal(dimension: LimitName | 'capability', name: string, key: string, points: number, remaining: number, msBeforeNext: number): ApiError {
    this.metrics.rateLimitRefusal(dimension);
    if (this.logVerdicts) {
      this.logger.debug('rate limit verdict', {
        dimension, ...(name !== dimension ? { budget: name } : {}), key, points, allowed: false, remaining, retryAfterMs: msBeforeNext,
      });
    }
    const retryAfterSeconds = Math.max(1, Math.ceil(msBeforeNext / 1000));
    return new ApiError('rate_limited', `too many requests; retry after ${retryAfterSeconds} s`, undefined, { 'Retry-After': String(retryAfterSeconds) });
  }

  /** `dimension` is the budget's kind (a metrics label: one for all capabilities' budgets); `name` says which, for the log. */
  private async spend(limiter: RateLimiterAbstract, dimension: LimitName | 'capability', name: string, key: string, points: number): Promise<void> {
    try {
      const consumed = limiter.consume(budgetKey(key), points);
      const verdict = await (this.deadlineMs === undefined ? consumed : within(consumed, this.deadlineMs, `rate limit ${name}`));
      if (this.logVerdicts) this.logger.debug('rate limit verdict', { dimension, ...(name !== dimension ? { budget: name } : {}), key, points, allowed: true, remaining: verdict.remainingPoints });
    } catch (rejection) {
      if (rejection instanceof RateLimiterRes) throw this.refusal(dimension, name, key, points, rejection.remainingPoints, rejection.msBeforeNext);
      // Only a Redis-backed limiter fails this way (the in-process one answers or refuses), and
      // then the cause is the store's: the message says so in /readyz's words (src/http/health.ts),
      // so a client and an operator name the same thing rather than a symptom of it.
      this.logger.error('the redis store cannot be reached to count a rate limit; refusing', { limit: name, err: rejection });
      throw new ApiError('service_unavailable', 'the redis store cannot be reached (it keeps the rate limits); retry later');
    }
  }
}

/**
 * Redis-backed when `redisClient` (an ioredis client) is given, else in process. `capabilities`
 * are the catalog entries with a budget of their own.
 */
export function createRateLimits(
  config: Config,
  logger: Logger,
  redisClient?: unknown,
  capabilities: ReadonlyArray<{ name: string; rateLimit?: LimitSpec | undefined }> = [],
  metrics: Metrics = noMetrics,
): RateLimits {
  const make = (label: string, { points, durationSeconds }: LimitSpec): RateLimiterAbstract => {
    const base = { points, duration: durationSeconds, keyPrefix: `${config.REDIS_KEY_PREFIX}rl:${label}` };
    return redisClient ? new RateLimiterRedis({ ...base, storeClient: redisClient, rejectIfRedisNotReady: true }) : new RateLimiterMemory(base);
  };
  const specs = limitSpecs(config);
  const limiters = Object.fromEntries(LIMIT_NAMES.map((n) => [n, make(n, specs[n])])) as Record<LimitName, RateLimiterAbstract>;
  const perCapability = new Map<string, RateLimiterAbstract>();
  for (const c of capabilities) if (c.rateLimit) perCapability.set(c.name, make(`cap:${c.name}`, c.rateLimit));
  return new RateLimits(limiters, logger, perCapability, redisClient ? redisCallDeadlineMs(config.REDIS_COMMAND_TIMEOUT_MS) : undefined, metrics);
}
