// The rules of POST /capability/batch-execute that are decisions rather than plumbing (protocol
// §3.2; docs/stances.md): how many calls a batch may carry, what an item's id is when the client
// sends none, when two ids collide, and how many items run at once.

/** Calls in one batch: the reference server's bound (protocol §3.2). */
export const MAX_BATCH_CALLS = 50;

/** Longest item id a client may send; ids are echoed back, so they are bounded like every other name. */
export const MAX_BATCH_ID_LENGTH = 128;

/**
 * Items of one batch that run at once. Each item's handler may wait on an upstream and its plugin
 * operators on the sandbox; four at a time keeps a batch's share of both to what four concurrent
 * executes would take, while 50 slow items finish in about 13 handler times rather than 50.
 */
export const BATCH_ITEM_CONCURRENCY = 4;

/**
 * An item's id: the one the client sent, else its index in the batch as a string ("0", "1", …).
 * The official SDK's reading of ids is not available to us, so the index is what a client that
 * sent none can match responses by (they also come back in request order).
 */
export function batchCallId(sentId: string | undefined, index: number): string {
  return sentId ?? String(index);
}

/**
 * The index of the first item whose id (after defaulting) repeats an earlier one, or -1. A batch
 * with such an item is refused whole: two responses with one id could not be told apart, and an
 * explicit id equal to another item's index collides the same way. Looks at no more than
 * MAX_BATCH_CALLS items (a longer batch is refused for its length anyway).
 */
export function firstDuplicateId(items: ReadonlyArray<{ id?: string | undefined }>): number {
  const seen = new Set<string>();
  const count = Math.min(items.length, MAX_BATCH_CALLS);
  for (let index = 0; index < count; index++) {
    const id = batchCallId(items[index]!.id, index);
    if (seen.has(id)) return index;
    seen.add(id);
  }
  return -1;
}

/**
 * Runs `task(0)` … `task(count - 1)` with at most `concurrency` of them in flight, each index once.
 * Every task must settle on its own (this never rejects unless a task does); the caller keeps
 * results by index, so the order they finish in does not matter.
 */
export async function forEachBounded(count: number, concurrency: number, task: (index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await task(next++);
  };
  const workers: Promise<void>[] = [];
  for (let i = 0; i < Math.min(count, concurrency); i++) workers.push(worker());
  await Promise.all(workers);
}
