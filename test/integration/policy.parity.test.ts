// Parity: every case of test/cases/constraints.json, the file the compiled-policy unit
// test runs (test/unit/policy.constraints.test.ts), also runs through the real HTTP path. The
// agent registers with the case's constraints, so grant-time validation applies: a case marked
// `grantTime` must be refused at registration with 400 and that code, and every other case must be
// accepted and then decided by a signed execute exactly as the policy alone decides it (200, or
// 403 constraint_violated with the same violations). Further grants of a case are written through
// the store, as api.execute.test.ts does, after each was shown to be accepted at grant time too.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GrantRecord } from '../../src/domain/types.ts';
import { Client, code } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { CONSTRAINT_CASES } from '../support/constraint-cases.ts';


const cases = CONSTRAINT_CASES;
const CAPABILITY = 'probe';

/**
 * Every argument name the cases constrain or send. A constraint may only name a declared argument,
 * and a schema that lists properties refuses any other, so the probe declares them all: each case
 * is then decided by its constraints, never refused for a name.
 */
const ARGUMENT_NAMES = [...new Set(cases.flatMap((x) => [x.constraints, ...(x.other_grants ?? []), x.arguments].flatMap((o) => Object.keys(o ?? {}))))];

let server: TestServer;
let c: Client;

beforeAll(async () => {
  server = await startTestServer({
    // `{}` types nothing, so no argument is coerced before the policy.
    capabilities: [{
      name: CAPABILITY,
      description: 'echoes; its schema coerces nothing',
      input: { type: 'object', properties: Object.fromEntries(ARGUMENT_NAMES.map((name) => [name, {}])) },
      handler: { type: 'echo' },
    }],
  });
  c = new Client(server);
});
afterAll(() => server.close());

/** The capability as an agent asks for it: by name alone when the case has no constraints. */
const proposal = (constraints: Record<string, unknown> | null) => (constraints === null ? CAPABILITY : { name: CAPABILITY, constraints });

/** Operators in `constraints` this server does not know, in first-seen order. */
function unknownOperators(constraints: Record<string, unknown> | null): string[] {
  const ops = Object.values(constraints ?? {}).flatMap((v) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.keys(v) : []));
  return [...new Set(ops.filter((op) => !server.app.deps.operators.has(op)))];
}

describe('constraint cases through HTTP: registration, then a signed execute', () => {
  it.each(cases.map((x) => [x.name, x] as const))('%s', async (_name, x) => {
    if (x.grantTime !== undefined) {
      const host = await c.linkedHost([CAPABILITY]);
      const { res } = await c.register(host, { mode: 'delegated', capabilities: [proposal(x.constraints)] });
      expect(code(res), res.text).toBe(`400 ${x.grantTime}`);
      if (x.grantTime === 'unknown_constraint_operator') expect(res.json.unknown_operators).toEqual(unknownOperators(x.constraints));
      return;
    }

    const agent = await c.activeAgent([proposal(x.constraints)]);
    const extra = x.other_grants ?? [];
    if (extra.length > 0) {
      // Each further grant is one the server accepts at grant time (on a throwaway agent)...
      for (const constraints of extra) await c.activeAgent([proposal(constraints)]);
      // ...and is added beside the registered one. Grants are read back sorted by id, so the ids
      // keep the case's order: the policy reports the first grant's violations.
      const snapshot = (await server.store.getAgent(agent.id))!;
      const registered = snapshot.grants[0]!;
      const { constraints: _registered, ...template } = registered;
      const grants: GrantRecord[] = [
        { ...registered, id: 'grt_case_0' },
        ...extra.map((constraints, i) => ({ ...template, id: `grt_case_${i + 1}`, ...(constraints === null ? {} : { constraints }) })),
      ];
      expect((await server.store.casAgent(agent.id, snapshot.agent.version, { replaceGrants: grants })).ok).toBe(true);
    }

    const res = await c.execute(agent, CAPABILITY, x.arguments);
    if (x.expected.allow) {
      expect(res.status, res.text).toBe(200);
      expect(res.json).toEqual({ data: { capability: CAPABILITY, arguments: x.arguments } });
    } else {
      expect(code(res), res.text).toBe('403 constraint_violated');
      // toStrictEqual: `actual` must be absent (not null) when the argument was missing, and the
      // service adds `missing: true` there (the policy's own output does not carry it).
      const args = (x.arguments ?? {}) as Record<string, unknown>;
      const withHints = x.expected.violations.map((v) => (Object.hasOwn(args, v.field) ? v : { ...v, missing: true }));
      expect(res.json.violations).toStrictEqual(withHints);
    }
  });

  it('registers the case constraints unchanged, so the policy sees what the unit test gives it', async () => {
    const constraints = { amount: { min: 1, max: 500 }, path: { prefix: ['/reports/'] }, currency: 'EUR' };
    const agent = await c.activeAgent([proposal(constraints)]);
    const snapshot = (await server.store.getAgent(agent.id))!;
    expect(snapshot.grants.map((g) => g.constraints)).toEqual([constraints]);
  });
});
