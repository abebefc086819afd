// All configuration comes from the environment through this one schema. Every problem is reported
// at once, so an operator fixes a bad deployment in one pass. Each variable has a README line.
import { accessSync, constants as fsConstants } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import { parseCidr } from './auth/jwks-fetch.ts';
import { compileRedaction } from './policy/redaction.ts';

/** true/false, 1/0, yes/no, on/off, enabled/disabled (any case); anything else is refused. */
const bool = z.stringbool();

const csv = <T extends string>(values: readonly [T, ...T[]]) =>
  z
    .string()
    .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
    .pipe(z.array(z.enum(values)).min(1));

/** A whole number from min to max, given as a string in the environment. */
const integerIn = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
/** integerIn, named for settings counted in seconds. */
const seconds = integerIn;

/** The proxies whose X-Forwarded-For entries are believed: none, a hop count, or their addresses. */
type TrustedProxies = false | number | string[];

/** The names Express's `trust proxy` knows for address ranges (proxy-addr). */
const NAMED_PROXY_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal']);

/** An IP address, an address/prefix network, or one of NAMED_PROXY_RANGES. */
function isProxyAddress(entry: string): boolean {
  if (NAMED_PROXY_RANGES.has(entry)) return true;
  const [address = '', prefix, extra] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || extra !== undefined) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

/**
 * TRUST_PROXY: `false` (or 0), the number of proxies in front of agentgate, or a comma-separated
 * list of their addresses and networks. `true` is refused: it would believe every hop, so the
 * client address would be whatever the client itself wrote first in X-Forwarded-For.
 */
const trustedProxies = z.string().transform((text, ctx): TrustedProxies => {
  const value = text.trim();
  if (/^(false|no|off|0)$/i.test(value)) return false;
  if (/^\d{1,2}$/.test(value)) return Number(value);
  if (/^(true|yes|on)$/i.test(value)) {
    ctx.addIssue({ code: 'custom', message: 'true would trust whatever a client writes in X-Forwarded-For; give the number of proxies in front of agentgate (e.g. 1) or their addresses (e.g. 10.0.0.0/8, loopback)' });
    return false;
  }
  const entries = value.split(',').map((e) => e.trim()).filter(Boolean);
  const bad = entries.filter((e) => !isProxyAddress(e));
  if (entries.length === 0 || bad.length > 0) {
    ctx.addIssue({ code: 'custom', message: `must be false, a number of proxies, or a list of proxy addresses and networks (address, address/prefix, loopback, linklocal, uniquelocal); not ${bad.map((b) => JSON.stringify(b)).join(', ') || 'empty'}` });
    return false;
  }
  return entries;
});

/** One Redis node's address, as REDIS_CLUSTER_NODES and REDIS_SENTINELS list them. */
interface RedisNodeAddress {
  host: string;
  port: number;
}

/** The most seed nodes or sentinels one list may name (every one is dialled at start-up). */
const REDIS_NODE_LIST_MAX = 32;

/**
 * A comma-separated list of `host:port` (an IPv6 address in brackets: `[::1]:7000`), as Redis's own
 * tools write node addresses. A bad entry is named in the message, so the operator sees which.
 */
const redisNodeList = z.string().transform((text, ctx): RedisNodeAddress[] => {
  const entries = text.split(',').map((e) => e.trim()).filter(Boolean);
  if (entries.length === 0 || entries.length > REDIS_NODE_LIST_MAX) {
    ctx.addIssue({ code: 'custom', message: `must list from 1 to ${REDIS_NODE_LIST_MAX} host:port addresses, separated by commas` });
    return [];
  }
  const nodes: RedisNodeAddress[] = [];
  for (const entry of entries) {
    const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s\[\]]+)):(\d{1,5})$/.exec(entry);
    const port = Number(match?.[3]);
    if (!match || port < 1 || port > 65535) {
      ctx.addIssue({ code: 'custom', message: `${JSON.stringify(entry.slice(0, 60))} is not host:port (a port from 1 to 65535; an IPv6 address in brackets, [::1]:7000)` });
      continue;
    }
    nodes.push({ host: match[1] ?? match[2]!, port });
  }
  return nodes;
});

/** A Redis Sentinel master set's name: what `sentinel monitor <name> ...` calls it. */
const sentinelMasterName = z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'must be the master set\'s name as the sentinels know it (letters, digits, ".", "_", "-"; at most 64)');

/** REDIS_WAIT_REPLICAS: `auto` (wait for one replica on every master that has one) or a count. */
const waitReplicas = z.string().trim().transform((text, ctx): 'auto' | number => {
  if (text === 'auto') return 'auto';
  if (/^[0-5]$/.test(text)) return Number(text);
  ctx.addIssue({ code: 'custom', message: `must be auto or a whole number from 0 to 5, not ${JSON.stringify(text.slice(0, 40))}` });
  return 'auto';
});

