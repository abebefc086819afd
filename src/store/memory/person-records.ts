// The memory store's people (the PersonRecords role of store.ts), as redis/person-records.ts keeps
// them: host links and passkeys for as long as the process runs, and signed-in sessions that
// expire as their Redis keys would.
import { normalizeTtlMs } from '../checks.ts';
import type { PersonRecords } from '../store.ts';
import { ExpiringMap, type MemoryGate } from './shared-state.ts';

export class MemoryPersonRecords implements PersonRecords {
  readonly #gate: MemoryGate;
  /** People's host links (not short-lived: kept as long as the process). */
  readonly #personHosts = new Map<string, Set<string>>();
  /** Each person's passkeys: credential id -> JSON. */
  readonly #passkeys = new Map<string, Map<string, string>>();
  readonly #sessions: ExpiringMap<string>;
  /** Login hints (a lower-cased address, or a person id) -> the person they name. */
  readonly #hints = new Map<string, string>();
  readonly #emails = new Map<string, string>();
  /** Each person's inbox: agent id -> deadline. */
  readonly #inboxes = new Map<string, Map<string, number>>();

  constructor(gate: MemoryGate) {
    this.#gate = gate;
    this.#sessions = new ExpiringMap(gate.now);
  }

  async addPersonHost(personId: string, hostId: string): Promise<void> {
    this.#gate.assertOpen();
    const hosts = this.#personHosts.get(personId) ?? new Set<string>();
    hosts.add(hostId);
    this.#personHosts.set(personId, hosts);
  }

  async removePersonHost(personId: string, hostId: string): Promise<void> {
    this.#gate.assertOpen();
    this.#personHosts.get(personId)?.delete(hostId);
  }

  async listPersonHostIds(personId: string): Promise<string[]> {
    this.#gate.assertOpen();
    return [...(this.#personHosts.get(personId) ?? [])].sort();
  }

  async listPasskeys(personId: string): Promise<Array<{ id: string; json: string }>> {
    this.#gate.assertOpen();
    return [...(this.#passkeys.get(personId) ?? new Map<string, string>())].map(([id, json]) => ({ id, json }));
  }

  async addPasskey(personId: string, passkeyId: string, json: string, max: number): Promise<'added' | 'exists' | 'full'> {
    this.#gate.assertOpen();
    const held = this.#passkeys.get(personId) ?? new Map<string, string>();
    if (held.has(passkeyId)) return 'exists';
    if (held.size >= max) return 'full';
    held.set(passkeyId, json);
    this.#passkeys.set(personId, held);
    return 'added';
  }

  async updatePasskey(personId: string, passkeyId: string, json: string): Promise<boolean> {
    this.#gate.assertOpen();
    const held = this.#passkeys.get(personId);
    if (!held?.has(passkeyId)) return false;
    held.set(passkeyId, json);
    return true;
  }

  async removePasskey(personId: string, passkeyId: string): Promise<boolean> {
    this.#gate.assertOpen();
    return this.#passkeys.get(personId)?.delete(passkeyId) ?? false;
  }

  // ---- how a person is reached, and what waits for them ----------------------------------------

  async savePersonContact(personId: string, email: string | undefined): Promise<void> {
    this.#gate.assertOpen();
    this.#hints.set(personId, personId);
    if (email === undefined) {
      this.#emails.delete(personId);
      return;
    }
    this.#emails.set(personId, email);
    this.#hints.set(email.toLowerCase(), personId);
  }

  async findPersonByHint(hintKey: string): Promise<string | null> {
    this.#gate.assertOpen();
    return this.#hints.get(hintKey) ?? null;
  }

  async getPersonEmail(personId: string): Promise<string | null> {
    this.#gate.assertOpen();
    return this.#emails.get(personId) ?? null;
  }

  async addToInbox(personId: string, agentId: string, untilMs: number, maxItems: number): Promise<void> {
    this.#gate.assertOpen();
    const inbox = this.#inboxes.get(personId) ?? new Map<string, number>();
    for (const [id, deadline] of inbox) if (deadline <= this.#gate.now()) inbox.delete(id);
    inbox.set(agentId, Math.max(inbox.get(agentId) ?? -Infinity, untilMs));
    const bound = Math.max(1, Math.trunc(maxItems));
    if (inbox.size > bound) {
      const nearest = [...inbox].sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1)).slice(0, inbox.size - bound);
      for (const [id] of nearest) inbox.delete(id);
    }
    this.#inboxes.set(personId, inbox);
  }

  async listInbox(personId: string, nowMs: number, limit: number): Promise<string[]> {
    this.#gate.assertOpen();
    return [...(this.#inboxes.get(personId) ?? new Map<string, number>())]
      .filter(([, deadline]) => deadline > nowMs)
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? 1 : -1))
      .slice(0, Math.max(1, Math.trunc(limit)))
      .map(([id]) => id);
  }

  // ---- people's sessions ----------------------------------------------------------------------

  async saveSession(key: string, json: string, ttlMs: number): Promise<void> {
    this.#gate.assertOpen();
    this.#sessions.set(key, json, this.#gate.now() + normalizeTtlMs(ttlMs));
  }

  async loadSession(key: string): Promise<string | null> {
    this.#gate.assertOpen();
    return this.#sessions.get(key);
  }

  async deleteSession(key: string): Promise<void> {
    this.#gate.assertOpen();
    this.#sessions.delete(key);
  }
}
