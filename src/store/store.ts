// The Store interface: everything agentgate keeps, behind operations whose atomicity is part of
// the contract (DESIGN §3). Store is the sum of nine role interfaces (hosts, agents, replay
// records, the pending index, people, the hosts people enroll, the audit trail, recorded decisions,
// the backend itself), declared at the end of this file; each implementation builds one object per
// role and compose.ts assembles them. Two implementations pass one contract suite, a describe block per role
// (test/integration/store.contract.ts): redis/ (ioredis + Lua) and memory/ (quick start, unit tests).
import type {
  AgentRecord,
  AgentSnapshot,
  EnrollmentRecord,
  GrantRecord,
  HostRecord,
  HostStatus,
} from '../domain/types.ts';
import type { AuditEvent, AuditReader, AuditRecord } from '../audit/events.ts';
import type { AgentPatch, HostPatch } from './records.ts';
import type { RedisStoreOptions } from './redis/connection.ts';

// The patch types are derived from the record tables in records.ts (one list of each record's fields).
export type { AgentPatch, HostPatch } from './records.ts';
// The bound of one read is the trail's own (audit/events.ts); the stores enforce it.
export { MAX_AUDIT_READ } from '../audit/events.ts';

/** What the clean-up job tracks: agents and hosts waiting for approval, and agents' open approvals. */
export type PendingKind = 'agent' | 'host' | 'approval';

export interface AgentChange {
  set?: AgentPatch;
  /** Replace every grant of the agent with these (reactivation). */
  replaceGrants?: GrantRecord[];
  /** Insert or overwrite these grants by id. */
  upsertGrants?: GrantRecord[];
  /** New sliding-session deadline (epoch ms). */
  sessionExpiresAtMs?: number;
}

export type CasResult =
  | { ok: true; snapshot: AgentSnapshot }
  | { ok: false; reason: 'not_found' | 'conflict'; snapshot: AgentSnapshot | null };

/**
 * What the hot path asks in its one round trip (DESIGN §2 step 4): the grants of `capabilities`,
 * distinct names, one for execute, up to one per item for batch execute.
 */
export interface ExecuteRoundTrip {
  agentId: string;
  /** The key version the in-process key cache verified the signature with. */
  keyVersion: number;
  jti: string;
  /** How long the jti is remembered: JWT lifetime + skew. */
  jtiTtlMs: number;
  capabilities: readonly string[];
  nowMs: number;
  sessionTtlMs: number;
  /**
   * Windowed counters (the agent's and host's rate budgets, ratelimit/limits.ts) spent in the same
   * step once the key version is confirmed: not for an unknown agent or a stale key (the retry
   * spends them), but for a replay, as any refused request spends them. Their counts come back in
   * `counts`, in this order.
   */
  counters?: readonly CounterSpend[];
  /** Audit events appended in the same step, whatever its outcome; which were written comes back in `auditWritten`. */
  audit?: { records: readonly AuditRecord[]; maxEvents: number };
  /**
   * Recorded policy decisions (JSON texts, policy/decision-records.ts) appended to the decision
   * stream in the same step, whatever its outcome, keeping about the newest `maxRecords`; which were
   * written comes back in `decisionsWritten`.
   */
  decisions?: { records: readonly string[]; maxRecords: number };
}

/**
 * One spend of a windowed counter: `points` added to the count under `key`, whose window of
 * `windowSeconds` starts with the first spend after the last one ended (rate-limiter-flexible's
 * fixed window, on the same keys, so its own spends and these count together).
 */
export interface CounterSpend {
  key: string;
  points: number;
  windowSeconds: number;
}

/** A counter after a spend: its count in the window, and the milliseconds left of the window. */
export interface CounterCount {
  consumed: number;
  msBeforeNext: number;
}

/** The records a withdrawal wrote, whose durability confirmDurable waits for. */
export interface DurabilityAnchors {
  agentIds?: readonly string[];
  hostIds?: readonly string[];
}

export type Durability = 'durable' | 'not_durable';

