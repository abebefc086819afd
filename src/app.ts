// The composition root, written once for production (src/main.ts) and the tests
// (test/support/server.ts): assembleService builds the whole service from config (store, audit
// trail, catalog, rate limits, operator plugins, policy, sign-in, app), and buildApp wires the Express
// app from those parts. Nothing here decides anything; it wires http -> services -> (auth, domain,
// policy, operators, store, execution). Serving it (listening, signals, draining) is main.ts's.
import express, { type Express } from 'express';
import { AuditedPolicyReloader, auditedOperatorReload, startAuditTrail, type AuditTrail } from './audit/trail.ts';
import { AgentAuthenticator } from './auth/agent-auth.ts';
import { HostAuthenticator, type AuthSettings } from './auth/host-auth.ts';
import { chooseEd25519Verifier } from './auth/ed25519-verify.ts';
import { AgentKeyCache } from './auth/key-cache.ts';
import type { CallerBudgets } from './auth/budgets.ts';
import { JwksCache, JWKS_CACHE_DEFAULTS, type JwksCacheCounters } from './auth/jwks-cache.ts';
import { fetchJwks, JWKS_FETCH_DEFAULTS, type JwksFetchSettings } from './auth/jwks-fetch.ts';
import { JwksKeys } from './auth/jwks-keys.ts';
import { KeyImporter } from './auth/keys.ts';
import type { Clock } from './common/clock.ts';
import type { Config } from './config.ts';
import { loadCatalog, type Catalog } from './catalog/catalog.ts';
import { systemClock } from './common/clock.ts';
import { createCapabilityRunner } from './execution/handlers.ts';
import { adminRouter } from './http/admin.ts';
import { accessLog } from './http/access.ts';
import { bodyDepthLimit } from './http/body-depth.ts';
import { agentRouter } from './http/agent.ts';
import { addCapabilityRoutes } from './http/capability.ts';
import { devicePagesRouter } from './http/device/router.ts';
import { discoveryRouter } from './http/discovery.ts';
import { errorHandler, notFoundHandler } from './http/errors.ts';
import { healthRouter } from './http/health.ts';
import { hostRouter } from './http/host.ts';
import { metricsRouter } from './http/metrics.ts';
import { openApiRouter } from './http/openapi.ts';
import { peopleApiRouter } from './http/people.ts';
import type { Logger } from './logger.ts';
import { createMetrics, type Metrics } from './metrics/metrics.ts';
import { keyCacheObserver } from './metrics/observers.ts';
import { startOperators, type Operators } from './operators/setup.ts';
import { instrumentPolicy } from './policy/instrumented.ts';
import { CandidatePolicies } from './policy/candidates.ts';
import { compileRedaction } from './policy/redaction.ts';
import { DecisionLog, recordingPolicy } from './services/decision-log.ts';
import { ShadowDisagreements } from './services/policy-rollout.ts';
import { loadPolicyEngine } from './policy/engine.ts';
import type { ReloadOutcome } from './policy/reloader.ts';
import type { PolicyEngine } from './policy/types.ts';
import { createRateLimits } from './ratelimit/limits.ts';
import { callerBudgets } from './services/budgets.ts';
import { moveJwksHostKey } from './services/hosts.ts';
import type { ServiceDeps } from './services/deps.ts';
import { passkeySettingsFor } from './people/passkeys.ts';
import { PersonSessions } from './people/sessions.ts';
import { createOidcSignIn, type OidcSignIn } from './people/sign-in/oidc.ts';
import { userCodesFor } from './services/approvals/user-codes.ts';
import { approvalNotifierFrom } from './notify/approval-notifier.ts';
import { scheduleCleanup } from './services/cleanup.ts';
import { redisCallDeadlineMs } from './common/deadline.ts';
import { failClosedStore } from './store/guard.ts';
import type { Store } from './store/store.ts';

/**
 * What buildApp wires: the parts the use cases share as they are (ServiceDeps names each), with the
 * store before its fail-closed wrapper; the rest buildApp makes itself.
 */
