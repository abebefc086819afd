// Structured logs: one JSON line per event on stdout, written by pino. Our small Logger
// interface stays what every module calls; pino is behind it, so no call site knows or cares.
// Lines carry an ISO `time`, `level` as a label and `msg`; error objects anywhere in the fields are
// written as their name, message and stack (and cause), never as `{}`.
//
// A busy server writes an access line per request, so the write path is kept cheap: lines are
// written to stdout in batches (BatchedStdout), and the ISO time is formatted once per second
// (isoTime); bench/RESULTS.md has what they cost.
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';
import { currentRequestContext } from './request-context.ts';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /**
   * Whether lines at `level` are written. Optional, so a hand-made logger in a test still fits;
   * callers that would build an expensive debug line ask first (debugEnabled below).
   */
  isLevelEnabled?(level: Exclude<LogLevel, 'silent'>): boolean;
}

/**
 * Field names whose values are replaced by `[redacted]` wherever these paths reach, whatever a
 * future log line puts there. Nothing logs these today; the list is the second line of defence
 * (the first is not logging secrets at all; test/integration/logging.secrets.test.ts checks both).
 * Paths never start with a wildcard: pino would then pass every field of every line through the
 * redactor, which the access line on the hot path should not pay for.
 */
const REDACTED_PATHS: readonly string[] = [
  'authorization', 'cookie', 'headers.authorization', 'headers.cookie', 'req.headers.authorization', 'req.headers.cookie',
  'token', 'jwt', 'accessToken', 'access_token', 'refreshToken', 'refresh_token', 'idToken', 'id_token',
  'password', 'secret', 'clientSecret', 'client_secret', 'adminToken', 'metricsToken', 'introspectionToken',
  'userCode', 'user_code', 'privateKey', 'private_key', 'privateJwk', 'body.token', 'body.user_code', 'body.password',
];

export const REDACTED = '[redacted]';

/**
 * A logger at `level`. Lines go to stdout, or to `write` when given (tests capture them; each call
 * receives one whole line ending in a newline).
 */
export function createLogger(level: LogLevel, write?: (line: string) => void): Logger {
  const stdout = write === undefined && level !== 'silent' ? new BatchedStdout() : undefined;
  const destination: DestinationStream = write ? { write } : (stdout ?? { write: () => {} });
  const base = pino(
    {
      level,
      // The process id tells cluster workers' lines apart; the host name is the platform's to add.
      base: { pid: process.pid },
      timestamp: () => `,"time":"${isoTime(Date.now())}"`,
      formatters: {
        level: (label) => ({ level: label }),
        log: withSerialisedErrors,
      },
      // Our formatter already turned errors into plain objects; pino's own `err` serializer would
      // rewrite them (`type` for `name`, causes folded into the stack), so it is replaced.
      serializers: { err: (value: unknown) => value },
      redact: { paths: [...REDACTED_PATHS], censor: REDACTED },
      mixin: requestIdOfLine,
      mixinMergeStrategy: withRequestId,
    },
    destination,
  );
  return wrap(base, stdout);
}

/** What requestIdOfLine answers when a line needs nothing added (compared by identity, never changed). */
const NOTHING_TO_ADD: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

/**
 * Every line written while a request is handled names its request id. A 500 is explained by the
 * line that logged its cause, deep in a service or the store guard, which knows nothing of HTTP;
 * the id comes from the request's context (src/request-context.ts), so no caller has to pass it
 * and the cause can be found from the `request_id` the client was given. A line that names one
 * itself (the access line) keeps its own.
 */
function requestIdOfLine(fields: object): Record<string, unknown> {
  if ((fields as { requestId?: unknown }).requestId !== undefined) return NOTHING_TO_ADD;
  const context = currentRequestContext();
  return context === undefined ? NOTHING_TO_ADD : { requestId: context.requestId };
}

/** pino's merge without its copy when there is nothing to add: the access line, outside requests. */
function withRequestId(fields: object, added: object): object {
  return added === NOTHING_TO_ADD ? fields : Object.assign(added, fields);
}

/** Our interface over pino; warnings and errors leave at once rather than with the next batch. */
function wrap(base: PinoLogger, stdout: BatchedStdout | undefined): Logger {
  return {
    debug: (msg, fields) => (fields === undefined ? base.debug(msg) : base.debug(fields, msg)),
    info: (msg, fields) => (fields === undefined ? base.info(msg) : base.info(fields, msg)),
    warn: (msg, fields) => {
      if (fields === undefined) base.warn(msg);
      else base.warn(fields, msg);
      stdout?.flush();
    },
    error: (msg, fields) => {
      if (fields === undefined) base.error(msg);
      else base.error(fields, msg);
      stdout?.flush();
    },
    isLevelEnabled: (level) => base.isLevelEnabled(level),
  };
}