/** At most this many capability names in one round trip (a batch names at most 50). */
export const MAX_ROUND_TRIP_CAPABILITIES = 256;
/** At most this many counters in one round trip: execute spends two, the agent's and the host's budgets. */
export const MAX_ROUND_TRIP_COUNTERS = 2;
/** At most this many audit events ride in one round trip (the audit log hands over at most this many at once). */
export const MAX_ROUND_TRIP_AUDIT_EVENTS = 256;
/** At most this many decision records ride in one round trip (the decision log hands over at most this many at once). */
export const MAX_ROUND_TRIP_DECISION_RECORDS = 64;
/** At most this many decision records come back from one read; a reader pages with `beforeId`. */
export const MAX_DECISION_READ = 1000;

/** What every outcome of a round trip reports besides its own: what it did with the audit events it carried. */
interface RoundTripAppends {
  /**
   * Per event of `audit`, in order, whether it was appended (empty when none were carried). A
   * promise where the events went to another node than the script's (a Redis Cluster): the round
   * trip's answer never waits for the audit trail, so a lost audit node refuses no execute.
   */
  auditWritten: boolean[] | Promise<boolean[]>;
  /** Per record of `decisions`, in order, whether it was appended; a promise where it went to another node, as for `auditWritten`. */
  decisionsWritten: boolean[] | Promise<boolean[]>;
}

export type ExecuteRoundTripResult = RoundTripAppends & (
  | { kind: 'not_found' }
  /** The key was rotated since the cache loaded it: refuse, the cache entry is dropped. */
  | { kind: 'stale_key' }
  | { kind: 'replay'; counts: CounterCount[] }
  | {
      kind: 'ok';
      agent: AgentRecord;
      /** Session deadline as read BEFORE this call extended it (null = no session). */
      sessionExpiresAtMs: number | null;
      /** Every grant of the agent for any of the requested capabilities, any status, by id. */
      grants: GrantRecord[];
      /** The counters of `counters` after this spend, in order. */
      counts: CounterCount[];
    });

/** A host write: the host after it, and whether it was applied (false: refused by `fromStatuses`). */
export type HostUpdate = { host: HostRecord; updated: boolean } | null;

/**
 * The checks createAgent makes in the same atomic step that adds the agent to its host
 * (SECURITY.md): the host still has the status and key the agent record copied, and the person it
 * was linked to (so a host revoked, approved, rotated, linked or unlinked meanwhile cannot miss this
 * agent), and it has room for one more
 * agent (and one more pending agent, when this one waits for approval).
 */
export interface AgentAdmission {
  /** The person the host was linked to when the agent was decided (undefined: not linked). */
  hostUserId?: string | undefined;
  maxAgents: number;
  maxPendingAgents: number;
  /** When the agent waits for approval: its approval's deadline. A pending slot counts until then. */
  pendingUntilMs?: number;
  nowMs: number;
}

export type CreateAgentResult =
  | { created: true; snapshot: AgentSnapshot }
  | { created: false; reason: 'exists'; existingAgentId: string }
  | { created: false; reason: 'host_changed' | 'too_many_agents' | 'too_many_pending' };


/** What an audit forwarder asks for: a batch of events to deliver, its own or abandoned. */
export interface AuditClaim {
  /** This forwarder's name, unique per process. */
  consumer: string;
  count: number;
  /** Events another forwarder has held this long without acknowledging them are taken over. */
  reclaimIdleMs: number;
}

// ---- the roles -------------------------------------------------------------------------------
// Store is the sum of the roles below. Each is a group of operations over one kind of record (or,
// for StoreBackend, over the backend itself), and each store implements each role with an object of
// its own (memory/ and redis/ name them after the role); compose.ts assembles those objects into the
// one Store the rest of the code sees. A caller that needs one role can say so by its type.