/**
 * Where the store lives (DESIGN §10: single, Sentinel or Cluster, chosen by configuration), with
 * the credentials and TLS settings that apply to it. Derived from the REDIS_* variables by
 * loadConfig; null means the in-memory store.
 */
export type RedisTopology = (
  | { kind: 'single'; url: string }
  | { kind: 'cluster'; nodes: RedisNodeAddress[] }
  | { kind: 'sentinel'; sentinels: RedisNodeAddress[]; masterName: string }
) & {
  /** ACL user and password of the data nodes (a single Redis takes them from its URL instead). */
  username?: string;
  password?: string;
  /** Credentials of the sentinels themselves, when they require their own. */
  sentinelUsername?: string;
  sentinelPassword?: string;
  /** TLS to the data nodes (and, for Sentinel, to the sentinels); caFile adds a trusted CA. */
  tls: boolean;
  tlsCaFile?: string;
};

/**
 * Secrets the decision log redacts unless told otherwise: the member names that hold them in
 * common APIs. An operator who sets DECISION_LOG_REDACT replaces this list, so the README says so.
 */
const DEFAULT_REDACTION = 'password,secret,token,api_key,apikey,authorization,ssn,card_number,iban';

const redactionPatterns = z.string().superRefine((text, ctx) => {
  try {
    compileRedaction(text);
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: (error as Error).message });
  }
});

