// A real agentgate HTTP server on loopback for integration tests, assembled by the same function
// as production (src/app.ts assembleService) and served by the same HTTP server (src/http/server.ts
// createHttpServer, with its limits and timeouts): real store (memory, or Redis in the topology the
// test's env names), real compiled policy, real catalog, real plugin sandbox. What differs is only
// what a test chooses through settings, a manual clock so lifetimes move without sleeping, and
// catalog definitions a test may give of its own. A describe block whose tests share one server (or
// two instances on one Redis) declares it with testServerForBlock (or twoInstancesForBlock) below.
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe } from 'vitest';
import type { Cluster } from 'ioredis';
import { assembleService, type JwksFetchTestSettings, type Service } from '../../src/app.ts';
import { buildCatalog, catalogFileSchema, type Catalog } from '../../src/catalog/catalog.ts';
import { ManualClock } from '../../src/common/clock.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import type { AuditTrail } from '../../src/audit/trail.ts';
import { createHttpServer } from '../../src/http/server.ts';
import { silentLogger, type Logger } from '../../src/logger.ts';
import type { RedisStore } from '../../src/store/redis/redis-store.ts';
import type { Store } from '../../src/store/store.ts';
import { SERVICE_POLICY } from './policies.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from './redis.ts';

/** The stores every HTTP-level test runs on. */
export const STORE_KINDS = ['memory', 'redis'] as const;
export type StoreKind = (typeof STORE_KINDS)[number];

/** A describe block run once on each store, titled "<title> (<kind> store)". */
export function forEachStore(title: string, body: (storeKind: StoreKind) => void): void {
  describe.each(STORE_KINDS)(`${title} (%s store)`, body);
}

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestServerOptions {
  store?: StoreKind;
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
  /** The CA of the test's JWKS servers (test/support/jwks-server.ts); their address needs INSECURE_JWKS_ALLOWED_PRIVATE_RANGES too. */
  jwksFetch?: JwksFetchTestSettings;
}

export interface TestServer {
  baseUrl: string;
  config: Config;
  clock: ManualClock;
  /** The assembled service: its app, the services' dependencies and its metrics. */
  app: Service;
  store: Store;
  catalog: Catalog;
  /** The audit trail's writer and forwarder (closed, so flushed, by close()). */
  audit: AuditTrail;
  close(): Promise<void>;
}

/** Redis settings name a topology; a test that gives none on the Redis store gets one Redis. */
const REDIS_TOPOLOGY_SETTINGS = ['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'];

export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const prefix = options.redisPrefix ?? uniquePrefix('http');
  const env: Record<string, string> = {
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
    RATE_LIMIT_ENROLLMENTS_PER_HOUR: '100000',
    // The service's tests run against a committed copy of the default policy, never the shipped
    // artefact, so a security team's change to policies/ cannot break them (test/support/policies.ts).
    POLICY_WASM_PATH: SERVICE_POLICY.wasmPath,
    POLICY_GOLDEN_PATH: SERVICE_POLICY.goldenPath,
    // A test reloads the policy when it means to (the reload tests turn watching on themselves).
    POLICY_WATCH: 'false',
    ...(options.pluginsDir ? { PLUGINS_DIR: options.pluginsDir } : {}),
    ...options.env,
  };
  const namesTopology = REDIS_TOPOLOGY_SETTINGS.some((name) => env[name] !== undefined);
  if (options.store === 'redis' && !namesTopology) env.REDIS_URL = options.redisUrl ?? (await redisUrlForTests());
  if (options.store !== 'redis' && namesTopology) throw new Error('a Redis topology was set for a test server on the memory store: pass store: "redis"');
  // The issuer names the port, which is known once the server listens: it listens first, with the
  // connection limits and timeouts of the same settings, and hands requests to the app once built.
  let service: Service | undefined;
  const server = createHttpServer(loadConfig(env), (req, res) => {
    if (service) service.app(req, res);
    else res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const baseUrl = `http://${options.issuerHost ?? '127.0.0.1'}:${port}`;
  const provider = options.oidc ? await options.oidc(`${baseUrl}/signin/callback`) : undefined;
  // A test's own ISSUER (an https name, say) stands; requests still go to the loopback address.
  const config = loadConfig({
    PORT: String(port),
    ISSUER: baseUrl,
    ...env,
    ...(provider ? { OIDC_ISSUER: provider.issuer, OIDC_CLIENT_ID: provider.clientId, ...(provider.clientSecret ? { OIDC_CLIENT_SECRET: provider.clientSecret } : {}) } : {}),
  });
  const clock = new ManualClock(Date.now());
  const catalog = options.capabilities ? buildCatalog(catalogFileSchema.parse({ capabilities: options.capabilities }).capabilities) : undefined;
  service = await assembleService(config, {
    logger: options.logger ?? silentLogger, clock, ...(catalog ? { catalog } : {}), ...(options.jwksFetch ? { jwksFetch: options.jwksFetch } : {}),
  });
  const { store } = service;
  // Each master holds its own slots' keys; a Sentinel set's servers are the test's own throwaways.
  const redisUrls = (): string[] => {
    if (!config.redis) return [];
    if (config.redis.kind === 'single') return [config.redis.url];
    if (config.redis.kind === 'sentinel') return [];
    return ((store as RedisStore).connection as Cluster).nodes('master').map((node) => `redis://${node.options.host}:${node.options.port}`);
  };
  const running = service;
  return {
    baseUrl,
    config,
    clock,
    app: running,
    store,
    catalog: running.catalog,
    audit: running.audit,
    async close() {
      const urls = redisUrls();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await running.close();
      await Promise.all(urls.map((url) => deletePrefix(url, config.REDIS_KEY_PREFIX)));
    },
  };
}

/**
 * One test server for the tests of the enclosing describe block (or file): started in the block's
 * beforeAll and closed in its afterAll, as most files did by hand. The server it answers can be
 * handed to a Client straight away, before it runs, because each of its properties reads the running
 * server when asked; asked outside the block's tests, it throws. `options` may be a function, for
 * what is known only once the block starts (a temporary plugins folder, say).
 */
export function testServerForBlock(options: TestServerOptions | (() => TestServerOptions) = {}): TestServer {
  let running: TestServer | undefined;
  beforeAll(async () => {
    running = await startTestServer(typeof options === 'function' ? options() : options);
  });
  afterAll(async () => {
    const stopping = running;
    running = undefined;
    await stopping?.close();
  });
  const current = (): TestServer => {
    if (!running) throw new Error("the block's test server runs only between its beforeAll and afterAll");
    return running;
  };
  return {
    get baseUrl() { return current().baseUrl; },
    get config() { return current().config; },
    get clock() { return current().clock; },
    get app() { return current().app; },
    get store() { return current().store; },
    get catalog() { return current().catalog; },
    get audit() { return current().audit; },
    close: () => current().close(),
  };
}

/**
 * Two instances of one deployment for the tests of the enclosing describe block: two test servers on
 * one Redis under one key prefix (`<prefixName>` made unique), each with `options`, so that what one
 * writes the other reads. Started and closed as testServerForBlock does.
 */
export function twoInstancesForBlock(prefixName: string, options: Omit<TestServerOptions, 'store' | 'redisPrefix'> = {}): [TestServer, TestServer] {
  const redisPrefix = uniquePrefix(prefixName);
  return [testServerForBlock({ ...options, store: 'redis', redisPrefix }), testServerForBlock({ ...options, store: 'redis', redisPrefix })];
}