/** Hosts: their records, the thumbprint index, and the set of agents registered under each. */
export interface HostRecords {
  getHost(hostId: string): Promise<HostRecord | null>;
  findHostByThumbprint(thumbprint: string): Promise<HostRecord | null>;
  /** The host that delivers its keys by this JWKS URL (compared exactly), if any. */
  findHostByJwksUrl(jwksUrl: string): Promise<HostRecord | null>;
  /**
   * Creates the host unless one with the same thumbprint exists, or, for a host with a JWKS URL,
   * one with the same URL (a URL names one host, whichever of its keys signs); then returns that one.
   */
  createHost(host: HostRecord): Promise<{ host: HostRecord; created: boolean }>;
  /**
   * Sets fields of a host; null when it does not exist. With `fromStatuses`, only while the host's
   * status is one of them, checked in the same atomic step as the write (a revoked host cannot be
   * brought back by a write that read it before the revocation).
   */
  updateHost(
    hostId: string,
    patch: HostPatch,
    fromStatuses?: readonly HostStatus[],
  ): Promise<HostUpdate>;
  /**
   * Atomically moves the host to a new key: only if its thumbprint is still `expectedThumbprint`,
   * and only if no other host owns `next.thumbprint`. The old thumbprint stops resolving.
   */
  rotateHostKey(
    hostId: string,
    expectedThumbprint: string,
    next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
  ): Promise<'ok' | 'not_found' | 'conflict' | 'taken'>;
  listHostAgentIds(hostId: string): Promise<string[]>;
}

/**
 * Agents: their records with grants and session, the (host, key) registration index, the pending
 * slots they hold at their host, and the hot path's one round trip over all of it.
 */
export interface AgentRecords {
  getAgent(agentId: string): Promise<AgentSnapshot | null>;
  /** The agent registered under this host with this key thumbprint, if any. */
  findAgentIdByKey(hostId: string, keyThumbprint: string): Promise<string | null>;
  /**
   * Creates the agent with its grants unless (hostId, keyThumbprint) already names an agent;
   * then nothing is written and the existing id is returned. Two racing creates: one wins. With
   * `admission`, the host's status, key and room are checked in the step that links the agent to
   * it; a refusal writes nothing.
   */
  createAgent(snapshot: AgentSnapshot, admission?: AgentAdmission): Promise<CreateAgentResult>;
  /** Frees the pending slot an agent held at its host (it was approved, denied or revoked). */
  forgetPendingAgent(hostId: string, agentId: string): Promise<void>;
  /**
   * Compare-and-set: applies `change` only if the agent's `version` still equals
   * `expectVersion`, bumping it. Grant index by capability is kept in step.
   */
  casAgent(agentId: string, expectVersion: number, change: AgentChange): Promise<CasResult>;
  /**
   * Claims the (host, key) registration index for an agent about to rotate onto `thumbprint`:
   * 'claimed' by this call, 'ours' when it already names this agent, 'taken' by another agent
   * (nothing written). Rotation claims first, so a lost race changes nothing (docs/stances.md).
   */
  claimAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<'claimed' | 'ours' | 'taken'>;
  /** Frees the (host, key) index, only while it still names this agent. */
  releaseAgentKey(hostId: string, agentId: string, thumbprint: string): Promise<void>;

  // ---- hot path ------------------------------------------------------------------------------
  /**
   * One round trip: confirm the key version, record the jti (refusing a replay), extend the
   * sliding session when the agent is usable (stored status active, host active, session and
   * both lifetimes not elapsed at nowMs), touch lastUsedAtMs, and return the agent and its
   * grants for every requested capability (a name given twice counts once; no names, no grants).
   * A stale key or replay writes nothing else.
   */
  executeRoundTrip(request: ExecuteRoundTrip): Promise<ExecuteRoundTripResult>;
}

/**
 * Things that may happen once: a JWT's jti, a status poll per window, a WebAuthn challenge. Each is
 * remembered for a while and then forgotten; recording one again within that while answers false.
 */
