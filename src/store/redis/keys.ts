// The Redis key layout, in one place (DESIGN §3). Every key of one agent carries the agent id as a
// hash tag (`{agt_x}`), and every key of one host carries the host id, so each multi-key script
// touches exactly one hash slot and the same code runs on a single Redis, Sentinel or Cluster.
// The thumbprint index and the host jti records are tagged by the thumbprint instead: they are
// only ever touched one key at a time.

import type { PendingKind } from '../store.ts';

export interface KeyLayout {
  /** Agent hash: one field per AgentRecord field (JSON for nested values). */
  agent(agentId: string): string;
  /** Sliding-session deadline (epoch ms), expiring at that deadline. */
  session(agentId: string): string;
  /** Hash grantId -> grant JSON. */
  grants(agentId: string): string;
  /** Hash capability -> JSON array of grant ids. */
  grantsByCapability(agentId: string): string;
  /**
   * The agent's hash, session, grants and grant index, in this order: what every script that reads
   * or rewrites a whole agent takes first (create, compare-and-set, the execute round trip, removal).
   */
  agentRecord(agentId: string): readonly [string, string, string, string];
  /** Replay record of an agent JWT; shared by executeRoundTrip and recordAgentJti. */
  agentJti(agentId: string, jti: string): string;
  /** Marks a recent status poll of an agent waiting for approval (expires after the poll window). */
  statusPoll(agentId: string): string;
  /** Host hash: one field per HostRecord field. */
  host(hostId: string): string;
  /** Set of the ids of the host's agents. */
  hostAgents(hostId: string): string;
  /** Sorted set of the host's agents waiting for approval, scored by their approval's deadline. */
  hostPendingAgents(hostId: string): string;
  /** (host, agent key thumbprint) -> agentId: the registration index. */
  hostAgentKey(hostId: string, agentKeyThumbprint: string): string;
  /** Host key thumbprint -> hostId: how a host JWT's `iss` finds its host. */
  hostByThumbprint(thumbprint: string): string;
  /** A hash of a JWKS URL -> hostId: how a JWKS host is found after it signs with a new key. */
  hostByJwksUrl(urlKey: string): string;
  /** Replay record of a host JWT, partitioned by the host key thumbprint. */
  hostJti(thumbprint: string, jti: string): string;
  /** User-code lookup key -> agent id (expires with the approval). */
  userCode(lookupKey: string): string;
  /** A WebAuthn challenge that was used, keyed by a hash of it (expires with the ceremony). */
  usedChallenge(challengeKey: string): string;
  /** A person's session (the approval page), keyed by a hash of its cookie's id. */
  personSession(key: string): string;
  /** The set of host ids linked to a person (tagged by a hash of the person id, which may hold any character). */
  personHosts(personKey: string): string;
  /** Hash of a person's passkeys: credential id -> JSON. */
  personPasskeys(personKey: string): string;
  /** A person's saved e-mail address (CIBA notices). */
  personEmail(personKey: string): string;
  /** Sorted set of agent ids waiting in a person's inbox, scored by their approval's deadline. */
  personInbox(personKey: string): string;
  /** The person a login hint names, keyed by a hash of the hint. */
  loginHint(hintHash: string): string;
  /** A host enrollment (hash, one field per record field), keyed and tagged by its token's SHA-256; expires a day after it was made. */
  hostEnrollment(tokenHash: string): string;
  /** Agents or hosts waiting for approval, scored by creation time (one key each: no hash tag needed). */
  pendingSince(kind: PendingKind): string;
  /** The marker a durability round writes in the slot of `anchorKey` (store/redis/durability.ts). */
  durabilityMarker(anchorKey: string): string;
  /** A secret shared by every instance. */
  sharedSecret(name: string): string;
  /**
   * The audit trail: one Redis stream, trimmed to AUDIT_MAX_EVENTS, with one consumer group that
   * the webhook forwarders of every instance share. One key, so it needs no hash tag.
   */
  readonly auditStream: string;
  /**
   * Recorded policy decisions: one Redis stream, trimmed to the recorder's bound, read newest first
   * by the preview. One key, so it needs no hash tag; on a Redis Cluster it is in a slot of its own.
   */
  readonly decisionStream: string;
  /** Pub/sub channel that carries agent ids whose cached keys must be dropped. */
  readonly invalidationChannel: string;
}

