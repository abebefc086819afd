// How a host is first set up for a person, whatever the door: the rules on default capabilities
// (the admin API's pre-registration, a person's own POST /people/me/hosts and page form, and an
// enrollment all check them here), the refusal of a key some host already holds, and the creation
// of an active host linked to its person. DESIGN §8: a default capability is a grant someone can
// be named for, the person or administrator who set it, and never a `presence` one.
import type { AuditBy } from '../audit/events.ts';
import type { Catalog } from '../catalog/catalog.ts';
import type { HostRecord, PublicJwk } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { AgentRecords, HostRecords, PendingIndex, PersonRecords, StoreBackend } from '../store/store.ts';
import type { ServiceDepsOver } from './deps.ts';

/** What setting up a host may touch of the store: what linking it does (services/hosts.ts linkHost), no more. */
type HostSetupDeps = ServiceDepsOver<HostRecords & AgentRecords & PersonRecords & PendingIndex & Pick<StoreBackend, 'confirmDurable' | 'publishAgentInvalidation'>>;

/**
 * Refuses default capabilities the catalog does not offer, and any that needs presence (400
 * invalid_capabilities, naming them): DESIGN §8, a capability that needs a person with their passkey
 * for every approval is never pre-approved, so it cannot be a default.
 */
export function checkDefaultCapabilities(catalog: Pick<Catalog, 'has' | 'get'>, names: readonly string[]): void {
  const unknown = names.filter((name) => !catalog.has(name));
  if (unknown.length > 0) {
    throw new ApiError('invalid_capabilities', `unknown default capabilities: ${unknown.join(', ')}`, { invalid_capabilities: unknown });
  }
  const presence = names.filter((name) => catalog.get(name)?.approval_strength === 'presence');
  if (presence.length > 0) {
    throw new ApiError('invalid_capabilities', `${presence.join(', ')} need${presence.length === 1 ? 's' : ''} a person with their passkey for every approval, so cannot be default capabilities`, { invalid_capabilities: presence });
  }
}

/**
 * The answer to a person's door (their API, their page, an enrollment token) offering a key that
 * some host already holds: 409 host_already_linked when a person answers for that host (whoever,
 * the caller included), 409 conflict otherwise. Such a door never links or changes the existing
 * host (docs/stances.md): a public key is public, so offering one proves nothing about holding it,
 * and linking someone's dynamic host would claim its autonomous agents (services/hosts.ts linkHost).
 */
export function existingHostRefusal(host: HostRecord): ApiError {
  if (host.userId !== undefined) return new ApiError('host_already_linked', 'a host with this key is already linked to a person; use another key');
  return new ApiError('conflict', 'a host with this key already exists; use another key (an administrator can link the existing host)');
}

/** Refuses, as existingHostRefusal says, when some host holds this thumbprint already. */
export async function refuseKnownHostKey(deps: { store: Pick<HostRecords, 'findHostByThumbprint'> }, thumbprint: string): Promise<void> {
  const existing = await deps.store.findHostByThumbprint(thumbprint);
  if (existing) throw existingHostRefusal(existing);
}

interface NewPersonHost {
  hostId: string;
  thumbprint: string;
  publicJwk: PublicJwk;
  personId: string;
  name?: string | undefined;
  /** Checked already (checkDefaultCapabilities). */
  defaultCapabilities: readonly string[];
  /** Who set the host up, for the audit trail (linkHost records the link with it). */
  by: AuditBy;
}

/**
 * Creates a host with a new key, active and linked to its person with their default capabilities,
 * or refuses (existingHostRefusal) when another host took the key meanwhile: store.createHost is
 * atomic on the thumbprint index, so of two creations with one key exactly one makes a host, and an
 * existing host is never changed here.
 *
 * Order, so that every crash leaves a safe state: the person's index of hosts first (an entry that
 * names no host shows nothing: services/person-account.ts myHosts lists only hosts that name the
 * person); then the whole record in one write, already naming its person and defaults, so no
 * instant shows an active host nobody answers for. The link is recorded, not made again through
 * linkHost: the host has no agents to tell yet, and linkHost would set the link on any live host,
 * undoing an unlink the person made in the instant since the creation.
 */
export async function createPersonHost(deps: HostSetupDeps, request: NewPersonHost): Promise<HostRecord> {
  const nowMs = deps.clock.nowMs();
  await deps.store.addPersonHost(request.personId, request.hostId);
  const { host, created } = await deps.store.createHost({
    id: request.hostId,
    thumbprint: request.thumbprint,
    publicJwk: request.publicJwk,
    ...(request.name ? { name: request.name } : {}),
    status: 'active',
    userId: request.personId,
    defaultCapabilities: [...request.defaultCapabilities],
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    activatedAtMs: nowMs,
  });
  if (!created) {
    await deps.store.removePersonHost(request.personId, request.hostId);
    throw existingHostRefusal(host);
  }
  deps.logger.info('host set up for a person', { hostId: host.id, personId: request.personId });
  deps.audit.record({ type: 'host.linked', ...request.by, host_id: host.id, person_id: request.personId, agents_changed: 0 });
  // The person may have unlinked or revoked the host in the instant since: the answer says what it is now.
  const current = await deps.store.getHost(host.id);
  if (current?.status === 'revoked') throw new ApiError('host_revoked', 'the host was revoked by its person while it was being set up');
  if (!current || current.status !== 'active' || current.userId !== request.personId) {
    throw new ApiError('conflict', 'the host was changed by its person while it was being set up; they see it among their hosts');
  }
  return current;
}
