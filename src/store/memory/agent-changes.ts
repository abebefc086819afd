// How the memory store changes an agent record, exactly as the Redis scripts do (the shared store
// contract holds both to it): the hot path's usability rule and patching.
import { definedOnly } from '../../common/defined-only.ts';
import type { AgentRecord } from '../../domain/types.ts';
import { AGENT_PATCH_FIELDS } from '../records.ts';
import type { AgentPatch } from '../store.ts';

const copy = <T>(value: T): T => structuredClone(value);

/** The hot path's usability rule (DESIGN §2 step 5), evaluated exactly as the Redis script does. */
export function isUsable(agent: AgentRecord, sessionExpiresAtMs: number | null, nowMs: number): boolean {
  return (
    agent.status === 'active' &&
    agent.hostStatus === 'active' &&
    sessionExpiresAtMs !== null &&
    sessionExpiresAtMs > nowMs &&
    agent.maxLifetimeExpiresAtMs > nowMs &&
    agent.absoluteExpiresAtMs > nowMs
  );
}

/**
 * Applies a patch the way the cas script does: only the fields records.ts lets a patch change (an
 * `id` or `version` smuggled in by a spread is ignored), undefined leaves a field alone, and `null`
 * removes a removable one (the approval).
 */
export function applyPatch(agent: AgentRecord, patch: AgentPatch, nextVersion: number): AgentRecord {
  const fields = copy(patch);
  const next: AgentRecord = { ...agent, ...definedOnly(fields, AGENT_PATCH_FIELDS.set), version: nextVersion };
  for (const field of AGENT_PATCH_FIELDS.remove) {
    const value = fields[field];
    if (value === null) delete next[field];
    else if (value !== undefined) next[field] = value;
  }
  return next;
}
