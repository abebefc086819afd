// Opening, checking and closing the Redis connections of the Redis store. The command connection
// fails closed and bounded: a command that Redis does not answer within commandTimeoutMs rejects,
// and while the connection is down commands reject at once instead of queueing (the caller answers
// 503), so a dead Redis never makes a request hang.
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { DeadlineError, within } from '../../common/deadline.ts';
import { ScriptConnectionError } from './script-connection.ts';

export interface ClusterNodeAddress {
  host: string;
  port: number;
}

interface CommonOptions {
  /** Prefix of every key and of the invalidation channel; default `ag:`. */
  keyPrefix?: string;
  /** A command not answered within this time rejects; default 2000. */
  commandTimeoutMs?: number;
  /** Connecting (TCP + handshake) gives up after this time; default 2000. */
  connectTimeoutMs?: number;
  /** Connection-level errors (reconnect attempts and the like); default: ignored, as commands reject anyway. */
  onConnectionError?: (error: Error) => void;
  /**
   * Replicas a withdrawal of authority waits for (DESIGN §10): `auto` (default) waits for one on
   * every master that has a replica when agentgate first meets it; 0 never waits.
   */
  waitReplicas?: 'auto' | number;
  /** How long that wait may take before the change is reported as not yet durable; default 500. */
  waitTimeoutMs?: number;
}

/** Credentials and TLS (DESIGN §10: each topology with TLS and ACL credentials). */
interface AccessOptions {
  /** ACL user and password of a cluster's or Sentinel set's data nodes (a URL carries its own). */
  username?: string | undefined;
  password?: string | undefined;
  /** The sentinels' own credentials. */
  sentinelUsername?: string | undefined;
  sentinelPassword?: string | undefined;
  /** TLS to the nodes (a single Redis: a rediss:// URL turns it on); `ca` is a PEM the servers' certificates chain to. */
  tls?: { ca?: string | undefined } | undefined;
}

/**
 * One Redis (`url`, e.g. redis://user:password@host:6379/0), a Redis Cluster (`clusterNodes`, some
 * of its nodes) or a Sentinel set (`sentinels` and the master set's name).
 */
export type RedisStoreOptions = CommonOptions &
  AccessOptions &
  (
    | { url: string; clusterNodes?: undefined; sentinels?: undefined }
    | { clusterNodes: ClusterNodeAddress[]; url?: undefined; sentinels?: undefined }
    | { sentinels: ClusterNodeAddress[]; sentinelMasterName: string; url?: undefined; clusterNodes?: undefined }
  );

export type RedisConnection = Redis | Cluster;

export const DEFAULT_COMMAND_TIMEOUT_MS = 2000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 2000;
export const DEFAULT_WAIT_TIMEOUT_MS = 500;

/** Reconnect quickly at first, then every 2 s at most, forever: the service recovers on its own. */
export function reconnectDelayMs(attempt: number): number {
  return Math.min(attempt * 100, 2000);
}

const listed = (nodes: readonly ClusterNodeAddress[]) => nodes.map((node) => (node.host.includes(':') ? `[${node.host}]:${node.port}` : `${node.host}:${node.port}`)).join(',');

/** Where the store connects, for messages: the URL without its password, the cluster's seed nodes, or the Sentinel set. */
export function describeTarget(options: RedisStoreOptions): string {
  const tls = options.tls ? ' over TLS' : '';
  if (options.clusterNodes) return `Redis Cluster ${listed(options.clusterNodes)}${tls}`;
  if (options.sentinels) return `Redis Sentinel master "${options.sentinelMasterName}" via ${listed(options.sentinels)}${tls}`;
  try {
    const url = new URL(options.url);
    if (url.password) url.password = '***';
    return `Redis ${url.toString()}`;
  } catch {
    return 'Redis (unparseable URL)';
  }
}

/**
 * Options of the connection that carries commands. The offline queue is off so that commands
 * issued while disconnected reject immediately; the first connect is explicit (lazyConnect).
 * Auto-pipelining batches commands issued in the same tick into one write (the rate limiter's
 * command rides with the hot path's script).
 */
function commandConnectionOptions(options: RedisStoreOptions): RedisOptions {
  return {
    ...accessOptions(options),
    lazyConnect: true,
    connectTimeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    commandTimeout: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    retryStrategy: reconnectDelayMs,
  };
}

