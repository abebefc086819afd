// The operator plugins as a running server holds them: the registry (names and operand schemas,
// read at grant time) and the sandbox (worker threads that evaluate them at execute), loaded and
// reloaded together so the two always know the same plugin set.
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { loadPlugins } from './plugin-loader.ts';
import { OperatorRegistry } from './registry.ts';
import { PluginSandbox } from './sandbox.ts';

interface OperatorSettings {
  pluginsDir: string;
  budgetMs: number;
  workers: number;
  queueMax: number;
  /** How long a grant whose plugin calls overran the budget has them refused without running (PLUGIN_TRIP_SECONDS). */
  tripSeconds: number;
}

export interface Operators {
  registry: OperatorRegistry;
  sandbox: PluginSandbox;
  /** Re-imports the plugins; a broken set throws and the previous one keeps serving. */
  reload(): Promise<string[]>;
  close(): Promise<void>;
}

export async function startOperators(settings: OperatorSettings, logger: Logger, metrics?: Metrics): Promise<Operators> {
  const registry = new OperatorRegistry(await loadPlugins(settings.pluginsDir));
  const sandbox = new PluginSandbox({
    budgetMs: settings.budgetMs, workers: settings.workers, queueMax: settings.queueMax, tripMs: settings.tripSeconds * 1000,
    logger, ...(metrics ? { metrics } : {}),
  });
  await sandbox.setModules(registry.pluginModules());
  // One reload at a time, so an older plugin set can never be swapped in after a newer one.
  let reloads: Promise<unknown> = Promise.resolve();
  const reloadOnce = async (): Promise<string[]> => {
    const next = new OperatorRegistry(await loadPlugins(settings.pluginsDir));
    await sandbox.setModules(next.pluginModules());
    registry.replacePlugins(next.plugins());
    return registry.names();
  };
  return {
    registry,
    sandbox,
    reload() {
      const run = reloads.then(reloadOnce, reloadOnce);
      reloads = run.catch(() => undefined);
      return run;
    },
    close: () => sandbox.close(),
  };
}
