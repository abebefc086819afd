// Parity (issue 3): every case of test/cases/constraints.json, the file the compiled-policy unit
// test runs, also runs through the real HTTP decision path: a signed execute against a server whose
// agent holds exactly the case's grants. Grants are written through the store, as if made before
// an operator disappeared, so cases that the server would refuse at grant time still reach execute.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unknownOperators } from '../../src/domain/constraints.ts';
import type { GrantRecord } from '../../src/domain/types.ts';
import type { Violation } from '../../src/policy/types.ts';
import { Client, code } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

interface ConstraintCase {
  name: string;
  constraints: Record<string, unknown> | null;
  other_grants?: Array<Record<string, unknown> | null>;
  arguments: Record<string, unknown>;
  expected: { allow: boolean; violations: Violation[] };
}

const cases = JSON.parse(readFileSync('test/cases/constraints.json', 'utf8')) as ConstraintCase[];

let server: TestServer;
let c: Client;

beforeAll(async () => {
  server = await startTestServer({
    capabilities: [{ name: 'probe', description: 'echoes; its schema coerces nothing', input: { type: 'object' }, handler: { type: 'echo' } }],
  });
  c = new Client(server);
});
afterAll(() => server.close());

describe('constraint cases through HTTP execute', () => {
  it.each(cases.map((x) => [x.name, x] as const))('%s', async (_name, x) => {
    const agent = await c.activeAgent(['probe']);
    const snapshot = (await server.store.getAgent(agent.id))!;
    const template = snapshot.grants[0]!;
    const grants: GrantRecord[] = [x.constraints, ...(x.other_grants ?? [])].map((constraints, i) => {
      const { constraints: _dropped, ...rest } = template;
      return { ...rest, id: `grt_case_${i}`, ...(constraints === null ? {} : { constraints }) };
    });
    expect((await server.store.casAgent(agent.id, snapshot.agent.version, { replaceGrants: grants })).ok).toBe(true);

    const res = await c.execute(agent, 'probe', x.arguments);
    const unknown = [...new Set(grants.flatMap((g) => unknownOperators(g.constraints, server.app.deps.operators)))];
    if (unknown.length > 0) {
      // Refused before the policy runs; the compiled policy alone fails closed on the same case.
      expect(code(res)).toBe('400 unknown_constraint_operator');
      expect(res.json.unknown_operators).toEqual(unknown);
      expect(x.expected.allow).toBe(false);
    } else if (x.expected.allow) {
      expect(res.status, res.text).toBe(200);
    } else if (x.expected.violations.length > 0) {
      expect(code(res)).toBe('403 constraint_violated');
      expect(res.json.violations).toStrictEqual(x.expected.violations);
    } else {
      expect(code(res)).toBe('403 capability_not_granted');
    }
  });
});
