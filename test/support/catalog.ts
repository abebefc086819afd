// The shipped catalog (config/capabilities.json) with echo declaring arguments, for test servers
// whose tests constrain echo. The shipped echo declares none (its input is `{type: object}`), so it
// takes no constraints (src/domain/constraints.ts); the test policy pre-approves echo for
// autonomous agents, which is why tests constrain echo rather than a capability of their own.
import { readFileSync } from 'node:fs';

const SHIPPED = (JSON.parse(readFileSync(new URL('../../config/capabilities.json', import.meta.url), 'utf8')) as {
  capabilities: Array<Record<string, unknown>>;
}).capabilities;

/**
 * The shipped catalog, except that echo declares `names` with `{}` schemas: constraints may name
 * them, nothing is coerced, and, its schema now listing properties, echo refuses every other
 * argument. A test declares every argument it sends echo, not only those it constrains.
 */
export function shippedCatalogWithEchoArguments(names: readonly string[]): unknown[] {
  const properties = Object.fromEntries(names.map((name) => [name, {}]));
  return SHIPPED.map((capability) => (capability.name === 'echo' ? { ...capability, input: { type: 'object', properties } } : capability));
}
