// A client learns which constraint operators this server knows without reading its configuration:
// discovery lists them, and a refusal for an unknown one names them all.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let c: Client;
beforeAll(async () => {
  server = await startTestServer({ store: 'memory' });
  c = new Client(server);
});
afterAll(() => server.close());

describe('the constraint operators a client can use', () => {
  it('discovery lists every operator the server knows, built-ins and plugins, sorted', async () => {
    const discovery = await http('GET', c.url('/.well-known/agent-configuration'));
    expect(discovery.status).toBe(200);
    const names = discovery.json.constraint_operators as string[];
    expect(names).toEqual([...server.app.deps.operators.names()].sort());
    expect(names).toEqual(expect.arrayContaining(['eq', 'in', 'max', 'min', 'not_in']));
    expect(names.some((n) => server.app.deps.operators.isPlugin(n))).toBe(true);
  });

  it('400 unknown_constraint_operator names the unknown operator and every known one', async () => {
    const res = (await c.register(await newEd25519(), { mode: 'autonomous', capabilities: [{ name: 'weather_lookup', constraints: { city: { sounds_like: 'Oslo' } } }] })).res;
    expect(code(res)).toBe('400 unknown_constraint_operator');
    expect(res.json.unknown_operators).toEqual(['sounds_like']);
    expect(res.json.known_operators).toEqual([...server.app.deps.operators.names()].sort());
    expect(res.json.message).toMatch(/this server knows: .*eq.*max/);
  });
});
