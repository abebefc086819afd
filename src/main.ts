// Start-up: compile cache -> config -> logger -> process guards and signals -> the service,
// assembled from config by src/app.ts (store, audit trail, catalog, rate limits, operator plugins
// with the policy, sign-in, app) -> listen; then SIGHUP reloads and a graceful drain. A cluster
// primary stops after the logger: it forks the workers.
//
// Only Node's own modules are imported statically. Everything else is imported once the compile
// cache is on, so that Node keeps the type-stripped and compiled code of the whole module graph on
// disk and a second start skips that work, and once the process knows its role, so that a cluster
// primary, which serves nothing, never loads the server. A start used to cost about 1.1 s of CPU
// (about 0.7 s on one core, the rest on the plugin workers); with a warm cache it costs about a
// third less. Tests start several servers at once, and on a busy two-core machine that CPU decides
// how soon they listen (test/support/agentgate-process.ts).
import cluster from 'node:cluster';
import type { Server } from 'node:http';
import nodeModule from 'node:module';
import { fileURLToPath } from 'node:url';
import type { Config } from './config.ts';
import type { RenderMetrics } from './http/metrics.ts';
import type { Logger } from './logger.ts';

/**
 * Turns on Node's on-disk compile cache for this process, its plugin worker threads and its cluster
 * workers, unless NODE_COMPILE_CACHE already names a directory (Node has then turned it on itself)
 * or NODE_DISABLE_COMPILE_CACHE turns it off. The cache sits in node_modules/.cache, beside the code
 * it caches and trusted as much, never in a shared temporary directory another user could write to;
 * where that directory cannot be written (the Docker image runs as a user who owns nothing there),
 * Node compiles as before and says nothing. Only the TypeScript sources start this way: the Node 20
 * build (dist/) has no compile cache to turn on.
 */
function enableCompileCache(): void {
  if (!import.meta.url.endsWith('.ts') || process.env.NODE_COMPILE_CACHE || typeof nodeModule.enableCompileCache !== 'function') return;
  const result = nodeModule.enableCompileCache(fileURLToPath(new URL('../node_modules/.cache/agentgate-compile/', import.meta.url)));
  // Worker threads and forked workers inherit the environment, and with it the cache.
  if (result.directory) process.env.NODE_COMPILE_CACHE = result.directory;
}

async function main(): Promise<void> {
  enableCompileCache();
  const { ConfigError, loadConfig } = await import('./config.ts');
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const { createLogger } = await import('./logger.ts');
  const logger = createLogger(config.LOG_LEVEL);
  if (config.WORKERS > 1 && cluster.isPrimary) {
    // The primary serves every worker's metrics, added up; workers serve none themselves.
    if (config.METRICS_PORT !== undefined) {
      const { clusterMetricsRenderer } = await import('./metrics/metrics.ts');
      await listenForMetrics(config, clusterMetricsRenderer(), logger);
    }
    superviseWorkers(config.WORKERS, logger);
    return;
  }
  await serve(config, logger);
}

/**
 * One agentgate server (a worker, in cluster mode): the service assembled from config (src/app.ts
 * assembleService, as the tests assemble it), then what only a process does: its guards and
 * signals, SIGHUP reloads, the metrics port, listening, the clean-up job and a graceful drain.
 */
async function serve(config: Config, logger: Logger): Promise<void> {
  const { assembleService } = await import('./app.ts');
  const { approvalMethods } = await import('./services/approvals/ciba.ts');
  const { createHttpServer, drain } = await import('./http/server.ts');
  const { answerClusterScrapes, createMetrics } = await import('./metrics/metrics.ts');
  const { installProcessGuards } = await import('./process-guards.ts');
  // Off (records nothing) unless METRICS_TOKEN or METRICS_PORT is set.
  const metrics = createMetrics(config);
  if (cluster.isWorker) answerClusterScrapes(metrics);
  // Until the server listens, a fatal error or a stop signal simply ends the process; afterwards it
  // drains first. `npm start` execs node (package.json), so the signals npm forwards arrive here. A
  // repeated signal changes nothing: under npm one Ctrl-C arrives twice, from the terminal to the
  // whole process group and forwarded by npm.
  let stop = (_reason: string, exitCode: number): void => process.exit(exitCode);
  installProcessGuards(logger, () => stop('uncaughtException', 1));
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => stop(signal, 0));
  const service = await assembleService(config, { logger, metrics });
  const { policy, oidc } = service;
  const operators = service.operators.registry;
  process.on('SIGHUP', () => {
    void service.reloadPolicy('SIGHUP');
    service.reloadOperators('SIGHUP').catch((err: unknown) => logger.error('operator plugins refused on SIGHUP; the previous set keeps serving', { err }));
  });
  // A worker's metrics are served by the primary (it asks each worker over IPC).
  const metricsServer = config.METRICS_PORT !== undefined && !cluster.isWorker ? await listenForMetrics(config, () => metrics.render(), logger) : undefined;

  // Header, request and keep-alive timeouts and the connection caps come from config (SECURITY.md).
  const server: Server = createHttpServer(config, service.app);
  const stopCleanup = service.startCleanup();
  // A port in use (EADDRINUSE) or not ours to bind (EACCES) ends the process at once: exiting is
  // what makes the failure visible, and the Redis connection and plugin workers die with it.
  server.on('error', (err: NodeJS.ErrnoException) => {
    logger.error('cannot listen; exiting', { host: config.HOST, port: config.PORT, code: err.code, error: err.message });
    process.exit(1);
  });
  server.listen(config.PORT, config.HOST, () => {
    // One line that says what is in force, so an operator reading the log needs nothing else.
    logger.info('agentgate listening', {
      // Every line carries the process id already (src/logger.ts).
      host: config.HOST, port: config.PORT, issuer: config.issuer,
      store: service.storeDescription,
      policy: { sha256: policy.info().sha256, path: config.POLICY_WASM_PATH, watched: config.POLICY_WATCH },
      operators: { builtin: operators.names().filter((n) => !operators.isPlugin(n)), plugins: operators.names().filter((n) => operators.isPlugin(n)), dir: config.PLUGINS_DIR },
      approvalMethods: approvalMethods(service.deps.notifier),
      notifications: service.deps.notifier?.channels ?? 'none (APPROVAL_WEBHOOK_URL or SMTP_URL: CIBA needs one)',
      signIn: [...(oidc ? ['oidc'] : []), ...(config.INSECURE_DEV_SIGN_IN ? ['insecure-dev'] : [])],
      adminApi: config.ADMIN_TOKEN ? 'on' : 'off (ADMIN_TOKEN is not set)',
      metrics: describeMetrics(config),
    });
    // What the start compiled is written now, not at exit, so a server that is killed still leaves
    // its cache for the next start.
    if (typeof nodeModule.flushCompileCache === 'function') nodeModule.flushCompileCache();
  });

  let stopping = false;
  stop = (reason: string, exitCode: number) => {
    if (stopping) return;
    stopping = true;
    logger.info('shutting down', { reason, timeoutMs: config.SHUTDOWN_TIMEOUT_MS });
    const force = setTimeout(() => {
      logger.error('requests still open at the shutdown timeout; exiting', { timeoutMs: config.SHUTDOWN_TIMEOUT_MS });
      process.exit(exitCode === 0 ? 1 : exitCode);
    }, config.SHUTDOWN_TIMEOUT_MS);
    force.unref();
    stopCleanup();
    Promise.all([drain(server), metricsServer ? drain(metricsServer) : undefined])
      .then(() => service.close())
      .finally(() => {
        logger.info('stopped', { reason, exitCode });
        process.exit(exitCode);
      });
  };
}

