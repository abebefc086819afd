// Metrics in the Prometheus text format, with prom-client. Modules record through the
// small Metrics interface below and never see prom-client; when metrics are off (neither
// METRICS_TOKEN nor METRICS_PORT is set) every recording method is a no-op and nothing is kept.
//
// Label values come from closed sets (src/metrics/labels.ts): route patterns, the error codes of
// src/errors.ts, operator names from the registry, store method names, the rate limits' names.
// Gauges that describe state (the active policy, pending approvals) are read when scraped.
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { Logger } from '../logger.ts';
import { CounterFamily, HistogramFamily, type CounterCell } from './cells.ts';
import { codeLabel, decisionEndpoint, decisionOutcome } from './labels.ts';

export interface Metrics {
  /** False when metrics are off: callers may skip work that only feeds them (timing a call). */
  readonly enabled: boolean;
  /** One answered request. `route` is a pattern; `errorCode` is the refusal's, if it was one. */
  request(method: string, route: string, status: number, durationSeconds: number, errorCode: string | undefined): void;
  policyEvaluation(entrypoint: string, durationSeconds: number): void;
  pluginFailure(operator: string, kind: string): void;
  /**
   * A shadow policy answered a live decision differently. `capability` must come from a closed set
   * (the catalog's names; the caller names anything else "(other)").
   */
  shadowDisagreement(entrypoint: string, capability: string, direction: string): void;
  storeCall(call: string, durationSeconds: number): void;
  /** A store call failed: `unavailable` (answered 503) or `error` (anything else, answered 500). */
  storeCallFailure(call: string, kind: 'unavailable' | 'error'): void;
  /** An 'error' event of a Redis connection (a reconnect attempt failed, the socket broke). */
  redisConnectionError(): void;
  rateLimitRefusal(dimension: string): void;
  keyCacheLookup(hit: boolean): void;
  /**
   * Reads the active policy and the pending approvals when scraped. Called once by the
   * composition root with the store guard's store, so a scrape of a dead Redis ends in its deadline.
   */
  observe(sources: MetricsSources): void;
  /** The exposition: content type and text. */
  render(): Promise<{ contentType: string; body: string }>;
}

interface MetricsSources {
  policy: { info(): { sha256: string; loadedAtMs: number; generation: number; instanceReplacements?: number } };
  /** What waits for approval, as the store lists it (store.ts Store#listStalePending): metrics read, never import, the store. */
  store: { listStalePending(kind: 'agent' | 'host' | 'approval', beforeMs: number, limit: number): Promise<string[]> };
  logger: Logger;
  /** The CIBA notices' delivery counters per channel (notify/approval-notifier.ts); absent when no channel is configured. */
  notices?: { counters(): Array<{ channel: string; delivered: number; failedAttempts: number; dropped: number }> } | undefined;
  /** The JWKS cache's fetch counters (auth/jwks-cache.ts), read when scraped. */
  jwksFetches?: { readonly fetchSuccesses: number; readonly fetchFailures: number; readonly rateLimited: number } | undefined;
}

/** Pending approvals are counted up to this many per kind (the store lists at most this many ids). */
const PENDING_COUNT_LIMIT = 10_000;

const noop = (): void => {};

/** Metrics off: records nothing, renders nothing. */
export const noMetrics: Metrics = {
  enabled: false,
  request: noop,
  policyEvaluation: noop,
  pluginFailure: noop,
  shadowDisagreement: noop,
  storeCall: noop,
  storeCallFailure: noop,
  redisConnectionError: noop,
  rateLimitRefusal: noop,
  keyCacheLookup: noop,
  observe: noop,
  render: () => Promise.resolve({ contentType: 'text/plain', body: '' }),
};

/** Whether a deployment serves metrics, and so records them: a token or a port of their own. */
export function metricsEnabled(config: { METRICS_TOKEN?: string | undefined; METRICS_PORT?: number | undefined }): boolean {
  return config.METRICS_TOKEN !== undefined || config.METRICS_PORT !== undefined;
}