const objectSchema = z
  .object({
    PORT: integerIn(0, 65535).default(3000),
    HOST: z.string().min(1).default('127.0.0.1'),
    ISSUER: z.url({ protocol: /^https?$/ }).optional(),
    PROVIDER_NAME: z.string().min(1).max(100).default('agentgate'),
    PROVIDER_DESCRIPTION: z.string().min(1).max(500).default('agentgate: authorization for software agents'),
    LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),

    /** One Redis: redis://[user:password@]host:port[/db], or rediss:// for TLS. */
    REDIS_URL: z.string().regex(/^rediss?:\/\//, 'must start with redis:// or rediss://').optional(),
    /** A Redis Cluster: some of its nodes (host:port, comma-separated); the rest are discovered. */
    REDIS_CLUSTER_NODES: redisNodeList.optional(),
    /** Redis Sentinel: the sentinels (host:port, comma-separated) and the name of the master set. */
    REDIS_SENTINELS: redisNodeList.optional(),
    REDIS_SENTINEL_MASTER: sentinelMasterName.optional(),
    /** ACL user and password of the cluster's or Sentinel set's data nodes (REDIS_URL carries its own). */
    REDIS_USERNAME: z.string().min(1).max(256).optional(),
    REDIS_PASSWORD: z.string().min(1).max(4096).optional(),
    /** The sentinels' own credentials, when they require them. */
    REDIS_SENTINEL_USERNAME: z.string().min(1).max(256).optional(),
    REDIS_SENTINEL_PASSWORD: z.string().min(1).max(4096).optional(),
    /** TLS to a cluster's or Sentinel set's nodes (a single Redis uses a rediss:// URL instead). */
    REDIS_TLS: bool.default(false),
    /** A PEM file of the CA that signed the Redis servers' certificates (with TLS). */
    REDIS_TLS_CA_FILE: z.string().min(1).max(4096).optional(),
    /**
     * Replicas a withdrawal of authority (revocations, key rotations, denials, unlinks) waits for
     * before it is acknowledged (DESIGN §10). auto: one, on every master that has replicas.
     */
    REDIS_WAIT_REPLICAS: waitReplicas.default('auto'),
    /** How long that wait may take; past it the answer says the change is not yet durable. */
    REDIS_WAIT_TIMEOUT_MS: integerIn(10, 10_000).default(500),
    REDIS_KEY_PREFIX: z.string().min(1).max(64).default('ag:'),
    REDIS_COMMAND_TIMEOUT_MS: integerIn(50, 60_000).default(2000),

    ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
    INTROSPECTION_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
    /**
     * /metrics on the main port, for a bearer of this token. With METRICS_PORT also set, the token
     * guards that port instead. With neither, metrics are off: not served and not recorded.
     */
    METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
    /** /metrics on a listener of its own, on HOST at this port (and not on the main port). */
    METRICS_PORT: integerIn(1, 65535).optional(),

    CAPABILITIES_FILE: z.string().min(1).default('config/capabilities.json'),
    PLUGINS_DIR: z.string().min(1).default('plugins'),
    POLICY_WASM_PATH: z.string().min(1).default('policies/dist/policy.wasm'),
    POLICY_GOLDEN_PATH: z.string().min(1).default('policies/golden.json'),
    /** Reload the policy when its artefact or golden file changes on disk. */
    POLICY_WATCH: bool.default(true),
    POLICY_MEMORY_MAX_PAGES: integerIn(16, 16_384).default(1024),
    /**
     * Share of execute decisions recorded with their input for previews (0 to 1); grant decisions
     * are always recorded. The recording rides execute's one Redis command.
     */
    DECISION_LOG_SAMPLE: z.coerce.number().min(0).max(1).default(0.01),
    /** Recorded decisions kept (the newest; older ones are trimmed as they come). */
    DECISION_LOG_MAX_RECORDS: integerIn(1000, 10_000_000).default(100_000),
    /**
     * What a recorded decision never holds: comma-separated field names (any depth) or dotted paths
     * from the input's root with `*` (one level) and `**` (any levels), e.g. `arguments.iban`.
     */
    DECISION_LOG_REDACT: redactionPatterns.default(DEFAULT_REDACTION),
    /** Observations a shadow policy may have waiting; beyond it they are dropped and counted. */
    POLICY_SHADOW_QUEUE_MAX: integerIn(10, 1_000_000).default(10_000),
    /** How long a preview of a candidate policy may run before it is stopped. */
    POLICY_PREVIEW_TIMEOUT_MS: integerIn(1000, 600_000).default(60_000),

    ALGORITHMS: csv(['Ed25519', 'P-256'] as const).default(['Ed25519']),
    /** Which backend verifies Ed25519 signatures (src/auth/ed25519-verify.ts). */
    ED25519_VERIFIER: z.enum(['auto', 'libsodium', 'node']).default('auto'),
    MODES: csv(['delegated', 'autonomous'] as const).default(['delegated', 'autonomous']),
    DYNAMIC_HOST_REGISTRATION: bool.default(true),
    CAPABILITY_LIST_REQUIRES_AUTH: bool.default(false),

    JWT_MAX_LIFETIME_SECONDS: seconds(1, 300).default(60),
    JWT_CLOCK_SKEW_SECONDS: seconds(0, 120).default(30),

    AGENT_SESSION_TTL_SECONDS: seconds(1, 31_536_000).default(3600),
    AGENT_MAX_LIFETIME_SECONDS: seconds(1, 31_536_000).default(86_400),
    AGENT_ABSOLUTE_LIFETIME_SECONDS: seconds(1, 315_360_000).default(2_592_000),

    APPROVAL_EXPIRES_IN_SECONDS: seconds(30, 86_400).default(600),
    APPROVAL_INTERVAL_SECONDS: seconds(1, 60).default(5),
    /** People's sessions on the approval page: idle timeout and absolute lifetime. */
    SESSION_IDLE_SECONDS: seconds(60, 86_400).default(1800),
    SESSION_MAX_SECONDS: seconds(300, 2_592_000).default(43_200),
    /** How recent a sign-in must be to approve or deny (protocol §10: approvals need a fresh sign-in). */
    SIGN_IN_FRESH_SECONDS: seconds(30, 3600).default(300),
    /** The OpenID Connect provider people sign in with (authorization code + PKCE). */
    OIDC_ISSUER: z.url({ protocol: /^https?$/ }).optional(),
    OIDC_CLIENT_ID: z.string().min(1).max(256).optional(),
    OIDC_CLIENT_SECRET: z.string().min(1).max(1024).optional(),
    /** A sign-in that asks only for a name, for trying agentgate locally. Never in production. */
    INSECURE_DEV_SIGN_IN: bool.default(false),
    /** Agents still waiting for approval this long after registering are removed (and pending hosts left without agents). */
    PENDING_MAX_AGE_SECONDS: seconds(60, 31_536_000).default(86_400),
    /** How often each instance runs that clean-up. */
    CLEANUP_INTERVAL_SECONDS: seconds(1, 86_400).default(300),
    /** Code lookups on the approval page per client address per hour (each failed or not). */
    RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR: integerIn(1, 10_000_000).default(60),
    /**
     * Key user codes are derived and looked up with. Unset: one random key kept in the store (shared
     * by every instance), which a reader of Redis could also read; set it to keep codes secret from them.
     */
    USER_CODE_KEY: z.string().min(32, 'must be at least 32 characters').optional(),
    /**
     * Key the sign-in cookies are sealed with (a sign-in in progress, the sign-in form's CSRF
     * token): nothing is stored for a visitor before a sign-in completes. Unset: one random key kept
     * in the store, shared by every instance.
     */
    SIGN_IN_COOKIE_KEY: z.string().min(32, 'must be at least 32 characters').optional(),

    MAX_BODY_BYTES: integerIn(1024, 10_485_760).default(65_536),
    KEY_CACHE_MAX_ENTRIES: integerIn(0, 10_000_000).default(100_000),
    KEY_CACHE_TTL_SECONDS: seconds(0, 3600).default(30),
    UPSTREAM_MAX_RESPONSE_BYTES: integerIn(1024, 104_857_600).default(1_048_576),

    RATE_LIMIT_AGENT_PER_MINUTE: integerIn(1, 10_000_000).default(600),
    RATE_LIMIT_HOST_PER_MINUTE: integerIn(1, 10_000_000).default(3000),
    RATE_LIMIT_STATUS_PER_MINUTE: integerIn(1, 10_000_000).default(300),
    RATE_LIMIT_IP_PER_MINUTE: integerIn(1, 10_000_000).default(300),
    RATE_LIMIT_UNKNOWN_HOST_REGISTRATIONS_PER_HOUR: integerIn(1, 10_000_000).default(20),
    /** Which proxies' X-Forwarded-For entries decide the client address (the rightmost untrusted one). */
    TRUST_PROXY: trustedProxies.default(false),
    /** Registrations (of any host) per client address per hour: caps what one address can create. */
    RATE_LIMIT_REGISTRATIONS_PER_HOUR: integerIn(1, 10_000_000).default(1000),
    /**
     * Host enrollments per hour: attempts to bind a key with an enrollment token (POST /host/enroll)
     * per client address, and enrollments a person creates without a key. Spent before any lookup.
     */
    RATE_LIMIT_ENROLLMENTS_PER_HOUR: integerIn(1, 10_000_000).default(30),

    /** Agents one host may hold: linked hosts (a person or an admin vouched for them). */
    AGENTS_PER_HOST_MAX: integerIn(1, 10_000_000).default(10_000),
    /** Agents a host nobody has linked yet may hold (dynamic hosts: anyone can make one). */
    AGENTS_PER_UNLINKED_HOST_MAX: integerIn(1, 10_000_000).default(100),
    /** Agents of one host that may wait for approval at once. */
    PENDING_AGENTS_PER_HOST_MAX: integerIn(1, 100_000).default(20),
    /** Deepest nesting of any JSON request body (arrays and objects), checked before any other work. */
    MAX_JSON_DEPTH: integerIn(4, 256).default(32),

    /** Time one decision's plugin operators may take together before they count as violations. */
    PLUGIN_BUDGET_MS: integerIn(1, 10_000).default(50),
    /** Worker threads that run plugin operators (off the event loop, so a slow one stops nothing else). */
    PLUGIN_WORKERS: integerIn(1, 64).default(2),
    /** Decisions that may wait for a plugin worker; beyond it executes are refused with 503. */
    PLUGIN_QUEUE_MAX: integerIn(1, 1_000_000).default(1000),
    /** How long a grant whose plugin operators overran PLUGIN_BUDGET_MS has them refused without running. */
    PLUGIN_TRIP_SECONDS: seconds(1, 86_400).default(60),

    /** Longest time a client may take to send the request headers. */
    HTTP_HEADERS_TIMEOUT_MS: integerIn(100, 300_000).default(10_000),
    /** Longest time a client may take to send the whole request. */
    HTTP_REQUEST_TIMEOUT_MS: integerIn(100, 600_000).default(30_000),
    /** How long an idle keep-alive connection stays open. */
    HTTP_KEEP_ALIVE_TIMEOUT_MS: integerIn(0, 600_000).default(5_000),
    /** Requests served on one keep-alive connection before it is closed (0: no limit). */
    HTTP_MAX_REQUESTS_PER_SOCKET: integerIn(0, 10_000_000).default(10_000),
    /** Open connections the server accepts in all; more are closed at once. */
    HTTP_MAX_CONNECTIONS: integerIn(1, 1_000_000).default(10_000),
    /** Open connections one client address may hold (0: no limit; raise it behind a proxy). */
    HTTP_MAX_CONNECTIONS_PER_ADDRESS: integerIn(0, 1_000_000).default(512),
    /**
     * Largest request line plus headers Node's parser accepts (Node's own default, made explicit);
     * more is answered 431. Each connection may buffer this much, so the cap stays modest.
     */
    HTTP_MAX_HEADER_BYTES: integerIn(1024, 65_536).default(16_384),
    /** Time in-flight requests get to finish after SIGTERM or SIGINT; then the process exits with status 1. */
    SHUTDOWN_TIMEOUT_MS: integerIn(100, 600_000).default(10_000),

    /** Record the audit trail (src/audit/log.ts). */
    AUDIT_ENABLED: bool.default(true),
    /** Events the trail keeps (a Redis stream trimmed with MAXLEN ~, or the memory store's ring). */
    AUDIT_MAX_EVENTS: integerIn(1000, 100_000_000).default(100_000),
    /** Events older than this are dropped from the trail (the count bound above applies too). */
    AUDIT_MAX_AGE_SECONDS: seconds(3600, 315_360_000).default(2_592_000),
    /** Repeated refusals of one caller within this window become one event with a count. */
    AUDIT_AGGREGATE_WINDOW_SECONDS: seconds(1, 3600).default(60),
    /** Longest an event waits in the in-process queue when no execute carries it: what a crash can lose. */
    AUDIT_FLUSH_MS: integerIn(10, 60_000).default(1000),
    /** Events the in-process queue holds; when full, the oldest are dropped (and counted). */
    AUDIT_QUEUE_MAX: integerIn(100, 1_000_000).default(10_000),
    /** Forward every event to this URL (POST {events: [...]}), once across all instances. */
    AUDIT_WEBHOOK_URL: z.url({ protocol: /^https?$/ }).optional(),
    /** Sent to the webhook as `Authorization: Bearer <token>`. */
    AUDIT_WEBHOOK_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
    /** One delivery attempt's time limit (at most 30 s: a forwarder must renew its hold within a minute). */
    AUDIT_WEBHOOK_TIMEOUT_MS: integerIn(100, 30_000).default(5000),
    /** Events per webhook POST. */
    AUDIT_WEBHOOK_BATCH_SIZE: integerIn(1, 1000).default(100),

    /**
     * CIBA (protocol §10): tell a person an approval waits for them by a signed webhook (POST, JSON,
     * X-Agentgate-Signature: HMAC-SHA256 with APPROVAL_WEBHOOK_SECRET; docs/approving.md), for
     * operators who route it to chat or push.
     */
    APPROVAL_WEBHOOK_URL: z.url({ protocol: /^https?$/ }).optional(),
    /** The HMAC key shared with the receiver of APPROVAL_WEBHOOK_URL. */
    APPROVAL_WEBHOOK_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
    /** One webhook attempt's time limit, from connecting to the answer's status. */
    APPROVAL_WEBHOOK_TIMEOUT_MS: integerIn(100, 30_000).default(5000),
    /** CIBA by e-mail: smtp://user:password@host:587 (STARTTLS when offered) or smtps://…:465 (TLS from the start). */
    SMTP_URL: z.url({ protocol: /^smtps?$/ }).optional(),
    /** The From of approval mails, e.g. `Agentgate <approvals@example.com>`. */
    SMTP_FROM: z.string().min(3).max(320).regex(/^[^\r\n]+$/, 'must be one line').optional(),
    /** How long connecting, the greeting, and one idle stretch of sending may each take. */
    SMTP_TIMEOUT_MS: integerIn(100, 120_000).default(10_000),
    /** CIBA requests one person may be sent per hour (protocol §11.5: no notification fatigue); more are refused with 429. */
    RATE_LIMIT_CIBA_PER_PERSON_PER_HOUR: integerIn(1, 10_000_000).default(10),
    /** CIBA requests one host may send per hour, to anyone; more are refused with 429. */
    RATE_LIMIT_CIBA_PER_HOST_PER_HOUR: integerIn(1, 10_000_000).default(60),

    /** A fetched JWKS answers for this long before it is refetched (docs/clients.md, keys at a JWKS URL). */
    JWKS_CACHE_TTL_SECONDS: seconds(10, 86_400).default(300),
    /**
     * After the TTL, a cached JWKS still answers for this long while one refresh runs. A key removed
     * from a JWKS stops verifying within JWKS_CACHE_TTL_SECONDS plus this.
     */
    JWKS_CACHE_STALE_SECONDS: seconds(0, 3600).default(60),
    /** How long one JWKS fetch may take in all (connect, TLS, redirects, body). */
    JWKS_FETCH_TIMEOUT_MS: integerIn(500, 30_000).default(5000),
    /** JWKS fetches this instance starts per minute, all URLs together; beyond it a fetch is refused (401/400), never queued. */
    JWKS_FETCHES_PER_MINUTE: integerIn(1, 100_000).default(60),
    /** JWKS fetches one host's requests may cause per hour (a registration naming a new URL, a kid the cache lacks); more get 429. */
    RATE_LIMIT_JWKS_FETCHES_PER_HOST_PER_HOUR: integerIn(1, 10_000_000).default(60),
    /**
     * Private, loopback or link-local networks (comma-separated CIDRs) a JWKS may be fetched from,
     * for hosts that publish keys inside the operator's network. Empty by default: every such
     * address is refused, since a URL a caller names is otherwise a way into that network.
     */
    INSECURE_JWKS_ALLOWED_PRIVATE_RANGES: z
      .string()
      .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
      .pipe(z.array(z.string().refine((entry) => parseCidr(entry) !== null, 'must be a CIDR network, e.g. 10.20.0.0/16 or fd00::/8')).max(64))
      .default([]),

    /** Server processes sharing the port (Node cluster). More than 1 needs a Redis (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS). */
    WORKERS: integerIn(1, 64).default(1),

    /** Admin endpoints that fabricate time-based state (absolute lifetime). Tests only. */
    INSECURE_TEST_HOOKS: bool.default(false),
  });