type AppDependencies = Pick<ServiceDeps, 'config' | 'store' | 'clock' | 'policy' | 'catalog' | 'operators' | 'pluginSandbox' | 'userCodes' | 'logger' | 'limits' | 'audit' | 'decisions'>
  & Partial<Pick<ServiceDeps, 'runCapability' | 'reloadPolicy' | 'reloadOperators' | 'rollout' | 'readPolicyArtefact' | 'notifier'>>
  & {
    /** People sign in through this OpenID Connect provider on the approval page; absent: not configured. */
    oidc?: OidcSignIn | undefined;
    /** Where metrics are recorded; absent: made from config (off unless METRICS_TOKEN or METRICS_PORT). */
    metrics?: Metrics;
    /** Tests only: the CA their local JWKS servers use, and a resolver for their names. */
    jwksFetch?: JwksFetchTestSettings | undefined;
  };

/** What a test may change of JWKS fetching: whom TLS trusts and how names resolve, nothing about the address rules. */
export type JwksFetchTestSettings = Pick<JwksFetchSettings, 'ca' | 'lookup'>;

interface App {
  app: Express;
  deps: ServiceDeps;
  metrics: Metrics;
}

/** Keys at JWKS URLs (auth/jwks-keys.ts): the SSRF-safe fetcher behind the bounded cache, as configured. */
function jwksKeysFor(config: Config, clock: Clock, budgets: CallerBudgets, testSettings: JwksFetchTestSettings | undefined): { jwks: JwksKeys; jwksFetches: JwksCacheCounters } {
  const fetchSettings: JwksFetchSettings = {
    ...JWKS_FETCH_DEFAULTS,
    timeoutMs: config.JWKS_FETCH_TIMEOUT_MS,
    connectTimeoutMs: Math.min(JWKS_FETCH_DEFAULTS.connectTimeoutMs, config.JWKS_FETCH_TIMEOUT_MS),
    allowedPrivateRanges: config.INSECURE_JWKS_ALLOWED_PRIVATE_RANGES,
    ...testSettings,
  };
  const cache = new JwksCache({
    ...JWKS_CACHE_DEFAULTS,
    fetch: (url) => fetchJwks(url, fetchSettings),
    now: () => clock.nowMs(),
    ttlMs: config.JWKS_CACHE_TTL_SECONDS * 1000,
    staleMs: config.JWKS_CACHE_STALE_SECONDS * 1000,
    maxFetchesPerMinute: config.JWKS_FETCHES_PER_MINUTE,
  });
  return { jwks: new JwksKeys({ source: cache, algorithms: config.ALGORITHMS, spendFetch: budgets.jwksFetch }), jwksFetches: cache.counters };
}