export interface ReplayRecords {
  /**
   * Records an agent JWT's jti for ttlMs; false if it was already recorded (a replay). Shares its
   * keys with executeRoundTrip, so one jti is accepted once across every agent-JWT endpoint.
   */
  recordAgentJti(agentId: string, jti: string, ttlMs: number): Promise<boolean>;
  /** Records a host JWT's jti, partitioned by the host key thumbprint (known or not). */
  recordHostJti(hostThumbprint: string, jti: string, ttlMs: number): Promise<boolean>;
  /**
   * Records a status poll for an agent waiting for approval; false when one was recorded within the
   * last `windowMs` (the client polls faster than the approval's interval: RFC 8628 slow_down).
   */
  recordStatusPoll(agentId: string, windowMs: number): Promise<boolean>;
  /**
   * Uses up a WebAuthn challenge (by a hash of it, never the challenge itself) for `ttlMs`: true
   * the first time, false on every later call, atomically, so two requests carrying one ceremony's
   * answer cannot both pass (a session's copy of the challenge is only a copy).
   */
  useChallenge(challengeKey: string, ttlMs: number): Promise<boolean>;
}

/**
 * What waits for a decision: the clean-up job's lists of agents, hosts and approvals waiting too
 * long (and the removal of what waited too long), and the approval page's index of open approvals
 * by user code.
 */
export interface PendingIndex {
  /**
   * Remembers, for the clean-up job, that an agent or host waits for approval since `atMs` (its
   * creation), or that an agent's open approval (kind 'approval', id: the agent's) lapses at `atMs`.
   * Tracking an id again moves it to the new time.
   */
  trackPending(kind: PendingKind, id: string, atMs: number): Promise<void>;
  /** It no longer waits (decided, revoked or removed). */
  untrackPending(kind: PendingKind, id: string): Promise<void>;
  /** Up to `limit` ids tracked at a time before `beforeMs`, oldest first. */
  listStalePending(kind: PendingKind, beforeMs: number, limit: number): Promise<string[]>;
  /**
   * Deletes an agent that still waits for approval and was created before `createdBeforeMs`, with
   * its grants, session and index entries. Atomic per agent: of several instances cleaning at once,
   * exactly one answers true. An agent that was decided meanwhile is kept (false).
   */
  removeStalePendingAgent(agentId: string, createdBeforeMs: number): Promise<boolean>;
  /** Deletes a host that is still pending, was created before `createdBeforeMs` and has no agents left. */
  removeStalePendingHost(hostId: string, createdBeforeMs: number): Promise<boolean>;

  // ---- approvals ----------------------------------------------------------------------------
  /** Lets the approval page find an agent by the lookup key of its open approval's user code, until `untilMs`. */
  indexUserCode(lookupKey: string, agentId: string, untilMs: number): Promise<void>;
  /** The agent an approval's user code was indexed for, or null (never indexed, or expired). */
  findAgentIdByUserCode(lookupKey: string): Promise<string | null>;
}

/** People: the hosts linked to each, their passkeys, and their signed-in sessions. */
export interface PersonRecords {
  /** Remembers that a host is linked to a person (the person's own API lists them). Idempotent. */
  addPersonHost(personId: string, hostId: string): Promise<void>;
  removePersonHost(personId: string, hostId: string): Promise<void>;
  /** The hosts linked to a person, sorted; bounded by what the person linked. */
  listPersonHostIds(personId: string): Promise<string[]>;
  /** A person's passkeys: each credential id with the JSON the service stored for it. */
  listPasskeys(personId: string): Promise<Array<{ id: string; json: string }>>;
  /**
   * Adds a passkey unless the person has one with this credential id ('exists') or holds `max`
   * already ('full'): one atomic step, so two ceremonies at once cannot both pass the count.
   */
  addPasskey(personId: string, passkeyId: string, json: string, max: number): Promise<'added' | 'exists' | 'full'>;
  /** Rewrites a passkey only while it exists (false otherwise): a use racing a removal never brings it back. */
  updatePasskey(personId: string, passkeyId: string, json: string): Promise<boolean>;
  /** Removes a passkey; false when the person had none with this id. */
  removePasskey(personId: string, passkeyId: string): Promise<boolean>;