const schema = objectSchema
  .superRefine((c, ctx) => {
    checkRedisSettings(c, ctx);
    const anyRedis = c.REDIS_URL !== undefined || c.REDIS_CLUSTER_NODES !== undefined || c.REDIS_SENTINELS !== undefined;
    if (c.WORKERS > 1 && !anyRedis) {
      ctx.addIssue({ code: 'custom', path: ['WORKERS'], message: 'more than one worker needs a Redis: REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS (the memory store is per process)' });
    }
    if (c.METRICS_PORT !== undefined && c.METRICS_PORT === c.PORT) {
      ctx.addIssue({ code: 'custom', path: ['METRICS_PORT'], message: 'must differ from PORT (unset it to serve /metrics on PORT with METRICS_TOKEN)' });
    }
    if (c.WORKERS > 1 && c.METRICS_TOKEN !== undefined && c.METRICS_PORT === undefined) {
      // Workers share the main port, so a scrape there would see one worker's numbers; the primary
      // serves all of them, added up, on a port of its own.
      ctx.addIssue({ code: 'custom', path: ['METRICS_PORT'], message: 'with more than one worker, metrics are served by the primary on METRICS_PORT; set it' });
    }
    if ((c.OIDC_ISSUER === undefined) !== (c.OIDC_CLIENT_ID === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['OIDC_CLIENT_ID'], message: 'OIDC_ISSUER and OIDC_CLIENT_ID go together' });
    }
    if ((c.APPROVAL_WEBHOOK_URL === undefined) !== (c.APPROVAL_WEBHOOK_SECRET === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['APPROVAL_WEBHOOK_SECRET'], message: 'APPROVAL_WEBHOOK_URL and APPROVAL_WEBHOOK_SECRET go together: the receiver checks every notification against the secret' });
    }
    if ((c.SMTP_URL === undefined) !== (c.SMTP_FROM === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['SMTP_FROM'], message: 'SMTP_URL and SMTP_FROM go together' });
    }
    if (c.SESSION_IDLE_SECONDS > c.SESSION_MAX_SECONDS) {
      ctx.addIssue({ code: 'custom', path: ['SESSION_IDLE_SECONDS'], message: 'must not exceed SESSION_MAX_SECONDS' });
    }
    if (c.HTTP_HEADERS_TIMEOUT_MS > c.HTTP_REQUEST_TIMEOUT_MS) {
      ctx.addIssue({ code: 'custom', path: ['HTTP_HEADERS_TIMEOUT_MS'], message: 'must not exceed HTTP_REQUEST_TIMEOUT_MS' });
    }
    if (c.AGENTS_PER_UNLINKED_HOST_MAX > c.AGENTS_PER_HOST_MAX) {
      ctx.addIssue({ code: 'custom', path: ['AGENTS_PER_UNLINKED_HOST_MAX'], message: 'must not exceed AGENTS_PER_HOST_MAX' });
    }
    if (c.AGENT_MAX_LIFETIME_SECONDS > c.AGENT_ABSOLUTE_LIFETIME_SECONDS) {
      ctx.addIssue({
        code: 'custom',
        path: ['AGENT_MAX_LIFETIME_SECONDS'],
        message: 'must not exceed AGENT_ABSOLUTE_LIFETIME_SECONDS',
      });
    }
  });

