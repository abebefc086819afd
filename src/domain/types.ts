// Records agentgate keeps, as the services and stores see them. Times are epoch milliseconds
// (`...AtMs`); the HTTP layer renders them as ISO 8601.

export const AGENT_STATUSES = ['active', 'pending', 'expired', 'revoked', 'rejected', 'claimed'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

export const HOST_STATUSES = ['active', 'pending', 'revoked', 'rejected'] as const;
export type HostStatus = (typeof HOST_STATUSES)[number];

export const GRANT_STATUSES = ['active', 'pending', 'denied', 'revoked'] as const;
export type GrantStatus = (typeof GRANT_STATUSES)[number];

export const MODES = ['delegated', 'autonomous'] as const;
export type Mode = (typeof MODES)[number];

/** A public JWK as stored (only the public members; never private parts). */
export interface PublicJwk {
  kty: string;
  crv?: string;
  x?: string;
  y?: string;
  n?: string;
  e?: string;
  /** The key's id in its owner's JWKS: kept only for keys delivered by a JWKS URL, which name their key by it. */
  kid?: string;
}

/** `{field: exact-value}` or `{field: {op: operand, ...}}`, top-level argument names only. */
export type Constraints = Record<string, unknown>;

export interface HostRecord {
  id: string;
  /** RFC 7638 SHA-256 thumbprint of the current host key: the host's identity on the wire (`iss`). */
  thumbprint: string;
  publicJwk: PublicJwk;
  /**
   * Present when the host delivers its keys by a JWKS URL (protocol §5.1); fixed at registration.
   * `publicJwk` is then the key of that JWKS it last signed with, `kid` included.
   */
  jwksUrl?: string;
  name?: string;
  status: HostStatus;
  userId?: string;
  defaultCapabilities: string[];
  createdAtMs: number;
  updatedAtMs: number;
  activatedAtMs?: number;
}

/** Where a host a person set up without a key stands: waiting for its key, or bound to one (single use). */
export const ENROLLMENT_STATES = ['pending', 'enrolled'] as const;
export type EnrollmentState = (typeof ENROLLMENT_STATES)[number];

/**
 * A host a signed-in person set up without a key yet: the host record is made when a machine
 * presents the enrollment token with its key (POST /host/enroll). Stored under the SHA-256 of the
 * token, never the token itself.
 */
export interface EnrollmentRecord {
  id: string;
  /** The person the host will be linked to. */
  personId: string;
  name: string;
  defaultCapabilities: string[];
  /** SHA-256 of the enrollment token, base64url: how the record is found. */
  tokenHash: string;
  /** When the person gave the host's public key: its thumbprint, the only key the token may bind. */
  keyThumbprint?: string;
  createdAtMs: number;
  /** The token binds a key until then (an hour after creation); the record is kept a day, to tell expired from wrong. */
  expiresAtMs: number;
  state: EnrollmentState;
  /** The host the token made, once enrolled. */
  hostId?: string;
  enrolledAtMs?: number;
}

/** Protocol §10: how a person is asked. */
export const APPROVAL_METHODS = ['device_authorization', 'ciba'] as const;
export type ApprovalMethod = (typeof APPROVAL_METHODS)[number];

/** The approval an agent or its grants wait on: RFC 8628 device authorization, or CIBA. */
export interface ApprovalRecord {
  /** Also what the user code is derived from (services/approvals/user-codes.ts): the code itself is never stored. */
  id: string;
  /** Grant ids this approval decides; empty when only the registration itself waits. */
  grantIds: string[];
  createdAtMs: number;
  expiresAtMs: number;
  intervalSeconds: number;
  /** Absent on approvals stored before CIBA existed: device authorization. */
  method?: ApprovalMethod;
  /**
   * CIBA: the person the request was sent to, the only one who may decide it on the inbox or the
   * people's API. Absent on a CIBA approval whose login_hint named nobody: it is answered like any
   * other, nobody is told, and only an administrator can decide it.
   */
  personId?: string;
  /** CIBA: the agent's words the person compares with what the agent shows (checked text, never a link). */
  bindingMessage?: string;
}

export interface AgentRecord {
  id: string;
  hostId: string;
  name: string;
  mode: Mode;
  /** Stored status; session expiry and lifetimes are evaluated against the clock on every use. */
  status: AgentStatus;
  publicJwk: PublicJwk;
  /**
   * Present when the agent's key is delivered by a JWKS URL (protocol §5.1; `publicJwk.kid` is the
   * `agent_kid`); fixed at registration. The key must still be published there on every use.
   */
  jwksUrl?: string;
  keyThumbprint: string;
  /** Incremented on every key rotation; the hot path's key cache is checked against it. */
  keyVersion: number;
  /** Optimistic-concurrency version; every read-then-write transition bumps it. */
  version: number;
  /** Copied from the host (cascade) so the hot path never reads another hash slot. */
  hostStatus: HostStatus;
  hostThumbprint: string;
  userId?: string;
  reason?: string;
  createdAtMs: number;
  updatedAtMs: number;
  activatedAtMs?: number;
  lastUsedAtMs?: number;
  /** created + absolute lifetime: when elapsed the agent is revoked for good. */
  absoluteExpiresAtMs: number;
  /** activated + max lifetime: when elapsed the agent is expired (reactivation resets it). */
  maxLifetimeExpiresAtMs: number;
  approval?: ApprovalRecord;
}

export interface GrantRecord {
  id: string;
  agentId: string;
  capability: string;
  status: GrantStatus;
  constraints?: Constraints;
  grantedBy?: string;
  deniedBy?: string;
  reason?: string;
  /**
   * Who wrote `reason`: the agent or host that asked, or the policy that decided (its reason for a
   * refusal or for needing approval). Absent on records from before it was kept: read as the requester's.
   */
  reasonBy?: 'requester' | 'policy';
  createdAtMs: number;
  updatedAtMs: number;
  expiresAtMs?: number;
}

/** An agent with all its grants and its sliding session deadline, read in one go. */
export interface AgentSnapshot {
  agent: AgentRecord;
  grants: GrantRecord[];
  /** When the sliding session ends; absent or past means the session has expired. */
  sessionExpiresAtMs: number | null;
}