function buildApp(input: AppDependencies): App {
  const { config, clock, logger } = input;
  const metrics = input.metrics ?? createMetrics(config);
  // A call to Redis gets the command timeout plus a small margin in all, however many wait ahead of it.
  const deadlineMs = input.store.kind === 'redis' ? redisCallDeadlineMs(config.REDIS_COMMAND_TIMEOUT_MS) : undefined;
  // A withdrawal's wait for replicas may run after a round already under way (durability.ts): two
  // wait timeouts, and the usual margin, on top of a call's own.
  const extraMs = { confirmDurable: 2 * config.REDIS_WAIT_TIMEOUT_MS + 1000 };
  const store = failClosedStore(input.store, logger, { deadlineMs, metrics, extraMs });
  const settings: AuthSettings = {
    issuer: config.issuer,
    executeUrl: config.executeUrl,
    maxLifetimeSeconds: config.JWT_MAX_LIFETIME_SECONDS,
    skewSeconds: config.JWT_CLOCK_SKEW_SECONDS,
    algorithms: config.ALGORITHMS,
  };
  const { verifier, fallbackReason } = chooseEd25519Verifier(config.ED25519_VERIFIER);
  if (fallbackReason !== undefined) {
    logger.warn('libsodium cannot load: Ed25519 signatures are verified with node:crypto, about 1.7 times the CPU', { reason: fallbackReason });
  }
  logger.info('Ed25519 signature verification', { backend: verifier.backend, setting: config.ED25519_VERIFIER });
  const importer = new KeyImporter(verifier);
  const keys = new AgentKeyCache({
    maxEntries: config.KEY_CACHE_MAX_ENTRIES, ttlSeconds: config.KEY_CACHE_TTL_SECONDS, clock, importer, onLookup: keyCacheObserver(metrics, logger),
  });
  // Decisions are timed for metrics and, at debug, logged with their arguments' values redacted;
  // then recorded for previews and offered to the shadow policy, if one is loaded (off this thread).
  const candidates = input.rollout?.candidates;
  const observer = candidates ? { active: () => candidates.hasShadow(), observe: candidates.observe.bind(candidates) } : undefined;
  const policy = recordingPolicy(instrumentPolicy(input.policy, metrics, logger), input.decisions, observer);

  // Another instance rotated or revoked an agent: drop our imported key so the next call re-reads it.
  input.store.onAgentInvalidation((agentId) => keys.invalidate(agentId));
  const budgets = callerBudgets(input.limits);
  const { jwks, jwksFetches } = jwksKeysFor(config, clock, budgets, input.jwksFetch);
  metrics.observe({ policy: input.policy, store, logger, notices: input.notifier, jwksFetches });
  const deps: ServiceDeps = {
    config,
    store,
    clock,
    policy,
    catalog: input.catalog,
    operators: input.operators,
    pluginSandbox: input.pluginSandbox,
    userCodes: input.userCodes,
    ...(input.notifier ? { notifier: input.notifier } : {}),
    logger,
    audit: input.audit,
    decisions: input.decisions,
    ...(input.rollout ? { rollout: input.rollout } : {}),
    ...(input.readPolicyArtefact ? { readPolicyArtefact: input.readPolicyArtefact } : {}),
    keys,
    jwks,
    limits: input.limits,
    ...(input.reloadPolicy ? { reloadPolicy: input.reloadPolicy } : {}),
    ...(input.reloadOperators ? { reloadOperators: input.reloadOperators } : {}),
    // A JWKS host's key moves through the use case that tells its agents (`deps` is complete by the time a request calls it).
    hostAuth: new HostAuthenticator({ store, clock, settings, budgets, importer, jwks, moveJwksKey: (host, next) => moveJwksHostKey(deps, host, next) }),
    agentAuth: new AgentAuthenticator({ store, clock, settings, keys, budgets, jwks }),
    runCapability: input.runCapability ?? createCapabilityRunner({ maxResponseBytes: config.UPSTREAM_MAX_RESPONSE_BYTES }),
  };

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  // A hop count or the proxies' addresses (config.ts): req.ip is then the rightmost address no
  // trusted proxy wrote, so entries a client put in front of X-Forwarded-For change nothing.
  app.set('trust proxy', config.TRUST_PROXY);
  // First: the request id (X-Request-Id), the request's context, and its access line and metrics.
  app.use(accessLog({ logger, metrics, trustProxy: config.TRUST_PROXY !== false }));
  app.use(express.json({ limit: config.MAX_BODY_BYTES, strict: false, type: ['application/json', 'application/*+json'] }));
  app.use(bodyDepthLimit(config.MAX_JSON_DEPTH));
  // The capability routes first: execute is the hot path, and every router a request passes
  // through before its own costs it a round of path matching. They are the app's own routes, not a
  // router of their own, for the same reason.
  addCapabilityRoutes(app, deps);
  app.use(discoveryRouter(deps));
  app.use(healthRouter(deps));
  app.use(openApiRouter(config));
  app.use(agentRouter(deps));
  app.use(hostRouter(deps));
  app.use(adminRouter(deps));
  const sessions = new PersonSessions(store, clock, {
    idleSeconds: config.SESSION_IDLE_SECONDS, maxSeconds: config.SESSION_MAX_SECONDS, freshSeconds: config.SIGN_IN_FRESH_SECONDS, cookieKey: config.SIGN_IN_COOKIE_KEY,
  });
  const passkeys = passkeySettingsFor(config.issuer, config.PROVIDER_NAME);
  app.use(devicePagesRouter({ ...deps, sessions, passkeys, oidc: input.oidc }));
  app.use(peopleApiRouter({ ...deps, sessions, passkeys }));
  // With METRICS_PORT set, /metrics is served on that port instead (src/main.ts), never here.
  if (config.METRICS_TOKEN !== undefined && config.METRICS_PORT === undefined) app.use(metricsRouter(() => metrics.render(), config.METRICS_TOKEN));
  app.use(notFoundHandler);
  app.use(errorHandler(logger));
  return { app, deps, metrics };
}

