// The hot path's own connection to a single Redis: it carries one script, the execute round trip
// (scripts.ts EXECUTE_ROUND_TRIP), and nothing else. Through ioredis that one call cost about a
// sixth of an execute's server CPU more than it does here (its command and pipeline objects, a
// timer per command, its parser; bench/RESULTS.md, "The execute script on a connection of its
// own"); here it is a string written to a socket and a reply read by resp-replies.ts.
//
// It is an optimisation only, never a second way to fail open:
// - Only a single Redis given by a URL gets one, at the address, user and database ioredis parsed
//   from it (scriptConnectionAddress); a Cluster, Sentinel or a Unix socket keeps every command on
//   ioredis, which understands them.
// - While it is not connected the store runs the script on its ioredis connection as before
//   (RedisAgentRecords.executeRoundTrip), so a reconnect here costs speed, not answers.
// - A call it has sent and that does not complete rejects with ScriptConnectionError, which the
//   store's guard answers 503 like any Redis outage. Nothing is retried on another connection once
//   written: the script may have run.
// - Replies are matched to calls by order, so a call that does not answer within
//   commandTimeoutMs ends the connection: every call waiting on it fails, and a late reply can
//   never be read as another call's answer. One timer watches the oldest call, not one per call.
import { createHash } from 'node:crypto';
import net from 'node:net';
import tls from 'node:tls';
import type { RedisOptions } from 'ioredis';
import { encodeCommand, RedisReplyError, RespReplyReader, type RespValue } from './resp-replies.ts';

/** Where the hot path's connection goes, with what it needs to log in. */
export interface ScriptConnectionAddress {
  host: string;
  port: number;
  /** The address family to resolve the host in (4 or 6), when set. */
  family?: number | undefined;
  username?: string | undefined;
  password?: string | undefined;
  db: number;
  /** TLS options exactly as the command connection passes them to `tls.connect` (null: no TLS). */
  tls: tls.ConnectionOptions | null;
}

/**
 * The address the command connection (ioredis) uses, read from the options ioredis parsed from the
 * URL, so that the two connections reach the same server as the same user in the same database by
 * construction; null for a Unix socket, which only ioredis is given.
 */
export function scriptConnectionAddress(parsed: Pick<RedisOptions, 'host' | 'port' | 'family' | 'path' | 'username' | 'password' | 'db' | 'tls'>): ScriptConnectionAddress | null {
  if (parsed.path || typeof parsed.host !== 'string' || typeof parsed.port !== 'number') return null;
  // ioredis skips SELECT for a database that is not a number (it then uses 0); rather than copy
  // that, such a URL keeps the script on ioredis.
  if (parsed.db !== undefined && !(Number.isSafeInteger(parsed.db) && parsed.db >= 0)) return null;
  return {
    host: parsed.host,
    port: parsed.port,
    family: parsed.family,
    username: parsed.username,
    password: parsed.password,
    db: parsed.db ?? 0,
    tls: parsed.tls ?? null,
  };
}

/** A call this connection could not complete: Redis is unreachable, closed it or did not answer in time. */
export class ScriptConnectionError extends Error {
  /** The socket's system error code (ECONNREFUSED...), when that is what failed. */
  readonly code: string | undefined;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ScriptConnectionError';
    const code = (options?.cause as NodeJS.ErrnoException | undefined)?.code;
    this.code = typeof code === 'string' ? code : undefined;
  }
}

interface ScriptConnectionOptions {
  /** The script and how many of its arguments are keys. */
  script: { lua: string; numberOfKeys: number };
  connectTimeoutMs: number;
  /** A call not answered within this time ends the connection. */
  commandTimeoutMs: number;
  /** How long to wait before the given reconnect attempt (1, 2, ...). */
  reconnectDelayMs: (attempt: number) => number;
  /** Why the connection went down, each time it does (the store logs it as it logs ioredis's). */
  onConnectionError?: ((error: Error) => void) | undefined;
}

interface Call {
  resolve: (reply: unknown) => void;
  reject: (error: Error) => void;
  /** The script's keys then arguments, kept to send them again with EVAL if Redis lost the script. */
  args: readonly string[] | null;
  sentAtMs: number;
}

type State = 'connecting' | 'ready' | 'down';

export class ScriptConnection {
  readonly #address: ScriptConnectionAddress;
  readonly #options: ScriptConnectionOptions;
  readonly #sha: string;
  readonly #numberOfKeys: string;
  #state: State = 'down';
  #socket: net.Socket | null = null;
  #reader = new RespReplyReader();
  /** Calls written or about to be, in the order their replies will come. */
  #calls: Call[] = [];
  /** Commands of this turn of the event loop, written together at its end. */
  #unsent: string[] = [];
  #flushScheduled = false;
  #watchdog: NodeJS.Timeout | null = null;
  /** The watchdog found the oldest call late and looks once more after this turn's I/O. */
  #rechecking = false;
  #reconnectTimer: NodeJS.Timeout | null = null;
  #attempt = 0;
  /** Set by close: no new calls, no reconnect. */
  #closing = false;
  #closed: Promise<void> | null = null;
  /** Set while close waits for the calls already sent: called once none is left, or the connection failed. */
  #onDrained: (() => void) | null = null;
  #firstAttempt: Promise<void>;
  #settleFirstAttempt: () => void = () => undefined;

