// The one way agentgate drops undefined members: stored records, store patches
// and wire views all leave an absent optional field out rather than carry it as `undefined`. It sits
// in common/, importing nothing, so the stores and the HTTP views can both use it.

/**
 * A new object with the own members of `value` (only `keys`, when given) whose value is not
 * undefined; `value` itself is left as it was. Copies instead of deleting: `delete` turns an object
 * into a slow dictionary, and records are read on every execute.
 */
export function definedOnly<T extends object>(value: T): T;
export function definedOnly<T extends object, K extends keyof T>(value: T, keys: readonly K[]): Partial<Pick<T, K>>;
export function definedOnly<T extends object>(value: T, keys?: readonly (keyof T)[]): Partial<T> {
  const out: Partial<T> = {};
  // Own keys only: for...in would also copy anything enumerable on a (polluted) prototype.
  for (const key of keys ?? (Object.keys(value) as (keyof T)[])) {
    if (value[key] !== undefined) out[key] = value[key];
  }
  return out;
}
