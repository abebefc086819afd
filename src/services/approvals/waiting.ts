// What waits for a person (GET /admin/approvals): agents still pending, and active agents whose
// open approval has grants left to decide, oldest first and bounded.
import { byRegistrationTime, whatAgentWaitsFor, type WaitingAgent } from '../../domain/waiting.ts';
import type { AgentRecords, PendingIndex } from '../../store/store.ts';
import type { DepsWith } from '../deps.ts';

/** The most agents GET /admin/approvals reads and answers in one call. */
export const MAX_LISTED_APPROVALS = 500;
/** Agents read from the store at once while building the list: bounded, so one call cannot flood it. */
const READ_CONCURRENCY = 25;

interface WaitingList {
  waiting: WaitingAgent[];
  /** True when more agents may wait than were listed (a list came back full). */
  truncated: boolean;
}

/**
 * Agents waiting for a person: pending ones, and active ones whose open approval still has grants
 * to decide. The store already tracks both (for the clean-up job), oldest first; at most `limit`
 * of each kind are read.
 */
export async function listWaitingAgents(deps: DepsWith<'clock', AgentRecords & PendingIndex>, limit: number): Promise<WaitingList> {
  const bounded = Math.min(Math.max(1, Math.trunc(limit)), MAX_LISTED_APPROVALS);
  const [pendingIds, approvalIds] = await Promise.all([
    deps.store.listStalePending('agent', Number.MAX_SAFE_INTEGER, bounded),
    deps.store.listStalePending('approval', Number.MAX_SAFE_INTEGER, bounded),
  ]);
  const ids = [...new Set([...pendingIds, ...approvalIds])];
  const nowMs = deps.clock.nowMs();
  const waiting: WaitingAgent[] = [];
  for (let start = 0; start < ids.length; start += READ_CONCURRENCY) {
    const snapshots = await Promise.all(ids.slice(start, start + READ_CONCURRENCY).map((id) => deps.store.getAgent(id)));
    for (const snapshot of snapshots) {
      const item = snapshot ? whatAgentWaitsFor(snapshot, nowMs) : null;
      if (item) waiting.push(item);
    }
  }
  waiting.sort(byRegistrationTime);
  const full = pendingIds.length >= bounded || approvalIds.length >= bounded || waiting.length > bounded;
  return { waiting: waiting.slice(0, bounded), truncated: full };
}