/** Every call to the OpenID Connect provider (discovery, token, keys, user info) is bounded by this. */
const OIDC_TIMEOUT_MS = 5000;
/** How long a stopping server waits for queued approval notices (webhook, mail) to go out; the rest are dropped and counted. */
const NOTIFIER_CLOSE_DEADLINE_MS = 3000;

/** What assembleService takes besides config; production passes only the logger and its metrics. */
interface AssemblyOptions {
  logger: Logger;
  /** Where metrics are recorded; absent: made from config (off unless METRICS_TOKEN or METRICS_PORT). */
  metrics?: Metrics;
  /** Default: the system clock. Tests move a manual one, so lifetimes elapse without sleeping. */
  clock?: Clock;
  /** Default: the catalog CAPABILITIES_FILE names. Tests give definitions of their own. */
  catalog?: Catalog;
  /** Tests only: the CA of their local JWKS servers, and how their names resolve. */
  jwksFetch?: JwksFetchTestSettings;
}

/** An assembled agentgate: the app and the parts whoever serves it starts, reloads and stops. */
export interface Service extends App {
  store: Store;
  catalog: Catalog;
  policy: PolicyEngine;
  operators: Operators;
  /** The audit trail's writer and forwarder; close() flushes it. */
  audit: AuditTrail;
  oidc: OidcSignIn | undefined;
  /** The start-up line's words for the store: which topology, where, and what a withdrawal waits for. */
  storeDescription: string;
  /** Reloads the policy artefact, recorded in the audit trail with what triggered it. */
  reloadPolicy(trigger: 'SIGHUP' | 'admin'): Promise<ReloadOutcome>;
  /** Re-imports the operator plugins, recorded likewise; refused sets keep the previous one serving. */
  reloadOperators(trigger: 'SIGHUP' | 'admin'): Promise<string[]>;
  /** Starts the periodic removal of what waited for approval too long; answers what stops it (close() does too). */
  startCleanup(): () => void;
  /** Stops the clean-up and the policy watcher, writes the queued audit events, then closes the plugins and the store. Never throws. */
  close(): Promise<void>;
}

/**
 * Builds one agentgate from its config, in start-up order: store, audit trail (it records from here
 * on, reloads included), catalog, rate limits, then the operator plugins and the policy together
 * (the plugin workers import on threads of their own while this thread compiles the policy), sign-in,
 * and the app. Warnings about settings that leave something unusable are logged on the way.
 */
