// Operator plugins end to end (DESIGN §6, docs/design.md): a plugin added at run time is reached by the
// already-compiled policy through `agentgate.operator`; unknown operators stay unknown at grant,
// approval and execute time; operands are checked against the plugin's schema.
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { shippedCatalogWithEchoArguments } from '../support/catalog.ts';
import { Client, code } from '../support/client.ts';
import { pluginsFolderForBlock } from '../support/plugins.ts';
import { startTestServer, testServerForBlock } from '../support/server.ts';

const ENDS_WITH = `import { z } from 'zod';
export const name = 'ends_with';
export const description = 'the argument is a string ending with the operand';
export const operand = z.string().min(1).max(32);
export function evaluate(suffix, actual) {
  return typeof actual === 'string' && actual.endsWith(suffix);
}
`;

// The folder starts empty: the tests add plugins to it while the server runs.
const plugins = pluginsFolderForBlock('agentgate-runtime-plugins-');
// Echo declares `code`, the argument the run-time plugin constrains.
const server = testServerForBlock(() => ({ pluginsDir: plugins.path, capabilities: shippedCatalogWithEchoArguments(['code']) }));
const c = new Client(server);

const reload = () => c.admin('POST', '/admin/operators/reload');
const grant = { name: 'echo', constraints: { code: { ends_with: 'Z' } } };

describe('a plugin added at run time', () => {
  it('is unknown before it is loaded', async () => {
    const host = await c.linkedHost(['echo']);
    const { res } = await c.register(host, { capabilities: [grant] });
    expect(code(res)).toBe('400 unknown_constraint_operator');
    expect(res.json.unknown_operators).toEqual(['ends_with']);
  });

  it('after a registry reload, grants with it are accepted and execute is allowed or refused by it', async () => {
    await writeFile(join(plugins.path, 'ends_with.mjs'), ENDS_WITH);
    expect((await reload()).json.operators).toContain('ends_with');
    const agent = await c.activeAgent([grant]);
    expect((await c.execute(agent, 'echo', { code: 'ABZ' })).status).toBe(200);
    const refused = await c.execute(agent, 'echo', { code: 'ABC' });
    expect(code(refused)).toBe('403 constraint_violated');
    expect(refused.json.violations).toEqual([{ field: 'code', constraint: { ends_with: 'Z' }, actual: 'ABC' }]);
    // A missing argument is told apart from a wrong one (docs/stances.md): no actual, and missing: true.
    const missing = await c.execute(agent, 'echo', {});
    expect(missing.json.violations).toEqual([{ field: 'code', constraint: { ends_with: 'Z' }, missing: true }]);
  });

  it("an operand that fails the plugin's schema is 400 invalid_request naming the field and operator", async () => {
    const host = await c.linkedHost(['echo']);
    const { res } = await c.register(host, { capabilities: [{ name: 'echo', constraints: { code: { ends_with: 5 } } }] });
    expect(code(res)).toBe('400 invalid_request');
    expect(res.json.message).toMatch(/ends_with.*code|code.*ends_with/);
  });

  it('removed after the grant was made, it is refused at approval and at execute', async () => {
    const agent = await c.activeAgent([grant]);
    const host = await c.linkedHost([]);
    const { agent: pending } = await c.register(host, { capabilities: [grant] });
    expect(pending!.registration.status).toBe('pending');

    await rm(join(plugins.path, 'ends_with.mjs'));
    expect((await reload()).json.operators).not.toContain('ends_with');

    const executed = await c.execute(agent, 'echo', { code: 'ABZ' });
    expect(code(executed)).toBe('400 unknown_constraint_operator');
    expect(executed.json.unknown_operators).toEqual(['ends_with']);
    const approved = await c.admin('POST', `/admin/agents/${pending!.id}/approve`, { user_id: 'user-1' });
    expect(code(approved)).toBe('400 unknown_constraint_operator');
    expect((await c.admin('GET', `/admin/agents/${pending!.id}`)).json.status).toBe('pending');
  });

  it('a broken plugin is refused by a reload (422 reload_rejected, as a broken policy is) and the previous set keeps serving', async () => {
    await writeFile(join(plugins.path, 'ends_with.mjs'), ENDS_WITH);
    expect((await reload()).status).toBe(200);
    await writeFile(join(plugins.path, 'broken.mjs'), 'export const name = "broken";');
    const res = await reload();
    expect(code(res)).toBe('422 reload_rejected');
    expect(res.json.message).toMatch(/broken\.mjs/);
    const agent = await c.activeAgent([grant]);
    expect((await c.execute(agent, 'echo', { code: 'Z' })).status).toBe(200);
    await rm(join(plugins.path, 'broken.mjs'));
  });
});

describe('shipped plugins through HTTP', () => {
  it('cidr, prefix, max_length and regex constrain real executes', async () => {
    const shipped = await startTestServer({ capabilities: shippedCatalogWithEchoArguments(['ip', 'path', 'note', 'currency', 's']) });
    try {
      const sc = new Client(shipped);
      const agent = await sc.activeAgent([{
        name: 'echo',
        constraints: { ip: { cidr: ['10.0.0.0/8'] }, path: { prefix: ['/reports/'] }, note: { max_length: 5 }, currency: { regex: '^[A-Z]{3}$' } },
      }]);
      expect((await sc.execute(agent, 'echo', { ip: '10.1.1.1', path: '/reports/q3', note: 'ok', currency: 'EUR' })).status).toBe(200);
      const res = await sc.execute(agent, 'echo', { ip: '192.168.0.1', path: '/etc/passwd', note: 'too long', currency: 'eur' });
      expect(res.json.violations.map((v: { constraint: object }) => Object.keys(v.constraint)[0])).toEqual(['regex', 'cidr', 'max_length', 'prefix']);
      // RE2 has no backreferences: such a pattern is refused when the grant is made.
      const unusable = await sc.register(await sc.linkedHost(['echo']), { capabilities: [{ name: 'echo', constraints: { s: { regex: '(a)\\1' } } }] });
      expect(code(unusable.res)).toBe('400 invalid_request');
      expect(unusable.res.json.message).toMatch(/operand of regex on field s/);
    } finally {
      await shipped.close();
    }
  });
});

describe('request-capability checks every proposal', () => {
  it('an unknown operator is refused even when an existing grant already covers the capability', async () => {
    const shipped = await startTestServer({ capabilities: shippedCatalogWithEchoArguments(['x']) });
    try {
      const sc = new Client(shipped);
      const agent = await sc.activeAgent(['echo']);
      const res = await sc.requestCapability(agent, { capabilities: [{ name: 'echo', constraints: { x: { soundex: 'A000' } } }] });
      expect(code(res)).toBe('400 unknown_constraint_operator');
      expect(res.json.unknown_operators).toEqual(['soundex']);
      expect(code(await sc.requestCapability(agent, { capabilities: ['echo'] }))).toBe('409 already_granted');
    } finally {
      await shipped.close();
    }
  });
});