let cachedSecond = Number.NaN;
let cachedPrefix = '';

/**
 * `new Date(ms).toISOString()`, with the part up to the seconds made once per second: the date
 * formatting was a fifth of an access line's cost.
 */
export function isoTime(epochMs: number): string {
  const second = Math.floor(epochMs / 1000);
  if (second !== cachedSecond) {
    cachedSecond = second;
    cachedPrefix = new Date(second * 1000).toISOString().slice(0, 20);
  }
  const ms = epochMs - second * 1000;
  return `${cachedPrefix}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z`;
}

/** How long a line may wait in BatchedStdout before it is written. */
const LOG_FLUSH_MS = 20;
/** Held lines are written at once when they reach this many characters, whatever the time. */
const LOG_HELD_MAX_CHARS = 64 * 1024;

/**
 * Stdout for log lines, written in batches: a line costs an array push, and what was logged in the
 * last LOG_FLUSH_MS leaves in one synchronous write (at 4,000 requests a second, one write(2) for
 * about 80 access lines). Warnings and errors are written at once (createLogger flushes after
 * them), and whatever is held when the process exits is written before it ends; a process killed
 * outright loses at most LOG_FLUSH_MS of info and debug lines.
 *
 * Measured under load: pino's own asynchronous writer cost the event loop about 3.5 µs a
 * line (it measures its whole pending buffer on every write, and each write is a thread-pool round
 * trip), and one synchronous write per line about 2 µs; batched, the write is a rounding error. A
 * reader that stops reading (a full pipe) makes the server wait rather than buffer without bound.
 * sonic-boom does the writing: it retries partial and EAGAIN writes.
 */
class BatchedStdout implements DestinationStream {
  readonly #sink = pino.destination({ dest: 1, sync: true });
  #lines: string[] = [];
  #heldChars = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor() {
    process.once('exit', () => this.flush());
  }

  write(line: string): void {
    this.#lines.push(line);
    this.#heldChars += line.length;
    if (this.#heldChars >= LOG_HELD_MAX_CHARS) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), LOG_FLUSH_MS).unref();
  }

  /** Writes every line held, now. */
  flush(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (this.#lines.length === 0) return;
    const chunk = this.#lines.join('');
    this.#lines = [];
    this.#heldChars = 0;
    this.#sink.write(chunk);
  }
}

/** True when `logger` writes debug lines (a logger that cannot say is assumed to). */
export function debugEnabled(logger: Logger): boolean {
  return logger.isLevelEnabled?.('debug') ?? true;
}

/** How deep into nested fields errors are looked for; deeper values are written as they are. */
const ERROR_SEARCH_DEPTH = 4;

/**
 * The fields with every Error (at any key, up to ERROR_SEARCH_DEPTH levels of plain objects and
 * arrays) replaced by {name, message, stack, code?, cause?}. The caller's object is not changed:
 * a copy is made only along the path to an error, so the common line without one costs a scan.
 */
export function withSerialisedErrors(fields: Record<string, unknown>): Record<string, unknown> {
  return (serialiseErrorsIn(fields, ERROR_SEARCH_DEPTH) as Record<string, unknown>) ?? fields;
}

function serialiseErrorsIn(value: unknown, depth: number): unknown {
  if (value instanceof Error) return serialiseError(value, depth);
  if (depth === 0 || typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const next = serialiseErrorsIn(item, depth - 1);
      if (next !== item) (copy ??= [...value])[i] = next;
    });
    return copy ?? value;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return value;
  let copy: Record<string, unknown> | undefined;
  for (const key in value) {
    const item = (value as Record<string, unknown>)[key];
    const next = serialiseErrorsIn(item, depth - 1);
    if (next !== item) (copy ??= { ...(value as Record<string, unknown>) })[key] = next;
  }
  return copy ?? value;
}

function serialiseError(error: Error, depth: number): Record<string, unknown> {
  const code = (error as NodeJS.ErrnoException).code;
  const cause = error.cause;
  return {
    name: error.name,
    message: error.message,
    stack: error.stack,
    ...(typeof code === 'string' ? { code } : {}),
    ...(cause !== undefined && depth > 0 ? { cause: cause instanceof Error ? serialiseError(cause, depth - 1) : cause } : {}),
  };
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
