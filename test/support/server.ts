// A real agentgate HTTP server on loopback for integration tests: real store (memory or Redis),
// real compiled policy, real catalog, and a manual clock so lifetimes move without sleeping.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildApp, type App } from '../../src/app.ts';
import { ManualClock } from '../../src/clock.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { buildCatalog, catalogFileSchema, loadCatalog, type Catalog } from '../../src/catalog/catalog.ts';
import { silentLogger, type Logger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { startOperators } from '../../src/operators/setup.ts';
import { userCodesFor } from '../../src/services/approvals/user-codes.ts';
import { createOidcSignIn } from '../../src/people/sign-in/oidc.ts';
import { createRateLimits } from '../../src/ratelimit/limits.ts';
import { loadPolicyEngine } from '../../src/policy/engine.ts';
import { AuditedPolicyReloader, auditedOperatorReload, startAuditTrail, type AuditTrail } from '../../src/audit/trail.ts';
import { MemoryStore } from '../../src/store/memory/memory-store.ts';
import { createRedisStore } from '../../src/store/redis/redis-store.ts';
import { redisStoreOptions } from '../../src/store/redis/from-config.ts';
import type { Cluster } from 'ioredis';
import type { Store } from '../../src/store/store.ts';
import { SERVICE_POLICY } from './policies.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from './redis.ts';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestServerOptions {
  store?: 'memory' | 'redis';
  env?: Record<string, string>;
  /** Catalog definitions replacing config/capabilities.json. */
  capabilities?: unknown[];
  /** Where operator plugins come from (default: the shipped plugins/). */
  pluginsDir?: string;
  /** A specific Redis for store 'redis' (default: test/support/redis.ts finds one). */
  redisUrl?: string;
  /**
   * People sign in through a real OpenID Connect provider: called with the server's callback URL
   * (known only once it listens), it starts the provider and names the client.
   */
  oidc?: (redirectUri: string) => Promise<{ issuer: string; clientId: string; clientSecret?: string }>;
  /**
   * The host name of the server's issuer (default 127.0.0.1). Pages that use passkeys need
   * `localhost`: an IP address is never a valid WebAuthn relying-party id. It still listens on 127.0.0.1.
   */
  issuerHost?: '127.0.0.1' | 'localhost';
  /** A Redis key prefix shared with another test server (two instances on one Redis). */
  redisPrefix?: string;
  /** Where every part of the server logs (default: nowhere). */
  logger?: Logger;
}

export interface TestServer {
  baseUrl: string;
  config: Config;
  clock: ManualClock;
  app: App;
  store: Store;
  catalog: Catalog;
  /** The audit trail's writer and forwarder (closed, so flushed, by close()). */
  audit: AuditTrail;
  close(): Promise<void>;
}

export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const prefix = options.redisPrefix ?? uniquePrefix('http');
  const config = loadConfig({
    PORT: String(port),
    ISSUER: `http://${options.issuerHost ?? '127.0.0.1'}:${port}`,
    ADMIN_TOKEN,
    INSECURE_TEST_HOOKS: 'true',
    LOG_LEVEL: 'silent',
    REDIS_KEY_PREFIX: prefix,
    // Generous limits: only the rate-limit tests tighten them.
    RATE_LIMIT_AGENT_PER_MINUTE: '100000',
    RATE_LIMIT_HOST_PER_MINUTE: '100000',
    RATE_LIMIT_STATUS_PER_MINUTE: '100000',
    RATE_LIMIT_IP_PER_MINUTE: '100000',
    RATE_LIMIT_UNKNOWN_HOST_REGISTRATIONS_PER_HOUR: '100000',
    RATE_LIMIT_REGISTRATIONS_PER_HOUR: '100000',
    // The service's tests run against a committed copy of the default policy, never the shipped
    // artefact, so a security team's change to policies/ cannot break them (test/support/policies.ts).
    POLICY_WASM_PATH: SERVICE_POLICY.wasmPath,
    POLICY_GOLDEN_PATH: SERVICE_POLICY.goldenPath,
    ...options.env,
  });
  const clock = new ManualClock(Date.now());
  const logger = options.logger ?? silentLogger;
  // Off unless the test's env sets METRICS_TOKEN or METRICS_PORT, as in production.
  const metrics = createMetrics(config);
  let store: Store;
  let redisClient: unknown;
  let cleanupStore: () => Promise<void>;
  if (options.store === 'redis') {
    // A topology the test's env names (REDIS_CLUSTER_NODES, REDIS_SENTINELS), or one Redis.
    const topology = config.redis ?? { kind: 'single' as const, url: options.redisUrl ?? (await redisUrlForTests()), tls: false };
    const redisStore = await createRedisStore({ ...redisStoreOptions(topology, config), onConnectionError: () => metrics.redisConnectionError() });
    store = redisStore;
    redisClient = redisStore.connection;
    // Each master holds its own slots' keys; a Sentinel set's servers are the test's own throwaways.
    const urls = topology.kind === 'single'
      ? [topology.url]
      : topology.kind === 'cluster' ? (redisStore.connection as Cluster).nodes('master').map((node) => `redis://${node.options.host}:${node.options.port}`) : [];
    cleanupStore = async () => {
      await store.close();
      await Promise.all(urls.map((url) => deletePrefix(url, config.REDIS_KEY_PREFIX)));
    };
  } else {
    store = new MemoryStore();
    cleanupStore = () => store.close();
  }
  const catalog = options.capabilities
    ? buildCatalog(catalogFileSchema.parse({ capabilities: options.capabilities }).capabilities)
    : await loadCatalog(config.CAPABILITIES_FILE);
  const plugins = await startOperators({
    pluginsDir: options.pluginsDir ?? config.PLUGINS_DIR,
    budgetMs: config.PLUGIN_BUDGET_MS,
    workers: config.PLUGIN_WORKERS,
    queueMax: config.PLUGIN_QUEUE_MAX,
    tripSeconds: config.PLUGIN_TRIP_SECONDS,
  }, logger, metrics);
  const operators = plugins.registry;
  const policy = await loadPolicyEngine({ wasmPath: config.POLICY_WASM_PATH, goldenPath: config.POLICY_GOLDEN_PATH });
  const audit = startAuditTrail(config, store, logger);
  const reloader = new AuditedPolicyReloader({ engine: policy, logger, audit: audit.log, watchPaths: [config.POLICY_WASM_PATH] });
  const limits = createRateLimits(config, logger, redisClient, catalog.list(), metrics);
  const userCodes = await userCodesFor(config.USER_CODE_KEY, store, () => {});
  const redirectUri = `http://${options.issuerHost ?? '127.0.0.1'}:${port}/signin/callback`;
  const provider = options.oidc ? await options.oidc(redirectUri) : undefined;
  const oidc = provider
    ? await createOidcSignIn({ ...provider, redirectUri, freshSeconds: config.SIGN_IN_FRESH_SECONDS, timeoutMs: 5000 })
    : undefined;
  const app = buildApp({
    config, store, clock, policy, catalog, operators, pluginSandbox: plugins.sandbox, userCodes, oidc, logger, limits, metrics,
    reloadOperators: () => auditedOperatorReload(audit.log, () => plugins.reload())('admin'),
    audit: audit.log,
    reloadPolicy: () => reloader.reload('admin'),
  });
  server.on('request', app.app);
  return {
    baseUrl: `http://${options.issuerHost ?? '127.0.0.1'}:${port}`,
    config,
    clock,
    app,
    store,
    catalog,
    audit,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await plugins.close();
      await audit.close();
      await cleanupStore();
    },
  };
}
