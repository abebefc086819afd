// The admin API is guarded by ADMIN_TOKEN, is off without one, and keeps its test hooks behind
// INSECURE_TEST_HOOKS.
import { describe, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { startTestServer } from '../support/server.ts';

describe('admin API', () => {
  it('refuses a missing token (401) and a wrong one (403), and accepts the right one', async () => {
    const server = await startTestServer();
    try {
      const body = { public_key: (await newEd25519()).publicJwk, user_id: 'user-1' };
      expect(code(await http('POST', `${server.baseUrl}/admin/hosts`, { json: body }))).toBe('401 authentication_required');
      expect(code(await http('POST', `${server.baseUrl}/admin/hosts`, { json: body, token: 'wrong-token-of-some-length' }))).toBe('403 unauthorized');
      expect((await new Client(server).admin('POST', '/admin/hosts', body)).status).toBe(201);
    } finally {
      await server.close();
    }
  });

  it('is off when ADMIN_TOKEN is unset', async () => {
    const server = await startTestServer({ env: { ADMIN_TOKEN: '' } });
    try {
      expect(code(await http('GET', `${server.baseUrl}/admin/agents/agt_x`, { token: 'anything-at-all-here' }))).toBe('403 unauthorized');
    } finally {
      await server.close();
    }
  });

  it('keeps the lifetime test hook behind INSECURE_TEST_HOOKS', async () => {
    const server = await startTestServer({ env: { INSECURE_TEST_HOOKS: 'false' } });
    try {
      const c = new Client(server);
      const agent = await c.activeAgent();
      expect(code(await c.admin('POST', `/admin/agents/${agent.id}/exceed-absolute-lifetime`))).toBe('403 unauthorized');
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      expect(code(await c.admin('GET', '/admin/agents/agt_missing'))).toBe('404 agent_not_found');
      expect(code(await c.admin('POST', '/admin/capabilities/nope/remove'))).toBe('404 capability_not_found');
    } finally {
      await server.close();
    }
  });

  it('never links a host or decides an approval for a user nobody named (no silent "admin" identity)', async () => {
    const server = await startTestServer();
    try {
      const c = new Client(server);
      const host = await newEd25519();
      const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'] });
      expect(code(created)).toBe('400 invalid_request');
      expect(created.json.message).toMatch(/user_id/);
      expect(await server.store.findHostByThumbprint(host.thumbprint)).toBeNull();
      const { agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
      expect(code(await c.admin('POST', `/admin/agents/${agent!.id}/approve`, {}))).toBe('400 invalid_request');
      expect(code(await c.admin('POST', `/admin/agents/${agent!.id}/deny`, {}))).toBe('400 invalid_request');
      expect((await c.admin('GET', `/admin/agents/${agent!.id}`)).json.status).toBe('pending');
      const approved = await c.admin('POST', `/admin/agents/${agent!.id}/approve`, { user_id: 'admin:alice' });
      expect(approved.json.user_id).toBe('admin:alice');
    } finally {
      await server.close();
    }
  });
});