  // ---- how a person is reached, and what waits for them (CIBA) ---------------------------------
  /**
   * Remembers a signed-in person: their id then names them as a login hint, and so does `email`
   * (the address their identity provider vouched for), with its address. An address names the last
   * person who signed in with it.
   */
  savePersonContact(personId: string, email: string | undefined): Promise<void>;
  /** The person a login hint names (hintKey: a lower-cased address, or a person id as given), or null. */
  findPersonByHint(hintKey: string): Promise<string | null>;
  /** The address saved for a person, or null. */
  getPersonEmail(personId: string): Promise<string | null>;
  /**
   * Puts an agent in a person's inbox until `untilMs` (again: the later deadline stays). At most
   * `maxItems` are kept: those nearest to lapsing go first.
   */
  addToInbox(personId: string, agentId: string, untilMs: number, maxItems: number): Promise<void>;
  /** The agents in a person's inbox whose deadline is after `nowMs`, latest deadline first, at most `limit`. */
  listInbox(personId: string, nowMs: number, limit: number): Promise<string[]>;

  // ---- people's sessions ----------------------------------------------------------------------
  /** Stores a session's JSON under its key (a hash of the cookie's id, never the id itself) for ttlMs. */
  saveSession(key: string, json: string, ttlMs: number): Promise<void>;
  /** The session's JSON, or null when it never existed or expired. */
  loadSession(key: string): Promise<string | null>;
  deleteSession(key: string): Promise<void>;
}

/** What completeEnrollment did: bound the enrollment to the host, or found it used or gone (nothing written). */
export type EnrollmentCompletion = 'enrolled' | 'not_pending' | 'not_found';

/**
 * Hosts a person enrolls (services/enrollments.ts): an enrollment waits, under the hash of its
 * token, for a machine to present the token with its key. Each record is one key (one hash slot),
 * forgotten `retainMs` after it was stored.
 */
export interface HostEnrollments {
  /**
   * Stores a new enrollment under its `tokenHash` for `retainMs`; false (nothing written) when one
   * is already stored under that hash, which a random token of 256 bits never meets.
   */
  createEnrollment(enrollment: EnrollmentRecord, retainMs: number): Promise<boolean>;
  /** The enrollment stored under this token hash, or null (never stored, or forgotten). */
  findEnrollment(tokenHash: string): Promise<EnrollmentRecord | null>;
  /**
   * Moves the enrollment from `pending` to `enrolled`, naming `hostId`, in one atomic step, so of
   * two callers with one token exactly one answers 'enrolled'; the other 'not_pending'. 'not_found'
   * when no enrollment is stored under the hash. Its expiry is left as it was.
   */
  completeEnrollment(tokenHash: string, hostId: string, atMs: number): Promise<EnrollmentCompletion>;
}

/** The audit trail: appended by every instance, read by the audit API, forwarded by the webhook forwarders. */
export interface AuditRecords extends AuditReader {
  /**
   * Appends events, oldest first, keeping about the newest `maxEvents` (Redis trims approximately:
   * never fewer, at most about one stream node more), and, when `maxAgeMs` is given, dropping
   * events older than that. Every write is issued before the method first awaits, so a caller in
   * the same tick as executeRoundTrip shares its pipeline. Each event gets an id `<ms>-<sequence>`
   * that orders the trail. Settles once every write has; the result says, per event, whether it was
   * written.
   */
  appendAuditEvents(records: readonly AuditRecord[], maxEvents: number, maxAgeMs?: number): Promise<boolean[]>;
  /**
   * Hands a forwarder up to `count` events to deliver: first any that another forwarder (or this
   * one before a restart) held for `reclaimIdleMs` without acknowledging, else events no forwarder
   * was given yet, oldest first. Every event is given to one forwarder at a time; it stays that
   * forwarder's until acknowledged, renewed or taken over.
   */
  claimAuditEvents(claim: AuditClaim): Promise<AuditEvent[]>;
  /** Delivered: these events are never handed out again. */
  acknowledgeAuditEvents(ids: readonly string[]): Promise<void>;
  /** Restarts the idle clock of those of `ids` still held by `consumer`; answers those ids. */
  renewAuditClaims(consumer: string, ids: readonly string[]): Promise<string[]>;
  /** Gives back those of `ids` still held by `consumer`, so any forwarder may claim them at once. */
  releaseAuditClaims(consumer: string, ids: readonly string[]): Promise<void>;
  /**
   * Forgets up to 100 forwarders that hold nothing and were not seen for `idleMs` (instances that
   * restarted under new names), so the registry of forwarders stays small; answers how many. Never
   * loses an event a forwarder holds. The memory store keeps no registry: always 0.
   */
  forgetIdleAuditConsumers(idleMs: number): Promise<number>;
}

