// The HTTP server and its connection limits (SECURITY.md). A client that sends its
// headers or body a byte at a time, or opens sockets and never uses them, costs a file descriptor
// and parser memory for as long as the server lets it; enough of them made /healthz unreachable.
// So every way a connection can stay open is bounded here: headers, whole request, idle keep-alive,
// requests per connection, connections in all, and connections from one client address.
import { createServer, STATUS_CODES, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Config } from '../config.ts';
import { ApiError } from '../errors.ts';

type HttpServerConfig = Pick<
  Config,
  | 'HTTP_HEADERS_TIMEOUT_MS'
  | 'HTTP_REQUEST_TIMEOUT_MS'
  | 'HTTP_KEEP_ALIVE_TIMEOUT_MS'
  | 'HTTP_MAX_REQUESTS_PER_SOCKET'
  | 'HTTP_MAX_CONNECTIONS'
  | 'HTTP_MAX_CONNECTIONS_PER_ADDRESS'
  | 'HTTP_MAX_HEADER_BYTES'
>;

/**
 * How often Node looks for connections past their headers or request timeout. Node checks only on
 * this interval (30 s by default), so a trickle would otherwise live up to the timeout plus 30 s.
 * At half the headers timeout, capped at 1 s, it is cut within the timeout plus at most 1 s.
 */
function connectionsCheckingIntervalMs(headersTimeoutMs: number): number {
  return Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 2)));
}

/** A node:http server for `handler` with every connection limit of `config`; not yet listening. */
export function createHttpServer(config: HttpServerConfig, handler: RequestListener): Server {
  const responses = new OpenResponses();
  const listener = closeWhenDone(config, handler);
  const server = createServer(
    {
      // Node's default (16 KiB), set here so the limit is a setting and the 431 answer can name it.
      maxHeaderSize: config.HTTP_MAX_HEADER_BYTES,
      // The checking interval can only be given here, as its timer starts in the constructor. Node
      // throws if headersTimeout exceeds requestTimeout; loadConfig refuses that pair first.
      connectionsCheckingInterval: connectionsCheckingIntervalMs(config.HTTP_HEADERS_TIMEOUT_MS),
      headersTimeout: config.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
      // Node 24.6 and later keep an idle socket 1 s (keepAliveTimeoutBuffer) beyond this, so a client
      // that reuses it just as the advertised timeout ends is not reset mid-request.
      keepAliveTimeout: config.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
    (req, res) => {
      responses.add(req.socket, res);
      // A request that arrives on an open connection while the server drains is its last one.
      if (!server.listening) res.setHeader('Connection', 'close');
      listener(req, res);
    },
  );
  // Node itself answers requests beyond this with 503 without calling the handler (closeWhenDone
  // closes the connection after the last allowed one). 0 means no limit, as in Node.
  server.maxRequestsPerSocket = config.HTTP_MAX_REQUESTS_PER_SOCKET;
  limitConnections(server, config.HTTP_MAX_CONNECTIONS, config.HTTP_MAX_CONNECTIONS_PER_ADDRESS);
  answerClientErrors(server, config.HTTP_MAX_HEADER_BYTES, responses);
  openResponsesOf.set(server, responses);
  return server;
}

/**
 * Stops accepting connections and lets the requests in flight finish: each of their answers (and
 * any later request's on a connection still open) says `Connection: close`, so Node closes the
 * connection once it is sent and the client does not reuse it; idle connections close at once.
 * Resolves when the last connection has closed and every handler has answered, including those
 * whose client hung up first: such a handler may still be executing a call, and what it records
 * (the audit event of that call, say) must reach the store before the store closes. Node stops
 * enforcing the headers and request timeouts once the server closes, so the caller bounds the wait
 * (SHUTDOWN_TIMEOUT_MS).
 */
export function drain(server: Server): Promise<void> {
  const responses = openResponsesOf.get(server);
  return new Promise((resolve) => {
    server.close(() => {
      if (!responses) resolve();
      else void responses.handlersAnswered().then(resolve);
    });
    for (const res of responses?.all() ?? []) {
      if (!res.headersSent) res.setHeader('Connection', 'close');
    }
    server.closeIdleConnections();
  });
}

const openResponsesOf = new WeakMap<Server, OpenResponses>();

/** How often a drain looks again at handlers whose client hung up before they answered. */
const ABANDONED_POLL_MS = 10;

/**
 * The responses a server has not finished yet, in all and by connection, and those whose client
 * hung up before their handler answered (`res.end` not yet called: the handler is still working).
 */
class OpenResponses {
  readonly #all = new Set<ServerResponse>();
  readonly #bySocket = new WeakMap<Duplex, Set<ServerResponse>>();
  readonly #abandoned = new Set<ServerResponse>();

  add(socket: Duplex, res: ServerResponse): void {
    this.#all.add(res);
    let ofSocket = this.#bySocket.get(socket);
    if (!ofSocket) this.#bySocket.set(socket, (ofSocket = new Set()));
    ofSocket.add(res);
    // 'close' follows 'finish', and also ends a response whose connection broke first.
    res.once('close', () => {
      this.#all.delete(res);
      ofSocket.delete(res);
      // Node emits no event when a handler ends a response whose socket is gone, so the set is
      // pruned here, each time one is added: it holds at most the handlers still working.
      if (!res.writableEnded) {
        this.#pruneAbandoned();
        this.#abandoned.add(res);
      }
    });
  }

  /**
   * Resolves once every handler has answered, into the void where the client hung up. A closing
   * server reports its last connection gone before Node emits the 'close' of the responses on it
   * (that waits for the handle's close callback), so the open responses are looked at too.
   */
  async handlersAnswered(): Promise<void> {
    // Bounded by the caller's shutdown timeout, which ends the process.
    while (this.#working()) await new Promise((resolve) => setTimeout(resolve, ABANDONED_POLL_MS));
  }

  #working(): boolean {
    this.#pruneAbandoned();
    if (this.#abandoned.size > 0) return true;
    for (const res of this.#all) if (!res.writableEnded) return true;
    return false;
  }

  #pruneAbandoned(): void {
    for (const res of this.#abandoned) if (res.writableEnded) this.#abandoned.delete(res);
  }

  all(): Iterable<ServerResponse> {
    return this.#all;
  }

  /** True when a response on `socket` has begun to go out: anything else written now would corrupt it. */
  sending(socket: Duplex): boolean {
    for (const res of this.#bySocket.get(socket) ?? []) if (res.headersSent) return true;
    return false;
  }
}

/**
 * Answers what Node's HTTP layer refuses before any handler runs with the same {error, message}
 * body as every other refusal, where Node alone sends a bare status line: a request that is not
 * HTTP/1.1 (400), a request line and headers over HTTP_MAX_HEADER_BYTES (431), chunk extensions
 * over Node's 16 KiB (413), a request not received within its headers or request timeout (408; Node
 * reports those here too). The status is the one Node would send; the code and status come from
 * the one table in src/errors.ts.
 * As Node does, nothing is written once the socket is closing or a response on it has begun to go
 * out, and the connection is closed after the answer.
 */
function answerClientErrors(server: Server, maxHeaderBytes: number, responses: OpenResponses): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code !== 'ECONNRESET' && socket.writable && !responses.sending(socket)) {
      socket.write(rawResponse(refusalFor(err, maxHeaderBytes)));
    }
    socket.destroy();
  });
}

