// The pure rules of batch execute (src/domain/batch.ts): ids, duplicate ids, bounded concurrency.
import { describe, expect, it } from 'vitest';
import { batchCallId, firstDuplicateId, forEachBounded, MAX_BATCH_CALLS } from '../../src/domain/batch.ts';

describe('batch item ids', () => {
  it('an item keeps the id it sent; one without takes its index as a string', () => {
    expect(batchCallId('mine', 3)).toBe('mine');
    expect(batchCallId(undefined, 3)).toBe('3');
  });

  it('finds the first item whose id repeats an earlier one, defaults included', () => {
    expect(firstDuplicateId([{ id: 'a' }, { id: 'b' }, {}])).toBe(-1);
    expect(firstDuplicateId([{ id: 'a' }, { id: 'b' }, { id: 'a' }, { id: 'b' }])).toBe(2);
    expect(firstDuplicateId([{ id: '1' }, {}])).toBe(1);
    expect(firstDuplicateId([{}, { id: '0' }])).toBe(1);
  });

  it('looks at no more items than a batch may carry', () => {
    const many = Array.from({ length: MAX_BATCH_CALLS + 10 }, () => ({ id: 'same' }));
    expect(firstDuplicateId(many)).toBe(1);
    const duplicateAfterTheBound = [...Array.from({ length: MAX_BATCH_CALLS }, (_, i) => ({ id: `i${i}` })), { id: 'i0' }];
    expect(firstDuplicateId(duplicateAfterTheBound)).toBe(-1);
  });
});

describe('forEachBounded', () => {
  it('runs every index once, never more than the bound at a time', async () => {
    let inFlight = 0;
    let most = 0;
    const seen: number[] = [];
    await forEachBounded(23, 4, async (index) => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setTimeout(resolve, index % 3));
      seen.push(index);
      inFlight--;
    });
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 23 }, (_, i) => i));
    expect(most).toBe(4);
  });

  it('does nothing for no items, and runs fewer workers than the bound for few', async () => {
    const seen: number[] = [];
    await forEachBounded(0, 4, async (index) => void seen.push(index));
    await forEachBounded(2, 4, async (index) => void seen.push(index));
    expect(seen).toEqual([0, 1]);
  });
});
