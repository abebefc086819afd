// Reading the recorded decisions newest first, page after page: the one walk both a preview's
// readers use, the store in this process (the memory store's ring) and a reader on a connection of
// its own in the preview's process (redis/decision-records.ts, openDecisionStreamReader).
import { MAX_DECISION_READ, type DecisionRecords, type StoredDecision } from './store.ts';

/**
 * The newest `limit` recorded decisions as the store keeps them (JSON texts, parsed by whoever
 * previews them), newest first, in pages of at most `pageSize` (at most MAX_DECISION_READ).
 */
export async function* decisionPages(reader: Pick<DecisionRecords, 'readDecisionRecords'>, limit: number, pageSize = MAX_DECISION_READ): AsyncGenerator<StoredDecision[]> {
  let left = limit;
  let before: string | undefined;
  // Bounded by `limit`: every page takes at least one record off it, or ends the walk.
  while (left > 0) {
    const page = await reader.readDecisionRecords(Math.min(left, pageSize), before);
    if (page.length === 0) return;
    yield page;
    left -= page.length;
    before = page[page.length - 1]!.id;
  }
}
