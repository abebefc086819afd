// The hot path's own connection to a single Redis: it carries one script, the execute round trip
// (scripts.ts EXECUTE_ROUND_TRIP), and nothing else. Through ioredis that one call cost a fifth of
// an execute's CPU (its command objects, a timer per command, its parser and promise chains; the
// measurement is in bench/RESULTS.md, "The execute script on a connection of its own"); here it is
// a string written to a socket and a reply read by resp-replies.ts.
//
// It is an optimisation only, never a second way to fail open:
// - Only a single Redis given by a plain URL gets one (hotPathAddress); a Cluster, Sentinel or a
//   URL with options keeps every command on ioredis, which understands them.
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
import { encodeCommand, RedisReplyError, RespReplyReader, type RespValue } from './resp-replies.ts';

/** Where the hot path's connection goes, with what it needs to log in. */
export interface ScriptConnectionAddress {
  host: string;
  port: number;
  username?: string | undefined;
  password?: string | undefined;
  db: number;
  /** TLS, with the CA the server's certificate chains to (Node's own list when absent). */
  tls?: { ca?: string | undefined } | undefined;
}

/**
 * The address of a single Redis given as `redis://[user:password@]host[:port][/db]` (or rediss://),
 * or null when the URL says anything else (query options, another scheme): those stay with
 * ioredis, which reads them, rather than being half understood here.
 */
export function scriptConnectionAddress(url: string, tlsOptions: { ca?: string | undefined } | undefined): ScriptConnectionAddress | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if ((parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') || parsed.search !== '' || parsed.hash !== '' || parsed.hostname === '') return null;
  const db = parsed.pathname === '' || parsed.pathname === '/' ? 0 : Number(parsed.pathname.slice(1));
  if (!Number.isSafeInteger(db) || db < 0) return null;
  const port = parsed.port === '' ? 6379 : Number(parsed.port);
  const useTls = parsed.protocol === 'rediss:' || tlsOptions !== undefined;
  return {
    host: parsed.hostname.startsWith('[') ? parsed.hostname.slice(1, -1) : parsed.hostname,
    port,
    username: parsed.username === '' ? undefined : decodeURIComponent(parsed.username),
    password: parsed.password === '' ? undefined : decodeURIComponent(parsed.password),
    db,
    tls: useTls ? { ca: tlsOptions?.ca } : undefined,
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
  #reconnectTimer: NodeJS.Timeout | null = null;
  #attempt = 0;
  /** Set by close: no new calls, no reconnect. */
  #closing = false;
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
   * without reconnecting; a call still waiting then fails.
   */
  async close(ms: number): Promise<void> {
    if (this.#closing) return;
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
    this.#down(new ScriptConnectionError('Connection is closed: the store is closing'));
    this.#settleFirstAttempt();
  }

  #connect(): void {
    const { host, port } = this.#address;
    this.#state = 'connecting';
    this.#reader = new RespReplyReader();
    const socket = this.#address.tls
      ? tls.connect({ host, port, ...(net.isIP(host) === 0 ? { servername: host } : {}), ...(this.#address.tls.ca !== undefined ? { ca: this.#address.tls.ca } : {}) })
      : net.connect({ host, port });
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
    if (password !== undefined) step(username === undefined ? ['AUTH', password] : ['AUTH', username, password]);
    if (db !== 0) step(['SELECT', String(db)]);
    step(['PING']);
    Promise.all(steps).then(
      () => {
        if (this.#socket !== socket || this.#state !== 'connecting') return;
        this.#state = 'ready';
        this.#attempt = 0;
        this.#settleFirstAttempt();
      },
      (error: unknown) => this.#fail(socket, error instanceof ScriptConnectionError ? error : new ScriptConnectionError(`Connection is closed: Redis refused the connection's set-up (${(error as Error).message})`, { cause: error })),
    );
  }

  #send(parts: string[], call: Call): void {
    this.#unsent.push(encodeCommand(parts));
    this.#calls.push(call);
    this.#watchdog ??= setTimeout(this.#watch, this.#options.commandTimeoutMs).unref();
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
    if (waitedMs >= this.#options.commandTimeoutMs) {
      this.#fail(this.#socket, new ScriptConnectionError(`Command timed out: Redis did not answer within ${this.#options.commandTimeoutMs} ms`));
      return;
    }
    this.#watchdog = setTimeout(this.#watch, Math.ceil(this.#options.commandTimeoutMs - waitedMs)).unref();
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
    if (this.#calls.length === 0) this.#onDrained?.();
    if (!(reply instanceof RedisReplyError)) {
      call.resolve(reply);
      return;
    }
    if (call.args !== null && reply.message.startsWith('NOSCRIPT')) {
      // Redis lost the script (SCRIPT FLUSH, or a restart this connection did not see): EVAL puts it back.
      this.#send(['EVAL', this.#options.script.lua, this.#numberOfKeys, ...call.args], { ...call, args: null });
      return;
    }
    call.reject(reply);
  };

  /** The socket failed: the calls on it fail, and a new connection is tried after a pause. */
  #fail(socket: net.Socket, error: ScriptConnectionError): void {
    if (this.#socket !== socket) return;
    if (!this.#closing) this.#options.onConnectionError?.(error);
    this.#down(error);
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