export async function assembleService(config: Config, options: AssemblyOptions): Promise<Service> {
  const { logger } = options;
  const metrics = options.metrics ?? createMetrics(config);
  if (config.INSECURE_DEV_SIGN_IN) logger.warn('INSECURE_DEV_SIGN_IN is on: anyone can sign in to the approval page by typing a name and approve agents; for local use only');
  if (config.INSECURE_JWKS_ALLOWED_PRIVATE_RANGES.length > 0) {
    logger.warn('INSECURE_JWKS_ALLOWED_PRIVATE_RANGES is set: a JWKS URL a caller names may reach these private networks', { ranges: config.INSECURE_JWKS_ALLOWED_PRIVATE_RANGES });
  }
  if (config.INSECURE_TEST_HOOKS) logger.warn('INSECURE_TEST_HOOKS is on: admin test hooks can fabricate agent lifetimes; never use in production');
  const { store, redisClient, described: storeDescription } = await openStore(config, logger, metrics);
  const audit = startAuditTrail(config, store, logger);
  const catalog = options.catalog ?? (await loadCatalog(config.CAPABILITIES_FILE));
  const limits = createRateLimits(config, logger, redisClient, catalog.list(), metrics);
  // No in-process operator: plugin operators are answered per decision from the sandbox's results.
  const [plugins, engine] = await Promise.all([
    startOperators(
      { pluginsDir: config.PLUGINS_DIR, budgetMs: config.PLUGIN_BUDGET_MS, workers: config.PLUGIN_WORKERS, queueMax: config.PLUGIN_QUEUE_MAX, tripSeconds: config.PLUGIN_TRIP_SECONDS },
      logger,
      metrics,
    ),
    loadPolicyEngine({ wasmPath: config.POLICY_WASM_PATH, goldenPath: config.POLICY_GOLDEN_PATH, memoryMaxPages: config.POLICY_MEMORY_MAX_PAGES }),
  ]);
  const operators = plugins.registry;
  logger.info('constraint operators', { operators: operators.names() });
  const reloadOperators = auditedOperatorReload(audit.log, async () => {
    const names = await plugins.reload();
    logger.info('operator plugins reloaded', { operators: names });
    return names;
  });
  // Every decision from here on is recorded (decision-log.ts); the shadow's disagreements are kept
  // redacted as the records are, and counted by capability (a name outside the catalog as "(other)").
  const redaction = compileRedaction(config.DECISION_LOG_REDACT);
  const decisions = new DecisionLog({
    // Records wait for a ride as long as audit events do: one setting for what an idle instance holds back.
    store, sample: config.DECISION_LOG_SAMPLE, maxRecords: config.DECISION_LOG_MAX_RECORDS, redaction, flushMs: config.AUDIT_FLUSH_MS,
    writeDeadlineMs: redisCallDeadlineMs(config.REDIS_COMMAND_TIMEOUT_MS), logger,
  });
  const disagreements = new ShadowDisagreements(redaction);
  const candidates = new CandidatePolicies({
    memoryMaxPages: config.POLICY_MEMORY_MAX_PAGES, shadowQueueMax: config.POLICY_SHADOW_QUEUE_MAX, previewTimeoutMs: config.POLICY_PREVIEW_TIMEOUT_MS, logger,
    onDisagreement: (disagreement) => {
      disagreements.add(disagreement);
      const capability = catalog.get(disagreement.capability) ? disagreement.capability : '(other)';
      metrics.shadowDisagreement(disagreement.entrypoint, capability, disagreement.direction);
    },
  });
  const reloader = new AuditedPolicyReloader({ engine, logger, audit: audit.log, watchPaths: [config.POLICY_WASM_PATH, config.POLICY_GOLDEN_PATH] });
  if (config.POLICY_WATCH) reloader.start();
  const userCodes = await userCodesFor(config.USER_CODE_KEY, store, (message) => logger.warn(message));
  const oidc = config.OIDC_ISSUER && config.OIDC_CLIENT_ID
    ? await createOidcSignIn({
      issuer: config.OIDC_ISSUER, clientId: config.OIDC_CLIENT_ID, ...(config.OIDC_CLIENT_SECRET ? { clientSecret: config.OIDC_CLIENT_SECRET } : {}),
      redirectUri: `${config.issuer}/signin/callback`, freshSeconds: config.SIGN_IN_FRESH_SECONDS, timeoutMs: OIDC_TIMEOUT_MS,
    })
    : undefined;
  if (!passkeySettingsFor(config.issuer, config.PROVIDER_NAME) && catalog.list().some((c) => c.approval_strength === 'presence')) {
    logger.warn('ISSUER is an IP address, which cannot be a passkey relying party: capabilities marked approval_strength "presence" cannot be approved on the page (use a host name, e.g. http://localhost:3000)');
  }
  if (!oidc && !config.INSECURE_DEV_SIGN_IN) logger.warn('no sign-in is configured (OIDC_ISSUER): nobody can approve agents on the approval page; the admin API still can');
  const notifier = approvalNotifierFrom(config, logger);
  const built = buildApp({
    config, store, clock: options.clock ?? systemClock, policy: engine, catalog, operators, pluginSandbox: plugins.sandbox, userCodes, oidc, logger, limits, metrics,
    reloadPolicy: (artefact) => reloader.reload('admin', artefact),
    reloadOperators: () => reloadOperators('admin'),
    audit: audit.log,
    decisions,
    rollout: { candidates, disagreements },
    readPolicyArtefact: () => engine.readArtefact(),
    ...(notifier ? { notifier } : {}),
    jwksFetch: options.jwksFetch,
  });
  let stopCleanup = (): void => {};
  return {
    ...built, store, catalog, policy: engine, operators: plugins, audit, oidc, storeDescription,
    reloadPolicy: (trigger) => reloader.reload(trigger),
    reloadOperators,
    startCleanup() {
      stopCleanup();
      stopCleanup = scheduleCleanup(built.deps, config.CLEANUP_INTERVAL_SECONDS * 1000, config.PENDING_MAX_AGE_SECONDS * 1000, logger);
      return stopCleanup;
    },
    async close() {
      stopCleanup();
      reloader.stop();
      // The audit and decision queues are written while the store is still open (neither close throws).
      await Promise.all([
        audit.close(), decisions.close().catch((err: unknown) => logger.error('closing the decision log failed', { err })), candidates.close().catch(() => undefined),
        notifier?.close(NOTIFIER_CLOSE_DEADLINE_MS),
      ]);
      await Promise.allSettled([store.close(), plugins.close()]);
    },
  };
}

