// Values JSON text can spell that no later step carries as they were sent. JSON.parse reads a
// number beyond the range of a double (1e400) as Infinity, which every later JSON.stringify writes
// as null: the policy judged such an argument as null (so {"eq": null} allowed it), a violation
// showed it as null, and a stored constraint changed its meaning. A "\ud800" escape gives a string
// with a lone surrogate, which the policy's JSON reader refuses, so the decision failed (500
// internal_error, and a replaced wasm instance) instead of answering the client. Both are refused
// as what they are, a malformed request, before any verification or decision.

const OUT_OF_RANGE = 'holds a number outside the range of a double (such as 1e400)';
const LONE_SURROGATE = 'holds text that is not Unicode (a lone surrogate such as \\ud800)';

/** What is wrong with the first value of `value` that JSON cannot carry faithfully, or null. */
export function uncarriedJsonValue(value: unknown): string | null {
  // A string, number, boolean or null (every argument name, most argument values) is answered
  // without the walk's stack: this runs for every member of every execute's arguments.
  if (typeof value === 'string') return hasLoneSurrogate(value) ? LONE_SURROGATE : null;
  if (typeof value === 'number') return Number.isFinite(value) ? null : OUT_OF_RANGE;
  if (value === null || typeof value !== 'object') return null;
  // Iterative, like the depth check: the body's nesting is bounded, but no walk here recurses.
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const current = stack.pop();
    if (typeof current === 'number') {
      if (!Number.isFinite(current)) return OUT_OF_RANGE;
    } else if (typeof current === 'string') {
      if (hasLoneSurrogate(current)) return LONE_SURROGATE;
    } else if (current !== null && typeof current === 'object') {
      for (const [key, child] of Object.entries(current)) {
        if (!Array.isArray(current) && hasLoneSurrogate(key)) return 'holds a key that is not Unicode (a lone surrogate such as \\ud800)';
        stack.push(child);
      }
    }
  }
  return null;
}

/** True when a UTF-16 surrogate in `text` is not half of a high-low pair. */
function hasLoneSurrogate(text: string): boolean {
  // A quick test first: almost every string has no surrogate at all.
  if (!/[\ud800-\udfff]/.test(text)) return false;
  return /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);
}