export function createMetrics(config: { METRICS_TOKEN?: string | undefined; METRICS_PORT?: number | undefined }): Metrics {
  return metricsEnabled(config) ? new PrometheusMetrics() : noMetrics;
}

// Buckets, in seconds, for what each histogram times. A request takes milliseconds; a policy
// decision tens of microseconds; a store call one Redis round trip, up to its deadline.
const REQUEST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const POLICY_BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05];
const STORE_BUCKETS = [0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * The families recorded on every request are cells (src/metrics/cells.ts), updated in place; the
 * rare ones (failures, refusals) and the state read at scrape time are prom-client's own.
 */
export class PrometheusMetrics implements Metrics {
  readonly enabled = true;
  readonly registry = new Registry();
  readonly #httpRequests: CounterFamily<'method' | 'route' | 'status'>;
  readonly #httpDuration: HistogramFamily<'method' | 'route'>;
  readonly #decisions: CounterFamily<'endpoint' | 'outcome' | 'code'>;
  readonly #policyDuration: HistogramFamily<'entrypoint'>;
  readonly #pluginFailures: Counter<'operator' | 'kind'>;
  readonly #shadowDisagreements: Counter<'entrypoint' | 'capability' | 'direction'>;
  readonly #storeDuration: HistogramFamily<'call'>;
  readonly #storeFailures: Counter<'call' | 'kind'>;
  readonly #redisErrors: Counter;
  readonly #rateLimitRefusals: Counter<'dimension'>;
  readonly #keyCacheHits: CounterCell;
  readonly #keyCacheMisses: CounterCell;
  #sources: MetricsSources | undefined;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.#httpRequests = new CounterFamily(this.registry, {
      name: 'agentgate_http_requests_total', help: 'HTTP requests answered, by method, route pattern and status.',
      labelNames: ['method', 'route', 'status'],
    });
    this.#httpDuration = new HistogramFamily(this.registry, {
      name: 'agentgate_http_request_duration_seconds', help: 'Time from receiving a request to the end of its answer, by method and route pattern.',
      labelNames: ['method', 'route'], buckets: REQUEST_BUCKETS,
    });
    this.#decisions = new CounterFamily(this.registry, {
      name: 'agentgate_decisions_total',
      help: 'Authorization decisions by endpoint, outcome (allowed, refused, failed) and error code (none when not refused).',
      labelNames: ['endpoint', 'outcome', 'code'],
    });
    this.#policyDuration = new HistogramFamily(this.registry, {
      name: 'agentgate_policy_evaluation_duration_seconds', help: 'Time the compiled policy took to decide, by entrypoint.',
      labelNames: ['entrypoint'], buckets: POLICY_BUCKETS,
    });
    this.#pluginFailures = new Counter({
      name: 'agentgate_plugin_operator_failures_total',
      help: 'Plugin operator calls that failed (threw, timed out, crashed, answered a non-boolean); each counted as a violation.',
      labelNames: ['operator', 'kind'], registers,
    });
    this.#shadowDisagreements = new Counter({
      name: 'agentgate_policy_shadow_disagreements_total',
      help: 'Live decisions the shadow policy answered differently, by entrypoint, capability and direction (allow_to_deny, deny_to_allow, other).',
      labelNames: ['entrypoint', 'capability', 'direction'], registers,
    });
    this.#storeDuration = new HistogramFamily(this.registry, {
      name: 'agentgate_store_call_duration_seconds', help: 'Time of each store call (Redis round trips for the Redis store), by store method.',
      labelNames: ['call'], buckets: STORE_BUCKETS,
    });
    this.#storeFailures = new Counter({
      name: 'agentgate_store_call_failures_total', help: 'Store calls that failed, by store method and kind (unavailable: answered 503; error: answered 500).',
      labelNames: ['call', 'kind'], registers,
    });
    this.#redisErrors = new Counter({
      name: 'agentgate_redis_connection_errors_total', help: 'Error events of the Redis connections (failed reconnects, broken sockets).', registers,
    });
    this.#rateLimitRefusals = new Counter({
      name: 'agentgate_rate_limit_refusals_total', help: 'Requests refused with 429 rate_limited, by the budget that refused them.',
      labelNames: ['dimension'], registers,
    });
    const keyCache = new CounterFamily(this.registry, {
      name: 'agentgate_key_cache_lookups_total', help: "Lookups in the in-process cache of agents' imported keys, by result (hit, miss).",
      labelNames: ['result'],
    });
    this.#keyCacheHits = keyCache.cell('hit');
    this.#keyCacheMisses = keyCache.cell('miss');
    this.#definePolicyGauges(registers);
    this.#definePendingGauge(registers);
    this.#defineNoticeCounter(registers);
    this.#defineJwksFetchCounter(registers);
  }

  request(method: string, route: string, status: number, durationSeconds: number, errorCode: string | undefined): void {
    this.#httpRequests.cell(method, route, statusLabel(status)).inc();
    this.#httpDuration.cell(method, route).observe(durationSeconds);
    const endpoint = decisionEndpoint(method, route);
    if (endpoint !== undefined) this.#decisions.cell(endpoint, decisionOutcome(status), codeLabel(errorCode)).inc();
  }

  policyEvaluation(entrypoint: string, durationSeconds: number): void {
    this.#policyDuration.cell(entrypoint).observe(durationSeconds);
  }

  pluginFailure(operator: string, kind: string): void {
    this.#pluginFailures.inc({ operator, kind });
  }

  shadowDisagreement(entrypoint: string, capability: string, direction: string): void {
    this.#shadowDisagreements.inc({ entrypoint, capability, direction });
  }

  storeCall(call: string, durationSeconds: number): void {
    this.#storeDuration.cell(call).observe(durationSeconds);
  }

  storeCallFailure(call: string, kind: 'unavailable' | 'error'): void {
    this.#storeFailures.inc({ call, kind });
  }

  redisConnectionError(): void {
    this.#redisErrors.inc();
  }

  rateLimitRefusal(dimension: string): void {
    this.#rateLimitRefusals.inc({ dimension });
  }

  keyCacheLookup(hit: boolean): void {
    (hit ? this.#keyCacheHits : this.#keyCacheMisses).inc();
  }

  observe(sources: MetricsSources): void {
    this.#sources = sources;
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /**
   * Collected per worker and summed when a cluster primary aggregates, except where an aggregator
   * says otherwise: every worker reports the same shared state (the store's pending approvals) or
   * its own copy of the same artefact (the policy), so those take the maximum.
   */
  #definePolicyGauges(registers: Registry[]): void {
    const sources = () => this.#sources;
    new Gauge({
      name: 'agentgate_policy_generation',
      help: 'Generation of the active policy artefact (1 at start-up, +1 per accepted reload), labelled with its sha256.',
      labelNames: ['sha256'], registers, aggregator: 'max',
      collect() {
        this.reset();
        const info = sources()?.policy.info();
        if (info) this.set({ sha256: info.sha256 }, info.generation);
      },
    });
    new Gauge({
      name: 'agentgate_policy_loaded_timestamp_seconds', help: 'When the active policy artefact was loaded (Unix time).', registers, aggregator: 'max',
      collect() {
        const info = sources()?.policy.info();
        if (info) this.set(info.loadedAtMs / 1000);
      },
    });
    new Counter({
      name: 'agentgate_policy_instance_replacements_total',
      help: 'Policy wasm instances replaced after an exception inside a decision (each such decision was refused).', registers,
      collect() {
        const replacements = sources()?.policy.info().instanceReplacements;
        this.reset();
        if (replacements !== undefined) this.inc(replacements);
      },
    });
  }

  #defineNoticeCounter(registers: Registry[]): void {
    const sources = () => this.#sources;
    new Counter({
      name: 'agentgate_approval_notices_total',
      help: 'CIBA notices by channel (webhook, email) and outcome: delivered; failed_attempt (an attempt that did not deliver, retried or not); dropped (given up on: attempts exhausted, refused, queue full, or left at shutdown).',
      labelNames: ['channel', 'outcome'], registers,
      collect() {
        this.reset();
        for (const row of sources()?.notices?.counters() ?? []) {
          this.inc({ channel: row.channel, outcome: 'delivered' }, row.delivered);
          this.inc({ channel: row.channel, outcome: 'failed_attempt' }, row.failedAttempts);
          this.inc({ channel: row.channel, outcome: 'dropped' }, row.dropped);
        }
      },
    });
  }

  #defineJwksFetchCounter(registers: Registry[]): void {
    const sources = () => this.#sources;
    new Counter({
      name: 'agentgate_jwks_fetches_total',
      help: 'JWKS fetches for keys at JWKS URLs, by outcome: ok; failed (the URL refused by the address rules, unreachable, too slow, too large, or not a JWK Set: the request that needed it was refused); over_budget (not started: JWKS_FETCHES_PER_MINUTE was spent).',
      labelNames: ['outcome'], registers,
      collect() {
        this.reset();
        const counters = sources()?.jwksFetches;
        if (!counters) return;
        this.inc({ outcome: 'ok' }, counters.fetchSuccesses);
        this.inc({ outcome: 'failed' }, counters.fetchFailures);
        this.inc({ outcome: 'over_budget' }, counters.rateLimited);
      },
    });
  }

  #definePendingGauge(registers: Registry[]): void {
    const sources = () => this.#sources;
    new Gauge({
      name: 'agentgate_pending_approvals',
      help: `What waits for a person, as the clean-up job tracks it: open approvals (kind approval) and agents waiting since registration (kind agent); at most ${PENDING_COUNT_LIMIT} each.`,
      labelNames: ['kind'], registers, aggregator: 'max',
      async collect() {
        this.reset();
        const current = sources();
        if (!current) return;
        // Within the store guard's deadline; a failed count leaves the series out of this scrape
        // rather than failing it, so the rest of the metrics still arrive during a Redis outage.
        const counts = await Promise.allSettled((['approval', 'agent'] as const).map(async (kind) => {
          const ids = await current.store.listStalePending(kind, Number.MAX_SAFE_INTEGER, PENDING_COUNT_LIMIT);
          this.set({ kind }, ids.length);
        }));
        const failed = counts.find((c): c is PromiseRejectedResult => c.status === 'rejected');
        if (failed) current.logger.warn('could not count pending approvals for /metrics', { err: failed.reason });
      },
    });
  }
}

/** Status codes as label strings, made once each. */
const STATUS_LABELS = new Map<number, string>();
function statusLabel(status: number): string {
  let label = STATUS_LABELS.get(status);
  if (label === undefined) STATUS_LABELS.set(status, (label = String(status)));
  return label;
}

/**
 * Cluster mode (WORKERS > 1): each worker answers the primary's requests for its metrics (over the
 * cluster's IPC channel) from this registry. prom-client adds its listener when an
 * AggregatorRegistry is first made, so a worker makes one it never reads.
 */
export function answerClusterScrapes(metrics: Metrics): void {
  if (!(metrics instanceof PrometheusMetrics)) return;
  AggregatorRegistry.setRegistries([metrics.registry]);
  new AggregatorRegistry();
}

/** The primary's exposition in cluster mode: every worker's metrics, aggregated (5 s timeout, prom-client's). */
export function clusterMetricsRenderer(): () => Promise<{ contentType: string; body: string }> {
  const aggregator = new AggregatorRegistry();
  return async () => ({ contentType: aggregator.contentType, body: await aggregator.clusterMetrics() });
}