function refusalFor(err: NodeJS.ErrnoException, maxHeaderBytes: number): ApiError {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('request_header_fields_too_large', `the request line and headers are larger than the server accepts (${maxHeaderBytes} bytes)`);
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout', 'the request was not received in time');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new ApiError('chunk_extensions_too_large', 'the chunk extensions of the request body are too large');
    default:
      return new ApiError('invalid_request', 'the request is not valid HTTP/1.1');
  }
}

/** A whole HTTP/1.1 response for `error`, written to the socket directly: there is no ServerResponse. */
function rawResponse(error: ApiError): string {
  const body = JSON.stringify(error.body());
  return (
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

/**
 * Wraps `handler` so a response that should be the connection's last says `Connection: close`,
 * which makes Node close the connection once it is sent. Two cases need it:
 * - HTTP_KEEP_ALIVE_TIMEOUT_MS of 0. In Node it means "never close an idle connection", which would
 *   undo the other limits; here it means what the setting says: no idle time at all.
 * - The last request HTTP_MAX_REQUESTS_PER_SOCKET allows. Node only advertises `Connection: close`
 *   then and keeps the socket open, so a client that ignores it could go on sending requests (each
 *   answered 503) and hold the connection for as long as it likes.
 */
function closeWhenDone(config: HttpServerConfig, handler: RequestListener): RequestListener {
  const keepAlive = config.HTTP_KEEP_ALIVE_TIMEOUT_MS > 0;
  const maxRequests = config.HTTP_MAX_REQUESTS_PER_SOCKET;
  if (keepAlive && maxRequests === 0) return handler;
  // Keyed weakly by socket, so a closed connection's count goes with it.
  const served = new WeakMap<Socket, number>();
  return (req, res) => {
    const count = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, count);
    if (!keepAlive || (maxRequests > 0 && count >= maxRequests)) res.setHeader('Connection', 'close');
    handler(req, res);
  };
}

/**
 * Closes at once any socket beyond `max` open ones in all, or beyond `maxPerAddress` open ones from
 * the same remote address (0: no per-address limit), so one client cannot take every connection
 * and lock everyone else out. Limits apply per process: each cluster worker counts its own.
 *
 * Node's own `server.maxConnections` is not used: in a cluster worker it does not close the socket
 * but hands it back to the primary, which offers it to a worker again at once, so with every worker
 * full the excess sockets stay open and the primary spins at full CPU. Accepting and then
 * destroying behaves the same with or without workers.
 *
 * The map holds only addresses with an open socket (an entry is removed when its count reaches
 * zero), so it never has more than `max` entries.
 */
function limitConnections(server: Server, max: number, maxPerAddress: number): void {
  let open = 0;
  const openByAddress = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    // A socket that was reset before this event has no address and is already closing.
    if (address === undefined) return;
    const fromAddress = openByAddress.get(address) ?? 0;
    if (open >= max || (maxPerAddress > 0 && fromAddress >= maxPerAddress)) {
      socket.destroy();
      return;
    }
    open += 1;
    openByAddress.set(address, fromAddress + 1);
    socket.once('close', () => {
      open -= 1;
      const left = (openByAddress.get(address) ?? 1) - 1;
      if (left > 0) openByAddress.set(address, left);
      else openByAddress.delete(address);
    });
  });
}