/**
 * Options of the connection withdrawals wait on (durability.ts): like the command connection, but
 * never auto-pipelined (a round's marker and its WAIT go together, and nothing else joins them) and
 * allowed the wait's own time on top of a command's.
 */
function durabilityConnectionOptions(options: RedisStoreOptions): RedisOptions {
  return {
    ...commandConnectionOptions(options),
    enableAutoPipelining: false,
    commandTimeout: (options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS) + (options.waitTimeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS),
  };
}

/**
 * Options of the pub/sub connection. SUBSCRIBE must wait for the connection rather than fail, and
 * ioredis re-subscribes after every reconnect, so this one keeps its offline queue and never
 * gives up on a subscription.
 */
function subscriberConnectionOptions(options: RedisStoreOptions): RedisOptions {
  return {
    ...accessOptions(options),
    lazyConnect: false,
    connectTimeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    maxRetriesPerRequest: null,
    enableOfflineQueue: true,
    autoResubscribe: true,
    retryStrategy: reconnectDelayMs,
  };
}

/**
 * Credentials and TLS as ioredis takes them. A single Redis's URL carries its own user and password
 * (and rediss:// turns TLS on), so there only a CA is added. For Sentinel the same TLS settings
 * apply to the sentinels, as a deployment that encrypts one hop encrypts both.
 */
function accessOptions(options: RedisStoreOptions): RedisOptions {
  const tls = options.tls ? { tls: options.tls.ca === undefined ? {} : { ca: options.tls.ca } } : {};
  const credentials = options.url === undefined
    ? { ...(options.username !== undefined ? { username: options.username } : {}), ...(options.password !== undefined ? { password: options.password } : {}) }
    : {};
  const sentinel = options.sentinels
    ? {
        sentinels: options.sentinels.map((node) => ({ host: node.host, port: node.port })),
        name: options.sentinelMasterName,
        ...(options.sentinelUsername !== undefined ? { sentinelUsername: options.sentinelUsername } : {}),
        ...(options.sentinelPassword !== undefined ? { sentinelPassword: options.sentinelPassword } : {}),
        ...(options.tls ? { enableTLSForSentinelMode: true, sentinelTLS: tls.tls } : {}),
        // A sentinel that cannot be reached is skipped quickly; the next one is asked.
        sentinelRetryStrategy: reconnectDelayMs,
        connectTimeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      }
    : {};
  return { ...tls, ...credentials, ...sentinel };
}

function openCluster(nodes: ClusterNodeAddress[], redisOptions: RedisOptions, lazyConnect: boolean): Cluster {
  const clusterOptions: ClusterOptions = {
    lazyConnect,
    enableOfflineQueue: redisOptions.enableOfflineQueue ?? true,
    enableAutoPipelining: redisOptions.enableAutoPipelining ?? false,
    scaleReads: 'master',
    clusterRetryStrategy: reconnectDelayMs,
    redisOptions,
  };
  return new Cluster(
    nodes.map((node) => ({ host: node.host, port: node.port })),
    clusterOptions,
  );
}

/** Opens (lazily, for commands; eagerly, for pub/sub) one connection as the options describe. */
export function openConnection(options: RedisStoreOptions, role: 'commands' | 'durability' | 'subscriber'): RedisConnection {
  const redisOptions =
    role === 'commands' ? commandConnectionOptions(options) : role === 'durability' ? durabilityConnectionOptions(options) : subscriberConnectionOptions(options);
  const connection = options.clusterNodes
    ? openCluster(options.clusterNodes, redisOptions, role !== 'subscriber')
    : options.url !== undefined
      ? new Redis(options.url, redisOptions)
      : new Redis(redisOptions);
  // Without a listener ioredis prints every reconnect error to the console; commands already
  // reject on their own, so the errors go to the caller's hook (if any) and nowhere else, in our
  // words (the driver's error stays reachable as the cause).
  const target = describeTarget(options);
  connection.on('error', (error: Error) => options.onConnectionError?.(new RedisConnectionError(target, error)));
  return connection;
}

/**
 * A Redis connection's failure in agentgate's words: where, what happened, and the code or class
 * that identifies it. ioredis's own messages speak to its maintainers ("Please report this.", a
 * "Connection is closed." that reads as "Connection is closed.." once a sentence follows it), so
 * what reaches agentgate's log is this message; the driver's error is the `cause`.
 */
export class RedisConnectionError extends Error {
  /** The system error code (ECONNREFUSED), the Redis error code (WRONGPASS) or the driver's error class. */
  readonly code: string;

