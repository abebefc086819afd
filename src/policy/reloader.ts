// Live policy changes (DESIGN §5): the artefact is reloaded on a change of the file, on SIGHUP and
// on an admin call. The engine checks entrypoints and golden decisions before it swaps one
// reference; a refused artefact changes nothing and the old policy keeps serving.
import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from '../logger.ts';
import type { WasmPolicyEngine } from './engine.ts';

export type ReloadTrigger = 'file' | 'SIGHUP' | 'admin';

export type ReloadOutcome =
  | { ok: true; sha256: string; generation: number }
  | { ok: false; error: string };

export class PolicyReloader {
  readonly #engine: WasmPolicyEngine;
  readonly #logger: Logger;
  readonly #watchPaths: string[];
  readonly #debounceMs: number;
  #watchers: FSWatcher[] = [];
  #timer: NodeJS.Timeout | null = null;

  constructor(options: { engine: WasmPolicyEngine; logger: Logger; watchPaths: string[]; debounceMs?: number }) {
    this.#engine = options.engine;
    this.#logger = options.logger;
    this.#watchPaths = options.watchPaths;
    this.#debounceMs = options.debounceMs ?? 250;
  }

  /**
   * Reloads now, the file's artefact or the given bytes (a previewed artefact, a promoted shadow);
   * never throws (a refusal is logged and reported).
   */
  async reload(trigger: ReloadTrigger, artefact?: Uint8Array): Promise<ReloadOutcome> {
    const before = this.#engine.info();
    try {
      await this.#engine.reload(artefact);
      const after = this.#engine.info();
      this.#logger.info('policy reloaded', { trigger, sha256: after.sha256, generation: after.generation, previous: before.sha256 });
      return { ok: true, sha256: after.sha256, generation: after.generation };
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      this.#logger.error('policy reload refused; the previous policy keeps serving', { trigger, error, sha256: before.sha256 });
      return { ok: false, error };
    }
  }

  /**
   * Watches the directories of the artefact and golden file (a rename-into-place replaces the
   * inode, which a watch on the file itself would miss) and reloads once a burst of events settles.
   */
  start(): void {
    const byDirectory = new Map<string, Set<string>>();
    for (const path of this.#watchPaths) {
      const names = byDirectory.get(dirname(path)) ?? new Set<string>();
      names.add(basename(path));
      byDirectory.set(dirname(path), names);
    }
    for (const [directory, names] of byDirectory) {
      const watcher = watch(directory, { persistent: false }, (_event, filename) => {
        if (filename === null || names.has(filename.toString())) this.#schedule();
      });
      watcher.on('error', (err) => this.#logger.warn('policy file watch failed', { directory, err }));
      this.#watchers.push(watcher);
    }
  }

  stop(): void {
    for (const watcher of this.#watchers) watcher.close();
    this.#watchers = [];
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #schedule(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.reload('file');
    }, this.#debounceMs);
    this.#timer.unref();
  }
}
