// POST /capability/execute beyond the error rows: the built-in echo handler, the HTTP upstream
// handler against a real upstream on loopback, schema validation and numeric coercion before the
// policy, multiple grants, the JWT capabilities claim, and operators unknown at execute time.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GrantRecord } from '../../src/domain/types.ts';
import { Client, code } from '../support/client.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

interface Seen {
  headers: IncomingHttpHeaders;
  body: unknown;
}

let upstream: Server;
let upstreamUrl: string;
const seen: Seen[] = [];

let server: TestServer;
let c: Client;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => (raw += chunk.toString()));
    req.on('end', () => {
      seen.push({ headers: req.headers, body: JSON.parse(raw || 'null') });
      if (req.url === '/fail') {
        res.writeHead(500, { 'content-type': 'application/json' }).end('{"secret":"db password is hunter2"}');
      } else if (req.url === '/slow') {
        setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'), 2000).unref();
      } else if (req.url === '/huge') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ blob: 'x'.repeat(5000) }));
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ forecast: 'sunny', echoed: JSON.parse(raw || 'null') }));
      }
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  const http = (name: string, path: string, timeoutMs = 1000) => ({
    name, description: `${name} upstream`, input: { type: 'object', properties: { amount: { type: 'number' }, city: { type: 'string' } } },
    handler: { type: 'http', url: `${upstreamUrl}${path}`, method: 'POST', timeoutMs },
  });
  server = await startTestServer({
    env: { UPSTREAM_MAX_RESPONSE_BYTES: '1024' },
    capabilities: [
      { name: 'echo', description: 'echo', input: { type: 'object' }, handler: { type: 'echo' } },
      { name: 'pay', description: 'pay', input: { type: 'object', properties: { amount: { type: 'number' }, to: { type: 'string' } } }, handler: { type: 'echo' } },
      { name: 'other', description: 'other', handler: { type: 'echo' } },
      http('weather', '/weather'),
      http('broken', '/fail'),
      http('slow', '/slow', 300),
      http('huge', '/huge'),
    ],
  });
  c = new Client(server);
});

afterAll(async () => {
  await server.close();
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

describe('handlers', () => {
  it('echo answers exactly {data}', async () => {
    const agent = await c.activeAgent(['echo']);
    const res = await c.execute(agent, 'echo', { message: 'hi' });
    expect(res.json).toEqual({ data: { capability: 'echo', arguments: { message: 'hi' } } });
  });

  it('the HTTP handler forwards validated arguments and identity headers, and answers the upstream JSON', async () => {
    const agent = await c.activeAgent(['weather']);
    seen.length = 0;
    const res = await c.execute(agent, 'weather', { city: 'Oslo', amount: '7' });
    expect(res.json).toEqual({ data: { forecast: 'sunny', echoed: { city: 'Oslo', amount: 7 } } });
    expect(seen[0]?.headers['x-agentgate-agent-id']).toBe(agent.id);
    expect(seen[0]?.headers['x-agentgate-host-id']).toBe(agent.registration.host_id);
    expect(seen[0]?.headers['x-agentgate-grant-id']).toMatch(/^grt_/);
  });

  it('an upstream failure, timeout or oversized answer is 500 internal_error without upstream detail', async () => {
    const agent = await c.activeAgent(['broken', 'slow', 'huge']);
    // `slow` answers 200 after 2 s: the 500 shows its 300 ms handler timeout cut it (no clock needed).
    for (const capability of ['broken', 'slow', 'huge']) {
      const res = await c.execute(agent, capability, {});
      expect(code(res), capability).toBe('500 internal_error');
      expect(res.text).not.toContain('hunter2');
    }
  });
});

describe('arguments and constraints', () => {
  it('numeric strings are coerced only where the input schema says number', async () => {
    const agent = await c.activeAgent([{ name: 'pay', constraints: { amount: { max: 100 }, to: { in: ['5'] } } }]);
    expect((await c.execute(agent, 'pay', { amount: '50', to: '5' })).status).toBe(200);
    const refused = await c.execute(agent, 'pay', { amount: '500', to: 5 });
    expect(code(refused)).toBe('400 invalid_request');
    const violated = await c.execute(agent, 'pay', { amount: '500', to: '5' });
    expect(code(violated)).toBe('403 constraint_violated');
    expect(violated.json.violations).toEqual([{ field: 'amount', constraint: { max: 100 }, actual: 500 }]);
  });

  it('with several grants for one capability, any grant whose constraints hold allows the call', async () => {
    const agent = await c.activeAgent([{ name: 'pay', constraints: { to: 'alice' } }]);
    expect(code(await c.execute(agent, 'pay', { to: 'bob' }))).toBe('403 constraint_violated');
    const snapshot = (await server.store.getAgent(agent.id))!;
    const second: GrantRecord = { ...snapshot.grants[0]!, id: 'grt_second', constraints: { to: 'bob' } };
    expect((await server.store.casAgent(agent.id, snapshot.agent.version, { upsertGrants: [second] })).ok).toBe(true);
    expect((await c.execute(agent, 'pay', { to: 'bob' })).status).toBe(200);
    expect((await c.execute(agent, 'pay', { to: 'alice' })).status).toBe(200);
    expect(code(await c.execute(agent, 'pay', { to: 'carol' }))).toBe('403 constraint_violated');
  });

  it('a grant using an operator this server no longer knows is refused at execute with unknown_operators', async () => {
    const agent = await c.activeAgent(['pay']);
    const snapshot = (await server.store.getAgent(agent.id))!;
    const grant = { ...snapshot.grants[0]!, constraints: { to: { soundex: 'A000' } } };
    await server.store.casAgent(agent.id, snapshot.agent.version, { upsertGrants: [grant] });
    const res = await c.execute(agent, 'pay', { to: 'alice' });
    expect(code(res)).toBe('400 unknown_constraint_operator');
    expect(res.json.unknown_operators).toEqual(['soundex']);
  });

  it('the JWT capabilities claim restricts the token to the listed capabilities', async () => {
    const agent = await c.activeAgent(['echo', 'other']);
    expect((await c.execute(agent, 'echo', {}, { capabilities: ['echo'] })).status).toBe(200);
    expect(code(await c.execute(agent, 'other', {}, { capabilities: ['echo'] }))).toBe('403 capability_not_granted');
  });

  it('a capability removed from the catalog at run time is 404 capability_not_found, and works again once restored', async () => {
    const agent = await c.activeAgent(['other']);
    expect((await c.admin('POST', '/admin/capabilities/other/remove')).status).toBe(200);
    try {
      expect(code(await c.execute(agent, 'other', {}))).toBe('404 capability_not_found');
    } finally {
      await c.admin('POST', '/admin/capabilities/other/restore');
    }
    expect((await c.execute(agent, 'other', {})).status).toBe(200);
  });
});