/** Where /metrics is served, for the start-up line. */
function describeMetrics(config: Config): string {
  if (config.METRICS_PORT !== undefined) return `on ${config.HOST}:${config.METRICS_PORT}/metrics${config.METRICS_TOKEN ? ' (bearer METRICS_TOKEN)' : ''}`;
  if (config.METRICS_TOKEN !== undefined) return 'on /metrics (bearer METRICS_TOKEN)';
  return 'off (set METRICS_TOKEN or METRICS_PORT); /metrics answers 404 and nothing is recorded';
}

/**
 * The listener of METRICS_PORT on HOST, with the main server's connection limits and timeouts. Like
 * the main port, a port that cannot be bound ends the process: a deployment that asked for metrics
 * would otherwise run without them unnoticed.
 */
async function listenForMetrics(config: Config, render: RenderMetrics, logger: Logger): Promise<Server> {
  const { metricsApp } = await import('./http/metrics.ts');
  const { createHttpServer } = await import('./http/server.ts');
  const server = createHttpServer(config, metricsApp(render, config.METRICS_TOKEN, logger));
  server.on('error', (err: NodeJS.ErrnoException) => {
    logger.error('cannot listen for metrics; exiting', { host: config.HOST, port: config.METRICS_PORT, code: err.code, error: err.message });
    process.exit(1);
  });
  server.listen(config.METRICS_PORT, config.HOST, () => logger.info('metrics listening', { host: config.HOST, port: config.METRICS_PORT }));
  return server;
}

/**
 * Node cluster mode: the primary only forks workers that share the listening port and relays
 * signals; each worker is a full agentgate on the shared Redis. A worker that dies is replaced,
 * unless the primary is shutting down.
 */
function superviseWorkers(count: number, logger: Logger): void {
  let stopping = false;
  let exitCode = 0;
  // Workers that reached listening. A worker that exits before it listens failed at start-up (a busy
  // port, say) and its replacement would fail the same way, so the primary stops them all and exits
  // with status 1 rather than restart workers forever while serving nothing.
  const listened = new Set<number>();
  for (let i = 0; i < count; i++) cluster.fork();
  cluster.on('listening', (worker) => listened.add(worker.id));
  cluster.on('exit', (worker, code, signal) => {
    if (!stopping && !listened.has(worker.id)) {
      logger.error('a worker failed to start; stopping', { pid: worker.process.pid, code, signal });
      exitCode = 1;
      // Also the status of an exit the primary reaches by running out of work, should the last
      // worker's 'exit' find it still listed (Node drops a worker once it both exited and
      // disconnected, in either order): a failed start never ends with status 0.
      process.exitCode = 1;
      relay('SIGTERM');
    }
    if (stopping) {
      const alive = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined && w.id !== worker.id && !w.isDead());
      if (alive.length === 0) process.exit(exitCode);
      return;
    }
    logger.error('worker exited; starting another', { pid: worker.process.pid, code, signal });
    cluster.fork();
  });
  const relay = (signal: NodeJS.Signals) => {
    if (signal !== 'SIGHUP') stopping = true;
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill(signal);
  };
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => relay(signal));
  logger.info('agentgate primary started workers', { workers: count });
}

main().catch((err: unknown) => {
  process.stderr.write(`agentgate failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
