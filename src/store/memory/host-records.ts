// The memory store's hosts (the HostRecords role of store.ts), in the tables it shares with the
// agent records and the pending index (record-tables.ts says why they share them).
import { definedOnly } from '../../common/defined-only.ts';
import type { HostRecord, HostStatus } from '../../domain/types.ts';
import { assertTaggable, isTaggable } from '../checks.ts';
import { HOST_PATCH_FIELDS } from '../records.ts';
import type { HostPatch, HostRecords, HostUpdate } from '../store.ts';
import { copy, type RecordTables } from './record-tables.ts';
import type { MemoryGate } from './shared-state.ts';

export class MemoryHostRecords implements HostRecords {
  readonly #gate: MemoryGate;
  readonly #tables: RecordTables;

  constructor(gate: MemoryGate, tables: RecordTables) {
    this.#gate = gate;
    this.#tables = tables;
  }

  async getHost(hostId: string): Promise<HostRecord | null> {
    this.#gate.assertOpen();
    const host = this.#tables.hosts.get(hostId);
    return host ? copy(host) : null;
  }

  async findHostByThumbprint(thumbprint: string): Promise<HostRecord | null> {
    this.#gate.assertOpen();
    const hostId = this.#tables.hostIdByThumbprint.get(thumbprint);
    return hostId === undefined ? null : this.getHost(hostId);
  }

  async findHostByJwksUrl(jwksUrl: string): Promise<HostRecord | null> {
    this.#gate.assertOpen();
    const hostId = this.#tables.hostIdByJwksUrl.get(jwksUrl);
    return hostId === undefined ? null : this.getHost(hostId);
  }

  async createHost(host: HostRecord): Promise<{ host: HostRecord; created: boolean }> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    assertTaggable('host id', host.id);
    assertTaggable('host thumbprint', host.thumbprint);
    if (tables.hosts.has(host.id)) throw new Error(`host id ${host.id} already exists`);
    const existingId = tables.hostIdByThumbprint.get(host.thumbprint);
    if (existingId !== undefined) return { host: copy(tables.hosts.get(existingId)!), created: false };
    const urlOwnerId = host.jwksUrl === undefined ? undefined : tables.hostIdByJwksUrl.get(host.jwksUrl);
    if (urlOwnerId !== undefined) return { host: copy(tables.hosts.get(urlOwnerId)!), created: false };
    tables.hosts.set(host.id, copy(host));
    tables.hostIdByThumbprint.set(host.thumbprint, host.id);
    if (host.jwksUrl !== undefined) tables.hostIdByJwksUrl.set(host.jwksUrl, host.id);
    return { host: copy(host), created: true };
  }

  async updateHost(hostId: string, patch: HostPatch, fromStatuses?: readonly HostStatus[]): Promise<HostUpdate> {
    this.#gate.assertOpen();
    if (fromStatuses !== undefined && fromStatuses.length === 0) throw new Error('updateHost: fromStatuses must name at least one status');
    const host = this.#tables.hosts.get(hostId);
    if (!host) return null;
    if (fromStatuses !== undefined && !fromStatuses.includes(host.status)) return { host: copy(host), updated: false };
    const fields = copy(patch);
    const next: HostRecord = { ...host, ...definedOnly(fields, HOST_PATCH_FIELDS.set) };
    // As for agents (agent-changes.ts applyPatch): `null` removes a removable field, a value sets it.
    for (const field of HOST_PATCH_FIELDS.remove) {
      const value = fields[field];
      if (value === null) delete next[field];
      else if (value !== undefined) next[field] = value;
    }
    this.#tables.hosts.set(hostId, next);
    return { host: copy(this.#tables.hosts.get(hostId)!), updated: true };
  }

  /** Same outcome order as Redis, whose first step is claiming the new thumbprint: taken, then
   * not_found, then conflict. */
  async rotateHostKey(
    hostId: string,
    expectedThumbprint: string,
    next: Pick<HostRecord, 'thumbprint' | 'publicJwk' | 'updatedAtMs'>,
  ): Promise<'ok' | 'not_found' | 'conflict' | 'taken'> {
    this.#gate.assertOpen();
    const tables = this.#tables;
    if (!isTaggable(hostId)) return 'not_found';
    assertTaggable('host thumbprint', next.thumbprint);
    const owner = tables.hostIdByThumbprint.get(next.thumbprint);
    if (owner !== undefined && owner !== hostId) return 'taken';
    const host = tables.hosts.get(hostId);
    if (!host) return 'not_found';
    if (host.thumbprint !== expectedThumbprint) return 'conflict';
    tables.hosts.set(hostId, { ...host, thumbprint: next.thumbprint, publicJwk: copy(next.publicJwk), updatedAtMs: next.updatedAtMs });
    if (tables.hostIdByThumbprint.get(expectedThumbprint) === hostId) tables.hostIdByThumbprint.delete(expectedThumbprint);
    tables.hostIdByThumbprint.set(next.thumbprint, hostId);
    return 'ok';
  }

  async listHostAgentIds(hostId: string): Promise<string[]> {
    this.#gate.assertOpen();
    return [...(this.#tables.hostAgentIds.get(hostId) ?? [])].sort();
  }
}