/**
 * The store, the Redis client the rate limiter shares with it (none for the memory store), and the
 * words the start-up line uses for it. Each store's module is imported only when it is the one
 * configured, so a memory-store start never loads the Redis client.
 */
async function openStore(config: Config, logger: Logger, metrics: Metrics): Promise<{ store: Store; redisClient?: unknown; described: string }> {
  if (!config.redis) {
    const { MemoryStore } = await import('./store/memory/memory-store.ts');
    logger.warn('no Redis (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS): using the in-memory store; nothing survives a restart and instances share nothing');
    // A failing invalidation listener is reported, as the Redis store reports its own.
    const store = new MemoryStore({ onListenerError: (err) => logger.warn('a key-cache invalidation listener failed', { error: err.message }) });
    return { store, described: 'memory (nothing survives a restart)' };
  }
  const { createRedisStore } = await import('./store/redis/redis-store.ts');
  const { redisStoreOptions } = await import('./store/redis/from-config.ts');
  const store = await createRedisStore({
    ...redisStoreOptions(config.redis, config),
    // Reconnection is automatic; operators still need to see that Redis went away.
    onConnectionError: (err) => {
      metrics.redisConnectionError();
      logger.warn('Redis connection error; requests needing it are refused with 503', { error: err.message });
    },
  });
  const durability = store.durability();
  logger.info('using Redis', { topology: config.redis.kind, target: store.target, keyPrefix: config.REDIS_KEY_PREFIX, withdrawalsWaitFor: durability });
  if (durability.startsWith('no replica')) {
    logger.warn('no Redis replica to wait for: a failover could undo an acknowledged revocation; add replicas (DESIGN §10) or set REDIS_WAIT_REPLICAS=0 to say this is intended');
  }
  return { store, redisClient: store.connection, described: `redis ${config.redis.kind} (${store.target}, prefix ${config.REDIS_KEY_PREFIX}; withdrawals wait for ${durability})` };
}
