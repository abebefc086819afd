// A small structured logger: one JSON line per event on stdout. Writes to a pipe are asynchronous
// in Node, so logging does not block the request path; debug lines cost one comparison when off.

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(level: LogLevel, write: (line: string) => void = (l) => process.stdout.write(l)): Logger {
  const threshold = RANK[level];
  const emit = (lvl: Exclude<LogLevel, 'silent'>, msg: string, fields?: Record<string, unknown>) => {
    if (RANK[lvl] < threshold) return;
    write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields }, errorReplacer)}\n`);
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

/** Errors serialise to their name, message and stack instead of `{}`. */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

export const silentLogger: Logger = createLogger('silent');

/**
 * At most one log line per key per window, for failures that can repeat on every request (a broken
 * plugin, a stray rejection): admit() answers null to stay quiet, else how many occurrences of that
 * key went unlogged since its previous line. Keys come from a small set (operator names times a few
 * kinds); the map is cleared if it ever grows past 10,000.
 */
export class LogThrottle {
  readonly #windowMs: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, { loggedAtMs: number; suppressed: number }>();

  constructor(windowMs: number, now: () => number = Date.now) {
    this.#windowMs = windowMs;
    this.#now = now;
  }

  admit(key: string): number | null {
    const nowMs = this.#now();
    const entry = this.#entries.get(key);
    if (entry && nowMs - entry.loggedAtMs < this.#windowMs) {
      entry.suppressed++;
      return null;
    }
    const suppressed = entry?.suppressed ?? 0;
    if (this.#entries.size > 10_000) this.#entries.clear();
    this.#entries.set(key, { loggedAtMs: nowMs, suppressed: 0 });
    return suppressed;
  }
}