type RedisSettings = Pick<
  z.infer<typeof objectSchema>,
  | 'REDIS_URL' | 'REDIS_CLUSTER_NODES' | 'REDIS_SENTINELS' | 'REDIS_SENTINEL_MASTER' | 'REDIS_USERNAME' | 'REDIS_PASSWORD'
  | 'REDIS_SENTINEL_USERNAME' | 'REDIS_SENTINEL_PASSWORD' | 'REDIS_TLS' | 'REDIS_TLS_CA_FILE'
>;

/**
 * The REDIS_* variables together: one topology at most, each setting only where it applies (a
 * setting that would be ignored is refused, so nobody believes a password or a CA is in use when it
 * is not), and a CA file that can be read.
 */
function checkRedisSettings(c: RedisSettings, ctx: z.RefinementCtx): void {
  const issue = (variable: string, message: string) => ctx.addIssue({ code: 'custom', path: [variable], message });
  const chosen = (['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const).filter((v) => c[v] !== undefined);
  if (chosen.length > 1) issue(chosen[1]!, `give one Redis topology, not ${chosen.join(' and ')}`);
  if ((c.REDIS_SENTINELS === undefined) !== (c.REDIS_SENTINEL_MASTER === undefined)) {
    issue(c.REDIS_SENTINELS === undefined ? 'REDIS_SENTINELS' : 'REDIS_SENTINEL_MASTER', 'REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together');
  }
  const nodeSettings = ['REDIS_USERNAME', 'REDIS_PASSWORD', 'REDIS_TLS_CA_FILE'] as const;
  if (chosen.length === 0) {
    for (const v of [...nodeSettings, 'REDIS_SENTINEL_USERNAME', 'REDIS_SENTINEL_PASSWORD'] as const) {
      if (c[v] !== undefined) issue(v, 'applies to a Redis, and none is configured (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS)');
    }
    if (c.REDIS_TLS) issue('REDIS_TLS', 'applies to a Redis, and none is configured (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS)');
  }
  if (c.REDIS_URL !== undefined) {
    for (const v of ['REDIS_USERNAME', 'REDIS_PASSWORD'] as const) {
      if (c[v] !== undefined) issue(v, 'with REDIS_URL the credentials go in the URL: redis://user:password@host:port');
    }
    if (c.REDIS_TLS) issue('REDIS_TLS', 'with REDIS_URL, TLS is chosen by the scheme: rediss://host:port');
  }
  if (c.REDIS_SENTINELS === undefined) {
    for (const v of ['REDIS_SENTINEL_USERNAME', 'REDIS_SENTINEL_PASSWORD'] as const) {
      if (c[v] !== undefined && chosen.length > 0) issue(v, 'applies only with REDIS_SENTINELS');
    }
  }
  if (c.REDIS_USERNAME !== undefined && c.REDIS_PASSWORD === undefined) issue('REDIS_PASSWORD', 'REDIS_USERNAME needs REDIS_PASSWORD');
  if (c.REDIS_SENTINEL_USERNAME !== undefined && c.REDIS_SENTINEL_PASSWORD === undefined) issue('REDIS_SENTINEL_PASSWORD', 'REDIS_SENTINEL_USERNAME needs REDIS_SENTINEL_PASSWORD');
  if (c.REDIS_TLS_CA_FILE !== undefined) {
    const tls = c.REDIS_TLS || c.REDIS_URL?.startsWith('rediss://') === true;
    if (!tls && chosen.length > 0) issue('REDIS_TLS_CA_FILE', 'applies with TLS only: set REDIS_TLS=true (or use a rediss:// REDIS_URL)');
    try {
      accessSync(c.REDIS_TLS_CA_FILE, fsConstants.R_OK);
    } catch {
      issue('REDIS_TLS_CA_FILE', `cannot read ${JSON.stringify(c.REDIS_TLS_CA_FILE.slice(0, 200))}: give the path of a PEM file of the CA that signed the Redis servers' certificates`);
    }
  }
}

/** The topology the REDIS_* variables describe, or null for the in-memory store. */
function redisTopology(c: RawConfig): RedisTopology | null {
  const access = {
    ...(c.REDIS_USERNAME !== undefined ? { username: c.REDIS_USERNAME } : {}),
    ...(c.REDIS_PASSWORD !== undefined ? { password: c.REDIS_PASSWORD } : {}),
    ...(c.REDIS_SENTINEL_USERNAME !== undefined ? { sentinelUsername: c.REDIS_SENTINEL_USERNAME } : {}),
    ...(c.REDIS_SENTINEL_PASSWORD !== undefined ? { sentinelPassword: c.REDIS_SENTINEL_PASSWORD } : {}),
    ...(c.REDIS_TLS_CA_FILE !== undefined ? { tlsCaFile: c.REDIS_TLS_CA_FILE } : {}),
  };
  if (c.REDIS_URL !== undefined) return { kind: 'single', url: c.REDIS_URL, ...access, tls: c.REDIS_URL.startsWith('rediss://') };
  if (c.REDIS_CLUSTER_NODES !== undefined) return { kind: 'cluster', nodes: c.REDIS_CLUSTER_NODES, ...access, tls: c.REDIS_TLS };
  if (c.REDIS_SENTINELS !== undefined && c.REDIS_SENTINEL_MASTER !== undefined) {
    return { kind: 'sentinel', sentinels: c.REDIS_SENTINELS, masterName: c.REDIS_SENTINEL_MASTER, ...access, tls: c.REDIS_TLS };
  }
  return null;
}

type RawConfig = z.infer<typeof schema>;

export interface Config extends RawConfig {
  /** The issuer with no trailing slash: the `aud` of host JWTs and the base of every endpoint. */
  issuer: string;
  /** The default execute location (`default_location`), also accepted as agent JWT `aud`. */
  executeUrl: string;
  /** Where the Redis store lives, or null for the in-memory store. */
  redis: RedisTopology | null;
}

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

// ---- problems in words -------------------------------------------------------------------------
// zod's own messages name a symptom of the parse ("expected number, received NaN") and a path into
// it (`MODES.1`); an operator needs the variable, the value it holds and what it must be instead.

/** Variables whose values are never repeated in a message: tokens, keys, and URLs that may hold a password. */
const SECRET_VARIABLE = /TOKEN|SECRET|PASSWORD|_KEY$|_URL$/;
/** How much of a value a message repeats. */
const SHOWN_VALUE_CHARS = 40;

/** The value as given, quoted and escaped (a control character cannot act on a terminal); undefined for a secret. */
function quoted(variable: string, value: string | undefined): string | undefined {
  if (value === undefined || SECRET_VARIABLE.test(variable)) return undefined;
  const cut = value.length > SHOWN_VALUE_CHARS ? `${value.slice(0, SHOWN_VALUE_CHARS)}…` : value;
  return JSON.stringify(cut).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The number schema under a variable's defaults and options, or null when it is not a number. */
function numberSchemaOf(variable: string): z.ZodNumber | null {
  let type: unknown = (objectSchema.shape as Record<string, unknown>)[variable];
  for (let depth = 0; depth < 4 && type !== undefined && !(type instanceof z.ZodNumber); depth++) {
    type = (type as { _zod?: { def?: { innerType?: unknown } } })._zod?.def?.innerType;
  }
  return type instanceof z.ZodNumber ? type : null;
}

/** Every variable the schema reads (tests cover each; a new setting is covered without a list). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(objectSchema.shape);

/**
 * A numeric variable's bounds, read from its schema, so a message states the range it checks (and a
 * test checks the same range); both undefined for a variable that is not a plain number.
 */
export function numberBounds(variable: string): { min: number | undefined; max: number | undefined } {
  const type = numberSchemaOf(variable);
  if (type === null) return { min: undefined, max: undefined };
  const bounded = (n: number | null) => (n === null || !Number.isFinite(n) || Math.abs(n) >= Number.MAX_SAFE_INTEGER ? undefined : n);
  return { min: bounded(type.minValue), max: bounded(type.maxValue) };
}

function wholeNumberText(variable: string): string {
  const { min, max } = numberBounds(variable);
  if (min !== undefined && max !== undefined) return `a whole number from ${min} to ${max}`;
  if (min !== undefined) return `a whole number of at least ${min}`;
  return max !== undefined ? `a whole number of at most ${max}` : 'a whole number';
}

/** One problem as `VARIABLE: what it must be, not "what it is"`. */
function problemText(issue: z.core.$ZodIssue, env: Record<string, string | undefined>): string {
  const variable = typeof issue.path[0] === 'string' ? issue.path[0] : '(root)';
  const raw = env[variable];
  const given = quoted(variable, raw);
  const not = given === undefined ? '' : `, not ${given}`;
  switch (issue.code) {
    case 'invalid_type':
      if (issue.expected === 'number' || issue.expected === 'int') return `${variable}: must be ${wholeNumberText(variable)}${not}`;
      break;
    case 'too_small':
    case 'too_big':
      if (issue.origin === 'number') return `${variable}: must be ${wholeNumberText(variable)}${not}`;
      if (issue.origin === 'array') return `${variable}: must list at least one value${not}`;
      if (issue.origin === 'string' && issue.message.startsWith('Too ')) {
        return issue.code === 'too_small'
          ? `${variable}: must be at least ${String(issue.minimum)} characters long`
          : `${variable}: must be at most ${String(issue.maximum)} characters long`;
      }
      break;
    case 'invalid_value': {
      const values = issue.values.map(String);
      if (values.includes('true') && values.includes('false')) return `${variable}: must be true or false (also 1/0, yes/no, on/off)${not}`;
      const index = issue.path[1];
      if (typeof index === 'number' && raw !== undefined) {
        // An entry of a comma-separated list (MODES, ALGORITHMS): name the entry, not its index.
        const entry = raw.split(',').map((x) => x.trim()).filter(Boolean)[index];
        return `${variable}: ${quoted(variable, entry) ?? 'an entry'} is not one of ${values.join(', ')}; give a comma-separated list of them`;
      }
      return `${variable}: must be one of ${values.join(', ')}${not}`;
    }
    case 'invalid_format':
      if (issue.message.startsWith('Invalid')) return `${variable}: must be a valid ${issue.format === 'url' ? 'http:// or https:// URL' : issue.format}${not}`;
      break;
    default:
      break;
  }
  return `${variable}: ${issue.message}`;
}

/** Parses the environment; throws ConfigError listing every problem. Empty strings count as unset. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  // A value of spaces only is neither unset nor a value: a number read from it would be 0, which
  // means "no limit" or "off" for several settings. Refused, naming it, with the other problems.
  const blank = Object.keys(objectSchema.shape)
    .filter((name) => present[name] !== undefined && present[name]!.trim() === '')
    .map((name) => `${name}: is blank (spaces only); give a value or leave it unset`);
  // A number is written in decimal digits: JavaScript would also read 0x10, 0b11, +80 and 1e3, which
  // no operator means when they set a port or a limit.
  const notDecimal = CONFIG_VARIABLES
    .filter((name) => present[name] !== undefined && present[name]!.trim() !== '' && numberSchemaOf(name) !== null && !/^-?\d+$/.test(present[name]!.trim()))
    .map((name) => {
      const given = quoted(name, present[name]);
      return `${name}: must be ${wholeNumberText(name)}${given === undefined ? '' : `, not ${given}`}`;
    });
  blank.push(...notDecimal);
  const refusedAbove = new Set([...blank].map((problem) => problem.slice(0, problem.indexOf(':'))));
  const parsed = schema.safeParse(Object.fromEntries(Object.entries(present).filter(([name, v]) => v!.trim() !== '' && !refusedAbove.has(name))));
  if (!parsed.success || blank.length > 0) {
    throw new ConfigError([...blank, ...(parsed.success ? [] : parsed.error.issues.map((issue) => problemText(issue, present)))]);
  }
  const raw = parsed.data;
  // A host name, not 127.0.0.1: WebAuthn never accepts an IP address as relying-party id, so with
  // this default the quick start's approval page can use passkeys. It still listens on HOST.
  const issuer = (raw.ISSUER ?? `http://localhost:${raw.PORT}`).replace(/\/+$/, '');
  return { ...raw, issuer, executeUrl: `${issuer}/capability/execute`, redis: redisTopology(raw) };
}