  constructor(address: ScriptConnectionAddress, options: ScriptConnectionOptions) {
    this.#address = address;
    this.#options = options;
    this.#sha = createHash('sha1').update(options.script.lua).digest('hex');
    this.#numberOfKeys = String(options.script.numberOfKeys);
    this.#firstAttempt = new Promise((resolve) => {
      this.#settleFirstAttempt = resolve;
    });
    this.#connect();
  }

  /** Whether calls go out on this connection now; when not, the caller uses its other one. */
  get ready(): boolean {
    return this.#state === 'ready' && !this.#closing;
  }

  /** Settles once the first connection attempt succeeded or failed; never rejects. */
  firstAttempt(): Promise<void> {
    return this.#firstAttempt;
  }

  /**
   * Runs the script (EVALSHA; EVAL once more if Redis answers that it lost the script). Keys then
   * arguments in one list. Rejects with RedisReplyError for an error reply (the script's own
   * failure, LOADING, BUSY, OOM...) and ScriptConnectionError when the call could not complete.
   */
  run(keysThenArgs: readonly string[]): Promise<unknown> {
    if (!this.ready) return Promise.reject(new ScriptConnectionError('Connection is closed: the hot path\'s Redis connection is not up'));
    return new Promise((resolve, reject) => {
      this.#send(['EVALSHA', this.#sha, this.#numberOfKeys, ...keysThenArgs], { resolve, reject, args: keysThenArgs, sentAtMs: performance.now() });
    });
  }

  /**
   * Stops taking calls, lets those already sent answer for at most `ms`, then ends the connection
   * without reconnecting; a call still waiting then fails. Calling it again waits for the same end.
   */
  close(ms: number): Promise<void> {
    this.#closed ??= this.#close(ms);
    return this.#closed;
  }

  async #close(ms: number): Promise<void> {
    this.#closing = true;
    if (this.#reconnectTimer) clearTimeout(this.#reconnectTimer);
    this.#reconnectTimer = null;
    if (this.#calls.length > 0 && this.#state === 'ready') {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        this.#onDrained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.#onDrained = null;
    this.#down(new ScriptConnectionError('Connection is closed: the store is closing'));
    this.#settleFirstAttempt();
  }

  #connect(): void {
    const { host, port } = this.#address;
    this.#state = 'connecting';
    this.#reader = new RespReplyReader();
    // As ioredis connects (its StandaloneConnector): host, port and family, and for TLS its options
    // laid over them; Node then checks the certificate against the host name.
    const at = { host, port, ...(this.#address.family !== undefined ? { family: this.#address.family } : {}) };
    const socket = this.#address.tls ? tls.connect({ ...at, ...this.#address.tls }) : net.connect(at);
    this.#socket = socket;
    socket.setNoDelay(true);
    const connectTimer = setTimeout(() => this.#fail(socket, new ScriptConnectionError(`Connection is closed: no connection within ${this.#options.connectTimeoutMs} ms`)), this.#options.connectTimeoutMs);
    connectTimer.unref();
    socket.once(this.#address.tls ? 'secureConnect' : 'connect', () => {
      clearTimeout(connectTimer);
      this.#handshake(socket);
    });
    socket.on('data', (chunk: Buffer) => this.#read(socket, chunk));
    socket.on('error', (error: Error) => {
      clearTimeout(connectTimer);
      this.#fail(socket, new ScriptConnectionError(`Connection is closed: ${error.message}`, { cause: error }));
    });
    socket.on('close', () => {
      clearTimeout(connectTimer);
      this.#fail(socket, new ScriptConnectionError('Connection is closed by Redis'));
    });
  }

  /**
   * Logs in and selects the database, then PINGs, in one write; ready once all answer. The script is
   * not loaded here: the first EVALSHA's NOSCRIPT loads it with EVAL, as after a SCRIPT FLUSH, so a
   * Redis that refuses SCRIPT (some managed services do) is served all the same.
   */
  #handshake(socket: net.Socket): void {
    const { username, password, db } = this.#address;
    const steps: Array<Promise<unknown>> = [];
    const step = (parts: string[]) => steps.push(new Promise((resolve, reject) => this.#send(parts, { resolve, reject, args: null, sentAtMs: performance.now() })));
    // As ioredis logs in: AUTH with the user name whenever there is one (an empty password for a
    // user without one), else with the password alone when there is one.
    if (username) step(['AUTH', username, password ?? '']);
    else if (password) step(['AUTH', password]);
    if (db !== 0) step(['SELECT', String(db)]);
    step(['PING']);
    const loggingIn = username || password ? 1 : 0;
    // Every step answers (or the connection fails); the first refusal in order is the one to report.
    void Promise.allSettled(steps.map((pending, i) => (i < loggingIn ? pending.catch(toleratedAuthRefusal) : pending))).then((outcomes) => {
      if (this.#socket !== socket || this.#state !== 'connecting') return;
      const refusal = outcomes.find((outcome) => outcome.status === 'rejected');
      if (refusal) {
        const error: unknown = refusal.reason;
        // Redis's own words (WRONGPASS ..., NOAUTH ...), so that the store's log says what to fix.
        this.#fail(socket, error instanceof ScriptConnectionError ? error : new ScriptConnectionError((error as Error).message, { cause: error }));
        return;
      }
      this.#state = 'ready';
      this.#attempt = 0;
      this.#settleFirstAttempt();
    });
  }

  #send(parts: string[], call: Call): void {
    this.#unsent.push(encodeCommand(parts));
    this.#calls.push(call);
    if (this.#watchdog === null && !this.#rechecking) this.#watchdog = setTimeout(this.#watch, this.#options.commandTimeoutMs).unref();
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      // After this turn's I/O callbacks, so that the calls of every request read in it share one write.
      setImmediate(this.#flush);
    }
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    if (this.#unsent.length === 0 || this.#socket === null) return;
    const text = this.#unsent.length === 1 ? this.#unsent[0]! : this.#unsent.join('');
    this.#unsent = [];
    this.#socket.write(text);
  };

  /** Ends the connection when its oldest call has waited commandTimeoutMs; else looks again when it would have. */
  readonly #watch = (): void => {
    this.#watchdog = null;
    const oldest = this.#calls[0];
    if (oldest === undefined || this.#socket === null) return;
    const waitedMs = performance.now() - oldest.sentAtMs;
    if (waitedMs < this.#options.commandTimeoutMs) {
      this.#watchdog = setTimeout(this.#watch, Math.ceil(this.#options.commandTimeoutMs - waitedMs)).unref();
      return;
    }
    // Timers run before the event loop reads its sockets: after a stall of this process (a long
    // garbage collection, say) the answer may be waiting unread. Look once more after this turn's I/O.
    const socket = this.#socket;
    this.#rechecking = true;
    setImmediate(() => {
      this.#rechecking = false;
      if (this.#socket !== socket) return;
      if (this.#calls[0] === oldest) {
        this.#fail(socket, new ScriptConnectionError(`Command timed out: Redis did not answer within ${this.#options.commandTimeoutMs} ms`));
        return;
      }
      if (this.#calls.length > 0) this.#watchdog = setTimeout(this.#watch, 0).unref();
    });
  };

  #read(socket: net.Socket, chunk: Buffer): void {
    if (this.#socket !== socket) return;
    try {
      this.#reader.push(chunk, this.#answer);
    } catch (error) {
      this.#fail(socket, new ScriptConnectionError(`Connection is closed: Redis sent a reply that is not Redis protocol (${(error as Error).message})`, { cause: error }));
    }
  }

  readonly #answer = (reply: RespValue): void => {
    const call = this.#calls.shift();
    if (call === undefined) throw new Error('a reply that no call waits for');
    if (!(reply instanceof RedisReplyError)) call.resolve(reply);
    else if (call.args !== null && reply.message.startsWith('NOSCRIPT')) {
      // Redis does not have the script (a first call, SCRIPT FLUSH, a restart): EVAL sends and loads it.
      this.#send(['EVAL', this.#options.script.lua, this.#numberOfKeys, ...call.args], { ...call, args: null });
    } else call.reject(reply);
    if (this.#calls.length === 0) this.#onDrained?.();
  };

  /** The socket failed: the calls on it fail, and a new connection is tried after a pause. */
  #fail(socket: net.Socket, error: ScriptConnectionError): void {
    if (this.#socket !== socket) return;
    this.#down(error);
    if (this.#closing) return;
    try {
      this.#options.onConnectionError?.(error);
    } catch {
      // Reporting is the caller's; a reporter that throws must not stop the reconnect or reach the event loop.
    }
  }

  /** Drops the socket and fails the calls on it; unless closing, tries again after a pause. */
  #down(error: ScriptConnectionError): void {
    const socket = this.#socket;
    this.#socket = null;
    this.#state = 'down';
    socket?.destroy();
    if (this.#watchdog) clearTimeout(this.#watchdog);
    this.#watchdog = null;
    this.#unsent = [];
    const calls = this.#calls;
    this.#calls = [];
    for (const call of calls) call.reject(error);
    this.#onDrained?.();
    if (this.#attempt === 0) this.#settleFirstAttempt();
    if (this.#closing) return;
    this.#attempt += 1;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = null;
      if (this.#state === 'down' && !this.#closing) this.#connect();
    }, this.#options.reconnectDelayMs(this.#attempt));
    this.#reconnectTimer.unref();
  }
}

/**
 * AUTH refusals ioredis lets pass, and so does this connection: a password given to a Redis that
 * has none, a user name given to one that knows none. Any other refusal ends the set-up.
 */
function toleratedAuthRefusal(error: unknown): void {
  if (!(error instanceof RedisReplyError)) throw error;
  const { message } = error;
  if (message.includes('no password is set') || message.includes('without any password configured for the default user')) return;
  // Redis 5 and older know no user names: ioredis goes on, and so does this (PING then says whether a password was needed).
  if (message.includes("wrong number of arguments for 'auth'")) return;
  throw error;
}
