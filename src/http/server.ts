// The HTTP server and its connection limits (security audit finding 9). A client that sends its
// headers or body a byte at a time, or opens sockets and never uses them, costs a file descriptor
// and parser memory for as long as the server lets it; enough of them made /healthz unreachable.
// So every way a connection can stay open is bounded here: headers, whole request, idle keep-alive,
// requests per connection, connections in all, and connections from one client address.
import { createServer, type RequestListener, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Config } from '../config.ts';

export type HttpServerConfig = Pick<
  Config,
  | 'HTTP_HEADERS_TIMEOUT_MS'
  | 'HTTP_REQUEST_TIMEOUT_MS'
  | 'HTTP_KEEP_ALIVE_TIMEOUT_MS'
  | 'HTTP_MAX_REQUESTS_PER_SOCKET'
  | 'HTTP_MAX_CONNECTIONS'
  | 'HTTP_MAX_CONNECTIONS_PER_ADDRESS'
>;

/**
 * How often Node looks for connections past their headers or request timeout. Node checks only on
 * this interval (30 s by default), so a trickle would otherwise live up to the timeout plus 30 s.
 * At half the headers timeout, capped at 1 s, it is cut within the timeout plus at most 1 s.
 */
export function connectionsCheckingIntervalMs(headersTimeoutMs: number): number {
  return Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 2)));
}

/** A node:http server for `handler` with every connection limit of `config`; not yet listening. */
export function createHttpServer(config: HttpServerConfig, handler: RequestListener): Server {
  const listener = closeWhenDone(config, handler);
  const server = createServer(
    {
      // The checking interval can only be given here, as its timer starts in the constructor. Node
      // throws if headersTimeout exceeds requestTimeout; loadConfig refuses that pair first.
      connectionsCheckingInterval: connectionsCheckingIntervalMs(config.HTTP_HEADERS_TIMEOUT_MS),
      headersTimeout: config.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
      // Node 24.6 and later keep an idle socket 1 s (keepAliveTimeoutBuffer) beyond this, so a client
      // that reuses it just as the advertised timeout ends is not reset mid-request.
      keepAliveTimeout: config.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
    listener,
  );
  // Node itself answers requests beyond this with 503 without calling the handler (closeWhenDone
  // closes the connection after the last allowed one). 0 means no limit, as in Node.
  server.maxRequestsPerSocket = config.HTTP_MAX_REQUESTS_PER_SOCKET;
  limitConnections(server, config.HTTP_MAX_CONNECTIONS, config.HTTP_MAX_CONNECTIONS_PER_ADDRESS);
  return server;
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
