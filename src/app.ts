// The composition root: builds the Express app from explicit dependencies. Nothing here decides
// anything; it wires http -> services -> (auth, domain, policy, operators, store, execution).
import express, { type Express } from 'express';
import { AgentAuthenticator } from './auth/agent-auth.ts';
import { HostAuthenticator, type AuthSettings } from './auth/host-auth.ts';
import { chooseEd25519Verifier } from './auth/ed25519-verify.ts';
import { AgentKeyCache } from './auth/key-cache.ts';
import { KeyImporter } from './auth/keys.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Catalog } from './catalog/catalog.ts';
import { createCapabilityRunner, type CapabilityRunner } from './execution/handlers.ts';
import { adminRouter } from './http/admin.ts';
import { accessLog } from './http/access.ts';
import { bodyDepthLimit } from './http/body-depth.ts';
import { agentRouter } from './http/agent.ts';
import { capabilityRouter } from './http/capability.ts';
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
import type { OperatorRegistry } from './operators/registry.ts';
import type { PluginSandbox } from './operators/sandbox.ts';
import { instrumentPolicy } from './policy/instrumented.ts';
import type { PolicyEngine } from './policy/types.ts';
import type { RateLimits } from './ratelimit/limits.ts';
import type { ServiceDeps } from './services/deps.ts';
import { passkeySettingsFor } from './people/passkeys.ts';
import { PersonSessions } from './people/sessions.ts';
import type { OidcSignIn } from './people/sign-in/oidc.ts';
import type { UserCodes } from './services/approvals/user-codes.ts';
import { redisCallDeadlineMs } from './deadline.ts';
import { failClosedStore } from './store/guard.ts';
import type { Store } from './store/store.ts';

export interface AppDependencies {
  config: Config;
  store: Store;
  clock: Clock;
  policy: PolicyEngine;
  catalog: Catalog;
  operators: OperatorRegistry;
  pluginSandbox: PluginSandbox;
  userCodes: UserCodes;
  /** People sign in through this OpenID Connect provider on the approval page; absent: not configured. */
  oidc?: OidcSignIn | undefined;
  logger: Logger;
  limits: RateLimits;
  runCapability?: CapabilityRunner;
  reloadPolicy?: ServiceDeps['reloadPolicy'];
  reloadOperators?: ServiceDeps['reloadOperators'];
  /** The audit trail's writer (audit/trail.ts startAuditTrail); its owner flushes it at shutdown. */
  audit: ServiceDeps['audit'];
  /** Where metrics are recorded; absent: made from config (off unless METRICS_TOKEN or METRICS_PORT). */
  metrics?: Metrics;
}

export interface App {
  app: Express;
  deps: ServiceDeps;
  metrics: Metrics;
}

export function buildApp(input: AppDependencies): App {
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
  // Decisions are timed for metrics and, at debug, logged with their arguments' values redacted.
  const policy = instrumentPolicy(input.policy, metrics, logger);
  metrics.observe({ policy: input.policy, store, logger });
  // Another instance rotated or revoked an agent: drop our imported key so the next call re-reads it.
  input.store.onAgentInvalidation((agentId) => keys.invalidate(agentId));
  const deps: ServiceDeps = {
    config,
    store,
    clock,
    policy,
    catalog: input.catalog,
    operators: input.operators,
    pluginSandbox: input.pluginSandbox,
    userCodes: input.userCodes,
    logger,
    audit: input.audit,
    keys,
    limits: input.limits,
    ...(input.reloadPolicy ? { reloadPolicy: input.reloadPolicy } : {}),
    ...(input.reloadOperators ? { reloadOperators: input.reloadOperators } : {}),
    hostAuth: new HostAuthenticator({ store, clock, settings, limits: input.limits, importer }),
    agentAuth: new AgentAuthenticator({ store, clock, settings, keys, limits: input.limits }),
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
  // through before its own costs it a round of path matching.
  app.use(capabilityRouter(deps));
  app.use(discoveryRouter(config, input.limits, input.operators));
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
