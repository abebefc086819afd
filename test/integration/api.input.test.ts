// Bad input never reaches a 5xx: malformed JSON, wrong types, missing fields,
// oversized bodies and non-object arguments get 400 invalid_request with the error body, on every
// endpoint, and a refused request changes nothing already stored.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENDPOINTS } from '../../src/http/discovery.ts';
import { Client, code, http } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let c: Client;

beforeAll(async () => {
  server = await startTestServer({ env: { MAX_BODY_BYTES: '2048' } });
  c = new Client(server);
});
afterAll(() => server.close());

const GETS = new Set<string>([ENDPOINTS.capabilities, ENDPOINTS.describe_capability, ENDPOINTS.status]);

describe('malformed requests to every endpoint', () => {
  const bodies: Array<[string, string]> = [
    ['malformed JSON', '{"oops": '],
    ['a JSON array', '[]'],
    ['a JSON string', '"text"'],
    ['null', 'null'],
    ['an oversized body', JSON.stringify({ name: 'x'.repeat(4096) })],
  ];

  for (const path of [...Object.values(ENDPOINTS), '/admin/hosts']) {
    it(`${path}: bad bodies and missing credentials get a 4xx error body, never a 5xx`, async () => {
      const method = GETS.has(path) ? 'GET' : 'POST';
      const attempts = method === 'GET'
        ? [
            // Anonymous listing and describe are allowed; status is not.
            ...(path === ENDPOINTS.status ? [await http('GET', c.url(path))] : []),
            await http('GET', c.url(`${path}?limit=abc&agent_id=`), { token: 'garbage' }),
          ]
        : await Promise.all(bodies.map(([, body]) => http('POST', c.url(path), { body, token: 'garbage' })));
      for (const res of attempts) {
        expect(res.status, `${method} ${path}: ${res.text}`).toBeGreaterThanOrEqual(400);
        expect(res.status, `${method} ${path}: ${res.text}`).toBeLessThan(500);
        expect(typeof res.json?.error, res.text).toBe('string');
        expect(typeof res.json?.message, res.text).toBe('string');
      }
    });
  }
});

describe('400 invalid_request for the body shapes the contract names', () => {
  it('malformed JSON, an oversized body, and a non-JSON content type are invalid_request (not 413, not 500)', async () => {
    const agent = await c.activeAgent();
    const token = () => c.agentToken(agent, { aud: c.executeUrl });
    expect(code(await http('POST', c.executeUrl, { token: await token(), body: '{"capability": ' }))).toBe('400 invalid_request');
    expect(code(await http('POST', c.executeUrl, { token: await token(), json: { capability: 'echo', arguments: { blob: 'x'.repeat(4096) } } }))).toBe('400 invalid_request');
    expect(code(await http('POST', c.executeUrl, { token: await token(), body: 'capability=echo', headers: { 'content-type': 'application/x-www-form-urlencoded' } }))).toBe('400 invalid_request');
  });

  it('non-object arguments (string, array, null, number) are invalid_request', async () => {
    const agent = await c.activeAgent();
    for (const args of ['amount=5', [1, 2], null, 7]) {
      const res = await http('POST', c.executeUrl, { token: await c.agentToken(agent, { aud: c.executeUrl }), json: { capability: 'echo', arguments: args } });
      expect(code(res), JSON.stringify(args)).toBe('400 invalid_request');
    }
  });

  it('too many arguments and absurd lengths are refused before any verification', async () => {
    const many = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`a${i}`, i]));
    expect(code(await http('POST', c.executeUrl, { json: { capability: 'echo', arguments: many } }))).toBe('400 invalid_request');
    expect(code(await http('POST', c.executeUrl, { json: { capability: 'x'.repeat(1000) } }))).toBe('400 invalid_request');
  });

  it('an argument JSON cannot carry as sent (1e400, a lone surrogate) is invalid_request, never judged as null or a 500 from the policy', async () => {
    // JSON.parse reads 1e400 as Infinity, which the policy saw as null; a "\ud800" escape made the
    // policy's JSON reader fail, a 500 and a replaced wasm instance (test/unit/property.constraints.test.ts).
    const agent = await c.activeAgent(['echo', 'transfer_money']);
    for (const [capability, args] of [['transfer_money', '{"amount": 1e400}'], ['echo', '{"note": "\\ud800"}'], ['echo', '{"nested": {"\\udc00": [-1e400]}}']] as const) {
      const res = await http('POST', c.executeUrl, { token: await c.agentToken(agent, { aud: c.executeUrl }), body: `{"capability": "${capability}", "arguments": ${args}}` });
      expect(code(res), args).toBe('400 invalid_request');
      expect(String(res.json?.message), args).toMatch(/^arguments: argument "\w+" holds/);
    }
    expect((await c.execute(agent, 'echo', { note: 'fine', n: 1e308 })).status).toBe(200);
  });

  it('wrong query types are invalid_request', async () => {
    expect(code(await http('GET', c.url('/capability/list?limit=abc')))).toBe('400 invalid_request');
    expect(code(await http('GET', c.url('/capability/list?limit=0')))).toBe('400 invalid_request');
    expect(code(await http('GET', c.url('/capability/describe')))).toBe('400 invalid_request');
  });

  it("arguments that break the capability's input schema are invalid_request before the policy runs", async () => {
    const agent = await c.activeAgent(['transfer_money']);
    expect(code(await c.execute(agent, 'transfer_money', { amount: 'lots' }))).toBe('400 invalid_request');
    expect((await c.execute(agent, 'transfer_money', { amount: 5 })).status).toBe(200);
  });
});

describe('refused requests change nothing', () => {
  it('a refused revoke (malformed body, another host, forged token) leaves the agent active', async () => {
    const agent = await c.activeAgent();
    const attacker = await c.activeAgent();
    await http('POST', c.url('/agent/revoke'), { token: await c.hostToken(agent.host), body: '{"agent_id": ' });
    await c.hostPost('/agent/revoke', attacker.host, { agent_id: agent.id });
    await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id }, await c.hostToken(agent.host, { signWith: attacker.host }));
    expect((await c.status(agent.host, agent.id)).json.status).toBe('active');
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
  });
});