/** One recorded policy decision as the store keeps it: its stream id and its JSON text. */
export interface StoredDecision {
  /** `<ms>-<sequence>`, ordering the stream. */
  id: string;
  json: string;
}

/**
 * Recorded policy decisions (policy/decision-records.ts), shared by every instance: one bounded
 * stream on Redis, a ring in memory. Kept apart from the audit trail, which is forwarded and read
 * by people: a record holds a decision's whole (redacted) input.
 */
export interface DecisionRecords {
  /**
   * Appends records (JSON texts), oldest first, keeping about the newest `maxRecords` (trimmed as
   * the audit trail is). Every write is issued before the method first awaits. Settles once every
   * write has; the result says, per record, whether it was written.
   */
  appendDecisionRecords(records: readonly string[], maxRecords: number): Promise<boolean[]>;
  /**
   * Up to `count` (at most MAX_DECISION_READ) records, newest first, each older than `beforeId`
   * when it is given. Entries the store cannot read as a record are skipped, never thrown.
   */
  readDecisionRecords(count: number, beforeId?: string): Promise<StoredDecision[]>;
  /**
   * Where a process of its own can read these records itself, as plain data that can be sent to it;
   * null when only this process can (the memory store's ring). A preview reads them there, so that
   * neither this process's event loop nor its command connection carries a hundred thousand records.
   */
  decisionStreamAddress(): DecisionStreamAddress | null;
}

/** Omit applied to each member of a union, so that each topology of RedisStoreOptions keeps its own fields. */
type OmitEach<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The Redis store's recorded decisions as another process finds them: how to connect (no callbacks), and the stream's key. */
export interface DecisionStreamAddress {
  redis: OmitEach<RedisStoreOptions, 'onConnectionError'>;
  streamKey: string;
}

/**
 * The backend itself rather than any one kind of record: which it is, what the instances sharing it
 * agree on through it (a shared secret, key-cache invalidations), how far its writes are durable,
 * whether it is reachable, and closing it. Named for what it is about, the backend, rather than
 * "lifecycle": only ping, isUnavailable and close are about the store's life, and the shared
 * secret, the invalidations and durability would be hard to find under that name.
 */
export interface StoreBackend {
  readonly kind: 'memory' | 'redis';

  /**
   * A random secret shared by every instance on this store, created by the first to ask (base64url,
   * 32 bytes). For keys that must agree across instances when no key is configured.
   */
  sharedSecret(name: string): Promise<string>;

  // ---- key-cache invalidation (pub/sub) ------------------------------------------------------
  publishAgentInvalidation(agentId: string): Promise<void>;
  onAgentInvalidation(listener: (agentId: string) => void): void;

  // ---- durability ----------------------------------------------------------------------------
  /**
   * Waits until the writes acknowledged so far to these agents' and hosts' records would survive
   * the loss of the master that took them (DESIGN §10: withdrawals of authority wait for a
   * replica). `not_durable` when the replicas did not answer in time: the writes stand, but a
   * failover now could undo them. Never throws for that; the memory store has nothing to wait for.
   */
  confirmDurable(anchors: DurabilityAnchors): Promise<Durability>;

  // ---- lifecycle -----------------------------------------------------------------------------
  /**
   * Whether an error this store threw means the backend is unreachable or not serving (the caller
   * answers 503 and the client retries), rather than a bug or corrupt data (500).
   */
  isUnavailable(error: unknown): boolean;
  /** Round-trip health check with a timeout; throws when the backend is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Everything agentgate keeps: every role above, as one object (compose.ts assembles it). */
export interface Store extends HostRecords, AgentRecords, ReplayRecords, PendingIndex, PersonRecords, HostEnrollments, AuditRecords, DecisionRecords, StoreBackend {}
