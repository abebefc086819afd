// Agents and hosts that wait for approval too long, and approvals that lapsed, are removed by a
// periodic job that every instance runs: two instances on one Redis, cleaning at
// the same moment, remove each item exactly once, and nothing that was decided.
import { describe, expect, it } from 'vitest';
import { removeStalePending } from '../../src/services/cleanup.ts';
import { Client } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { twoInstancesForBlock } from '../support/server.ts';

const MAX_AGE_SECONDS = 3600;
const [one, two] = twoInstancesForBlock('cleanup', { env: { PENDING_MAX_AGE_SECONDS: String(MAX_AGE_SECONDS) } });
const c = new Client(one);

describe('the clean-up of what waited too long', () => {
  it('two instances cleaning at once remove each stale pending agent and host exactly once, and keep what was decided', async () => {
    const waiting = [];
    for (let i = 0; i < 6; i++) waiting.push((await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] })).agent!);
    const approved = (await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] })).agent!;
    expect((await c.admin('POST', `/admin/agents/${approved.id}/approve`, { user_id: 'user-1' })).json.status).toBe('active');
    const later = MAX_AGE_SECONDS * 1000 + 1000;
    one.clock.advance(later);
    two.clock.advance(later);
    // A newcomer registered now is not stale yet.
    const fresh = (await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] })).agent!;
    const [a, b] = await Promise.all([removeStalePending(one.app.deps, MAX_AGE_SECONDS * 1000), removeStalePending(two.app.deps, MAX_AGE_SECONDS * 1000)]);
    expect(a.agentsRemoved + b.agentsRemoved).toBe(6);
    for (const agent of waiting) expect(await one.store.getAgent(agent.id)).toBeNull();
    // Their hosts were dynamic, pending and now empty: removed once too (in this run or the next).
    const again = await removeStalePending(one.app.deps, MAX_AGE_SECONDS * 1000);
    expect(a.hostsRemoved + b.hostsRemoved + again.hostsRemoved).toBe(6);
    for (const agent of waiting) expect(await one.store.findHostByThumbprint(agent.host.thumbprint)).toBeNull();
    expect((await one.store.getAgent(approved.id))!.agent.status).toBe('active');
    expect((await one.store.getAgent(fresh.id))!.agent.status).toBe('pending');
    // A removed agent's host key can register again, from scratch.
    expect((await c.register(waiting[0]!.host, { mode: 'delegated' })).res.json.status).toBe('pending');
  });

  it('two instances remove each lapsed approval of an active agent exactly once, with only the grants that waited on it', async () => {
    const agents = [];
    for (let i = 0; i < 4; i++) {
      const agent = await c.activeAgent(['echo']);
      const asked = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
      expect(asked.json.status).toBe('pending');
      agents.push(agent);
    }
    const past = (Number(one.app.deps.config.APPROVAL_EXPIRES_IN_SECONDS) + 1) * 1000;
    one.clock.advance(past);
    two.clock.advance(past);
    // Asked after the others lapsed: its approval is still open and stays.
    const recent = await c.activeAgent(['echo']);
    await c.requestCapability(recent, { capabilities: ['weather_lookup'] });
    const [a, b] = await Promise.all([removeStalePending(one.app.deps, MAX_AGE_SECONDS * 1000), removeStalePending(two.app.deps, MAX_AGE_SECONDS * 1000)]);
    const again = await removeStalePending(one.app.deps, MAX_AGE_SECONDS * 1000);
    expect(a.approvalsRemoved + b.approvalsRemoved + again.approvalsRemoved).toBe(4);
    for (const agent of agents) {
      const stored = (await one.store.getAgent(agent.id))!;
      expect(stored.agent.approval).toBeUndefined();
      expect(stored.agent.status).toBe('active');
      expect(stored.grants.map((g) => `${g.capability}:${g.status}`)).toEqual(['echo:active']);
      // Nothing was decided: asking again opens a new approval, and the agent keeps working meanwhile.
      expect((await c.requestCapability(agent, { capabilities: ['weather_lookup'] })).json.status).toBe('pending');
      expect((await c.execute(agent, 'echo', { message: 'still here' })).status).toBe(200);
    }
    const open = (await one.store.getAgent(recent.id))!;
    expect(open.agent.approval).toBeDefined();
    expect(open.grants.filter((g) => g.status === 'pending').map((g) => g.capability)).toEqual(['weather_lookup']);
  });
});