/** The hash tag of a key (`{...}`, as Redis Cluster hashes it), or the whole key without one. */
function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  const close = open === -1 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

/** True when a Redis Cluster keeps both keys in one slot, so one script may touch both: their hash tags are equal. */
export function shareSlot(a: string, b: string): boolean {
  return hashTagOf(a) === hashTagOf(b);
}

/** The audit stream's consumer group: every instance's webhook forwarder reads through it. */
export const AUDIT_FORWARD_GROUP = 'forward';

/**
 * Builds the layout for one prefix. The prefix must not contain braces: Redis hashes only the text
 * between the first `{` and the next `}`, so a brace in the prefix would change every slot.
 */
export function keyLayout(prefix: string): KeyLayout {
  if (/[{}]/.test(prefix)) {
    throw new Error(`Redis key prefix "${prefix}" must not contain "{" or "}" (they would break the hash tags)`);
  }
  const agentTag = (agentId: string): string => `${prefix}{${agentId}}`;
  const hostTag = (hostId: string): string => `${prefix}host:{${hostId}}`;
  return {
    agent: (agentId) => agentTag(agentId),
    session: (agentId) => `${agentTag(agentId)}:session`,
    grants: (agentId) => `${agentTag(agentId)}:grants`,
    grantsByCapability: (agentId) => `${agentTag(agentId)}:grants:cap`,
    agentRecord: (agentId) => {
      const tag = agentTag(agentId);
      return [tag, `${tag}:session`, `${tag}:grants`, `${tag}:grants:cap`];
    },
    agentJti: (agentId, jti) => `${agentTag(agentId)}:jti:${jti}`,
    statusPoll: (agentId) => `${agentTag(agentId)}:poll`,
    host: (hostId) => hostTag(hostId),
    hostAgents: (hostId) => `${hostTag(hostId)}:agents`,
    hostPendingAgents: (hostId) => `${hostTag(hostId)}:pending`,
    hostAgentKey: (hostId, agentKeyThumbprint) => `${hostTag(hostId)}:agentkey:${agentKeyThumbprint}`,
    hostByThumbprint: (thumbprint) => `${prefix}hostkey:{${thumbprint}}`,
    hostByJwksUrl: (urlKey) => `${prefix}hostjwks:{${urlKey}}`,
    hostJti: (thumbprint, jti) => `${prefix}hostjti:{${thumbprint}}:${jti}`,
    userCode: (lookupKey) => `${prefix}ucode:{${lookupKey}}`,
    sharedSecret: (name) => `${prefix}secret:${name}`,
    durabilityMarker: (anchorKey) => `${prefix}durable:{${hashTagOf(anchorKey)}}`,
    pendingSince: (kind) => `${prefix}pending-${kind}s`,
    personSession: (key) => `${prefix}psession:{${key}}`,
    usedChallenge: (challengeKey) => `${prefix}challenge:{${challengeKey}}`,
    personHosts: (personKey) => `${prefix}person:{${personKey}}:hosts`,
    personPasskeys: (personKey) => `${prefix}person:{${personKey}}:passkeys`,
    personEmail: (personKey) => `${prefix}person:{${personKey}}:email`,
    personInbox: (personKey) => `${prefix}person:{${personKey}}:inbox`,
    loginHint: (hintHash) => `${prefix}hint:{${hintHash}}`,
    hostEnrollment: (tokenHash) => `${prefix}enroll:{${tokenHash}}`,
    invalidationChannel: `${prefix}invalidate`,
    auditStream: `${prefix}audit`,
    decisionStream: `${prefix}decisions`,
  };
}