  constructor(target: string, error: unknown) {
    const { what, code } = describeRedisFailure(error);
    super(`${target} ${what} (${code})`, { cause: error });
    this.name = 'RedisConnectionError';
    this.code = code;
  }
}

const SYSTEM_FAILURES: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'refused the connection: nothing listens at that address',
  ECONNRESET: 'closed the connection',
  EPIPE: 'closed the connection',
  ETIMEDOUT: 'did not answer in time',
  EHOSTUNREACH: 'cannot be reached on the network',
  ENETUNREACH: 'cannot be reached on the network',
  ENOTFOUND: 'has a host name that does not resolve',
  EAI_AGAIN: 'has a host name that could not be resolved now',
};

/** What a failure of Redis or of the connection to it means, and the code that names it. */
export function describeRedisFailure(error: unknown): { what: string; code: string } {
  if (!(error instanceof Error)) return { what: 'failed', code: typeof error };
  const system = (error as NodeJS.ErrnoException).code;
  if (typeof system === 'string' && SYSTEM_FAILURES[system] !== undefined) return { what: SYSTEM_FAILURES[system], code: system };
  // Node's TLS refusals (SELF_SIGNED_CERT_IN_CHAIN, UNABLE_TO_VERIFY_LEAF_SIGNATURE, CERT_HAS_EXPIRED,
  // ERR_TLS_CERT_ALTNAME_INVALID, ...): the server is there, its certificate is not trusted.
  if (typeof system === 'string' && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|^ERR_TLS_/.test(system)) {
    return { what: `presented a TLS certificate this process does not trust (${error.message}); give the CA that signed it in REDIS_TLS_CA_FILE, and connect by a name the certificate lists`, code: system };
  }
  if (error instanceof DeadlineError || /Command timed out/.test(error.message)) return { what: 'did not answer in time', code: 'timeout' };
  if (error.message.startsWith('Connection is closed')) return { what: 'closed the connection', code: 'connection_closed' };
  if (/Stream isn't writeable|enableOfflineQueue/.test(error.message)) return { what: 'is not connected: commands are refused until the connection is back', code: 'not_connected' };
  if (error.name === 'MaxRetriesPerRequestError') return { what: 'did not answer before the connection was lost', code: error.name };
  if (error.name === 'ParserError') return { what: 'sent a reply that is not Redis protocol (is it a Redis server?); the connection is reset', code: error.name };
  const reply = /^([A-Z]{3,})\b/.exec(error.message)?.[1];
  if (reply === 'NOAUTH' || reply === 'WRONGPASS') return { what: 'refused the credentials: check the user and password (in REDIS_URL, or REDIS_USERNAME and REDIS_PASSWORD)', code: reply };
  if (reply !== undefined) return { what: 'answered with an error', code: reply };
  return { what: 'failed', code: typeof system === 'string' ? system : error.name };
}

/** The settings that say where the store connects, for a message that tells an operator what to check. */
function settingNames(options: RedisStoreOptions): string {
  if (options.clusterNodes) return 'the cluster nodes (REDIS_CLUSTER_NODES)';
  if (options.sentinels) return 'the sentinels and the master set\'s name (REDIS_SENTINELS, REDIS_SENTINEL_MASTER)';
  return 'the Redis URL (REDIS_URL)';
}

/**
 * Connects, pings and checks the eviction policy. An evicting Redis would silently drop grants,
 * sessions and replay records (DESIGN §3), so anything but `noeviction` is refused.
 */
export async function connectAndCheck(connection: RedisConnection, options: RedisStoreOptions): Promise<void> {
  const target = describeTarget(options);
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  // A failed connect rejects with ioredis's "Connection is closed."; the socket's own error (a
  // refused connection, a name that does not resolve) came first, as an 'error' event, and says why.
  let socketError: unknown;
  const noteSocketError = (error: unknown) => {
    socketError ??= error;
  };
  connection.on('error', noteSocketError);
  try {
    // A cluster connects to several nodes and reads the slot map, so it gets a few timeouts' worth.
    await within(connection.connect(), connectTimeoutMs * (options.clusterNodes ? 3 : 1) + 500, 'connecting');
    await connection.ping();
  } catch (error) {
    connection.disconnect();
    const { what, code } = describeRedisFailure(socketError ?? error);
    throw new Error(
      // A refusal of the credentials says what to check already; anything else is about where Redis is.
      `cannot connect to ${target}: it ${what} (${code}).${code === 'WRONGPASS' || code === 'NOAUTH' ? '' : ` Check ${settingNames(options)} and that Redis is running and reachable.`}`,
      { cause: error },
    );
  } finally {
    connection.off('error', noteSocketError);
  }
  const nodes = connection instanceof Cluster ? connection.nodes('master') : [connection];
  for (const node of nodes) {
    const policy = await readEvictionPolicy(node).catch((error: unknown) => {
      connection.disconnect();
      throw new Error(`cannot read the eviction policy of ${target}: ${(error as Error).message}`, { cause: error });
    });
    if (policy !== null && policy !== 'noeviction') {
      connection.disconnect();
      throw new Error(
        `${target} (node ${node.options.host}:${node.options.port}) has maxmemory-policy "${policy}"; ` +
          'agentgate requires "noeviction" because an evicted key is lost state (a grant, a session, a replay record). ' +
          'Fix: set "maxmemory-policy noeviction" in redis.conf (or run CONFIG SET maxmemory-policy noeviction ' +
          'and CONFIG REWRITE) and start agentgate again.',
      );
    }
  }
}

/**
 * The node's maxmemory-policy, or null when CONFIG is unavailable. Managed Redis services often
 * disable or rename CONFIG; there we cannot check, so we allow the connection without noise and
 * rely on the deployment documentation (the provider's setting must be noeviction).
 */
async function readEvictionPolicy(node: Redis): Promise<string | null> {
  let reply: unknown;
  try {
    reply = await node.config('GET', 'maxmemory-policy');
  } catch (error) {
    const message = (error as Error).message;
    if (/unknown command|NOPERM|no permissions|disabled|ERR.*config/i.test(message)) return null;
    throw error;
  }
  if (!Array.isArray(reply) || reply.length < 2) return null;
  return String(reply[1]);
}

/** QUIT politely, but never wait longer than `ms` on a connection that is already gone. */
export async function closeConnection(connection: RedisConnection, ms: number): Promise<void> {
  // QUIT on a connection that is not up would only wait in the offline queue (or fail); drop it.
  if (connection.status !== 'ready') {
    connection.disconnect();
    return;
  }
  try {
    await within(connection.quit(), ms, 'closing the Redis connection');
  } catch {
    // The server is unreachable or slow; dropping the socket is all that is left to do.
  } finally {
    connection.disconnect();
  }
}

/**
 * Messages of a Redis that is not serving. Besides a connection that is down or slow: a cluster
 * reconfiguring (CLUSTERDOWN, TRYAGAIN; MOVED and ASK when ioredis's redirections end at a node
 * that died or that no longer owns the slot; "Too many Cluster redirections" when they never
 * settle), a node that is loading, read-only or a replica that lost its master (LOADING,
 * MASTERDOWN, READONLY), a master refusing writes for want of replicas (NOREPLICAS), a client
 * unblocked by a failover (UNBLOCKED), a busy script (BUSY), a full memory (OOM), and Sentinel
 * with no sentinel or no master to offer. Each of these passes once the topology settles, so each
 * is a 503 (retry later), never a 500 and never an allow.
 */
const UNAVAILABLE_MESSAGE = new RegExp(
  [
    'Connection is closed', 'Command timed out', "Stream isn't writeable", 'enableOfflineQueue', 'Failed to refresh slots cache',
    'None of startup nodes', 'Too many Cluster redirections', "Cluster isn't ready", 'All sentinels are unreachable',
    '^(CLUSTERDOWN|TRYAGAIN|MOVED|ASK|LOADING|MASTERDOWN|READONLY|NOREPLICAS|UNBLOCKED|BUSY|OOM)\\b',
  ].join('|'),
);

/**
 * Whether a failed command means Redis is unreachable, slow or not serving (503, retry later), as
 * opposed to a bug or corrupt data (500): the connection is down or closed, a command timed out or
 * was refused while disconnected, or a cluster is reconfiguring or still loading its data.
 */
export function isRedisUnavailable(error: unknown): boolean {
  if (error instanceof DeadlineError || error instanceof ScriptConnectionError) return true;
  if (!(error instanceof Error)) return false;
  if (error.name === 'MaxRetriesPerRequestError' || error.name === 'ClusterAllFailedError') return true;
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== undefined && /^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN)$/.test(code)) return true;
  return UNAVAILABLE_MESSAGE.test(error.message);
}
