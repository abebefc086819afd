// The one Store contract (DESIGN §3: both stores pass one shared contract suite). Each test names
// the guarantee it protects. The suite runs against the memory store, Redis, and Redis Cluster
// (store.memory.test.ts, store.redis.test.ts, store.redis-cluster.test.ts), and is organised as the
// Store interface is (src/store/store.ts): one describe block per role, HostRecords, AgentRecords,
// ReplayRecords, PendingIndex, PersonRecords, HostEnrollments (store.enrollment-contract.ts),
// AuditRecords (store.audit-contract.ts), DecisionRecords (store.decision-contract.ts) and StoreBackend, each holding the tests of that role's methods. A test that needs records of another
// role to set up (an agent's host, say) stands with the role whose method it is about; those that
// check a step crossing roles (admission reads the host, the clean-up removes agents) stand with the
// role that owns the step. Every block runs on a fresh store, made before each test.
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentRecord, AgentSnapshot, GrantRecord, HostRecord } from '../../src/domain/types.ts';
import { MAX_ROUND_TRIP_CAPABILITIES, MAX_ROUND_TRIP_COUNTERS, MAX_DECISION_READ, MAX_ROUND_TRIP_DECISION_RECORDS, type AgentAdmission, type AgentPatch, type ExecuteRoundTrip, type ExecuteRoundTripResult, type Store } from '../../src/store/store.ts';
import { auditContract } from './store.audit-contract.ts';
import { decisionContract } from './store.decision-contract.ts';
import { enrollmentContract } from './store.enrollment-contract.ts';

export interface StoreUnderTest {
  store: Store;
  /** Closes every store made for the test and removes what it wrote. */
  cleanup: () => Promise<void>;
  /** A second store on the same state (for Redis: another connection on the same prefix). */
  peer?: () => Promise<Store>;
}

// ---- fixtures ------------------------------------------------------------------------------------

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;

function uid(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '')}`;
}

function hostFixture(overrides: Partial<HostRecord> = {}): HostRecord {
  const nowMs = Date.now();
  return {
    id: uid('hst'),
    thumbprint: uid('thp'),
    publicJwk: { kty: 'OKP', crv: 'Ed25519', x: uid('x') },
    name: 'build runner',
    status: 'active',
    userId: 'usr_1',
    defaultCapabilities: ['echo', 'files.read'],
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    activatedAtMs: nowMs,
    ...overrides,
  };
}

function agentFixture(hostId: string, overrides: Partial<AgentRecord> = {}): AgentRecord {
  const nowMs = Date.now();
  return {
    id: uid('agt'),
    hostId,
    name: 'deploy bot',
    mode: 'delegated',
    status: 'active',
    publicJwk: { kty: 'OKP', crv: 'Ed25519', x: uid('x') },
    keyThumbprint: uid('akt'),
    keyVersion: 1,
    version: 1,
    hostStatus: 'active',
    hostThumbprint: uid('thp'),
    userId: 'usr_1',
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    activatedAtMs: nowMs,
    absoluteExpiresAtMs: nowMs + 24 * HOUR_MS,
    maxLifetimeExpiresAtMs: nowMs + HOUR_MS,
    ...overrides,
  };
}

function grantFixture(agentId: string, capability: string, overrides: Partial<GrantRecord> = {}): GrantRecord {
  const nowMs = Date.now();
  return {
    id: uid('grt'),
    agentId,
    capability,
    status: 'active',
    constraints: { amount: { max: 100 }, currency: 'EUR' },
    grantedBy: 'usr_1',
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    ...overrides,
  };
}

function snapshotFixture(hostId: string, overrides: { agent?: Partial<AgentRecord>; capabilities?: string[]; sessionExpiresAtMs?: number | null } = {}): AgentSnapshot {
  const agent = agentFixture(hostId, overrides.agent);
  const grants = (overrides.capabilities ?? ['echo', 'files.read']).map((capability) => grantFixture(agent.id, capability));
  return {
    agent,
    grants: grants.sort(byId),
    sessionExpiresAtMs: overrides.sessionExpiresAtMs === undefined ? Date.now() + 10 * MINUTE_MS : overrides.sessionExpiresAtMs,
  };
}

function byId(a: { id: string }, b: { id: string }): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function ids(records: { id: string }[]): string[] {
  return records.map((record) => record.id).sort();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The lifetime of what a test writes to see it expire. The test reads it back at once and must find
 * it, so the lifetime must outlast a few store calls on a busy machine, which can take well over the
 * 100 ms this once was; then the test sleeps past it (time passing is the behaviour under test).
 */
const EXPIRES_MS = 1000;
/** How far past EXPIRES_MS such a test sleeps. */
const PAST_MS = 100;

// ---- the suite -----------------------------------------------------------------------------------

export function storeContract(name: string, make: () => Promise<StoreUnderTest>): void {
  describe(`${name} store contract`, () => {
    let subject: StoreUnderTest;
    let store: Store;

    beforeEach(async () => {
      subject = await make();
      store = subject.store;
    });
    afterEach(async () => {
      await subject.cleanup();
    });

    /** Creates a host and one agent under it; returns both as created. */
    async function seedAgent(overrides: Parameters<typeof snapshotFixture>[1] = {}): Promise<{ host: HostRecord; snapshot: AgentSnapshot }> {
      const host = hostFixture();
      await store.createHost(host);
      const snapshot = snapshotFixture(host.id, overrides);
      const result = await store.createAgent(snapshot);
      if (!result.created) throw new Error('seed agent was not created');
      return { host, snapshot };
    }

    type RoundTripOverrides = Partial<Omit<ExecuteRoundTrip, 'capability' | 'capabilities'>> & { capabilities?: readonly string[] };
    function roundTrip(snapshot: AgentSnapshot, overrides: RoundTripOverrides = {}): Extract<ExecuteRoundTrip, { capabilities: readonly string[] }> {
      return {
        agentId: snapshot.agent.id,
        keyVersion: snapshot.agent.keyVersion,
        jti: uid('jti'),
        jtiTtlMs: 90_000,
        capabilities: ['echo'],
        nowMs: Date.now(),
        sessionTtlMs: 30 * MINUTE_MS,
        ...overrides,
      };
    }

    // Hosts, their thumbprint index, and their agents (HostRecords in src/store/store.ts).
    describe('HostRecords', () => {
      it('a created host is found by id and by thumbprint, field for field', async () => {
        const host = hostFixture();
        expect(await store.createHost(host)).toEqual({ host, created: true });
        expect(await store.getHost(host.id)).toEqual(host);
        expect(await store.findHostByThumbprint(host.thumbprint)).toEqual(host);
      });

      it('optional host fields that were never set stay absent', async () => {
        const { name: _n, userId: _u, activatedAtMs: _a, ...bare } = hostFixture({ status: 'pending' });
        await store.createHost(bare);
        const stored = await store.getHost(bare.id);
        expect(stored).toEqual(bare);
        expect(stored).not.toHaveProperty('name');
        expect(stored).not.toHaveProperty('activatedAtMs');
      });

      it('unknown hosts and thumbprints resolve to null', async () => {
        expect(await store.getHost(uid('hst'))).toBeNull();
        expect(await store.findHostByThumbprint(uid('thp'))).toBeNull();
      });

      it('a second host with an existing thumbprint is not created; the existing host is returned', async () => {
        const first = hostFixture();
        await store.createHost(first);
        const second = hostFixture({ thumbprint: first.thumbprint, name: 'impostor' });
        expect(await store.createHost(second)).toEqual({ host: first, created: false });
        expect(await store.getHost(second.id)).toBeNull();
        expect(await store.findHostByThumbprint(first.thumbprint)).toEqual(first);
      });

      it('a JWKS host is found by its URL, its key with the kid it is published under', async () => {
        const jwksUrl = `https://keys.example.test/${uid('jwks')}.json?v=1&x={y}`;
        const host = hostFixture({ jwksUrl, publicJwk: { kty: 'OKP', crv: 'Ed25519', x: uid('x'), kid: 'key-1' } });
        expect(await store.createHost(host)).toEqual({ host, created: true });
        expect(await store.findHostByJwksUrl(jwksUrl)).toEqual(host);
        expect(await store.findHostByThumbprint(host.thumbprint)).toEqual(host);
        expect(await store.findHostByJwksUrl(`${jwksUrl}#`)).toBeNull();
        expect(await store.findHostByJwksUrl(uid('https://nowhere.example.test/'))).toBeNull();
      });

      it('a second host with an existing JWKS URL but another key is not created, and leaves no thumbprint index behind', async () => {
        const jwksUrl = `https://keys.example.test/${uid('jwks')}`;
        const first = hostFixture({ jwksUrl });
        await store.createHost(first);
        const second = hostFixture({ jwksUrl });
        expect(await store.createHost(second)).toEqual({ host: first, created: false });
        expect(await store.getHost(second.id)).toBeNull();
        expect(await store.findHostByThumbprint(second.thumbprint)).toBeNull();
        expect(await store.findHostByJwksUrl(jwksUrl)).toEqual(first);
      });

      it('two racing creates with one JWKS URL and different keys: exactly one host is created', async () => {
        const jwksUrl = `https://keys.example.test/${uid('jwks')}`;
        const candidates = Array.from({ length: 5 }, () => hostFixture({ jwksUrl }));
        const results = await Promise.all(candidates.map((host) => store.createHost(host)));
        const winners = results.filter((result) => result.created);
        expect(winners).toHaveLength(1);
        const winnerId = winners[0]!.host.id;
        expect(results.every((result) => result.host.id === winnerId)).toBe(true);
        for (const loser of candidates.filter((host) => host.id !== winnerId)) {
          expect(await store.findHostByThumbprint(loser.thumbprint)).toBeNull();
        }
      });

      it('two racing creates with one thumbprint: exactly one host is created', async () => {
        const thumbprint = uid('thp');
        const candidates = Array.from({ length: 5 }, () => hostFixture({ thumbprint }));
        const results = await Promise.all(candidates.map((host) => store.createHost(host)));
        const winners = results.filter((result) => result.created);
        expect(winners).toHaveLength(1);
        const winnerId = winners[0]!.host.id;
        expect(results.every((result) => result.host.id === winnerId)).toBe(true);
        const stored = await Promise.all(candidates.map((host) => store.getHost(host.id)));
        expect(stored.filter((host) => host !== null)).toHaveLength(1);
      });

      it('updateHost sets the given fields, keeps the others, and returns the result', async () => {
        const host = hostFixture({ status: 'pending' });
        await store.createHost(host);
        const patch = { status: 'active' as const, name: 'renamed', defaultCapabilities: ['echo'], updatedAtMs: host.updatedAtMs + 5 };
        const expected = { ...host, ...patch };
        expect(await store.updateHost(host.id, patch)).toEqual({ host: expected, updated: true });
        expect(await store.getHost(host.id)).toEqual(expected);
      });

      it('updateHost with userId null unlinks the host and keeps everything else; a value links it again', async () => {
        const host = hostFixture({ userId: 'usr_1' });
        await store.createHost(host);
        const { userId: _unlinked, ...unlinked } = { ...host, updatedAtMs: host.updatedAtMs + 5 };
        expect(await store.updateHost(host.id, { userId: null, updatedAtMs: host.updatedAtMs + 5 }, ['active'])).toEqual({ host: unlinked, updated: true });
        expect(await store.getHost(host.id)).toEqual(unlinked);
        expect((await store.updateHost(host.id, { userId: 'usr_2' }))!.host.userId).toBe('usr_2');
        // A refused write removes nothing either.
        await store.updateHost(host.id, { status: 'revoked' });
        expect(await store.updateHost(host.id, { userId: null }, ['active'])).toMatchObject({ host: { userId: 'usr_2' }, updated: false });
      });

      it('updateHost of an unknown host is null and creates nothing', async () => {
        const hostId = uid('hst');
        expect(await store.updateHost(hostId, { name: 'ghost' })).toBeNull();
        expect(await store.getHost(hostId)).toBeNull();
      });

      it('updateHost with fromStatuses writes only from those statuses: a revoked host is never brought back', async () => {
        const host = hostFixture({ status: 'pending' });
        await store.createHost(host);
        const activated = await store.updateHost(host.id, { status: 'active' }, ['pending', 'active']);
        expect(activated).toEqual({ host: { ...host, status: 'active' }, updated: true });
        await store.updateHost(host.id, { status: 'revoked' });
        const refused = await store.updateHost(host.id, { status: 'active', userId: 'usr_2' }, ['pending', 'active']);
        expect(refused).toEqual({ host: { ...host, status: 'revoked' }, updated: false });
        expect((await store.getHost(host.id))?.status).toBe('revoked');
        expect(await store.updateHost(uid('hst'), { status: 'active' }, ['pending'])).toBeNull();
      });

      it('rotateHostKey moves the host to the new key; the old thumbprint stops resolving', async () => {
        const host = hostFixture();
        await store.createHost(host);
        const next = { thumbprint: uid('thp'), publicJwk: { kty: 'OKP', crv: 'Ed25519', x: uid('x') }, updatedAtMs: host.updatedAtMs + 1 };
        expect(await store.rotateHostKey(host.id, host.thumbprint, next)).toBe('ok');
        const rotated = { ...host, ...next };
        expect(await store.getHost(host.id)).toEqual(rotated);
        expect(await store.findHostByThumbprint(next.thumbprint)).toEqual(rotated);
        expect(await store.findHostByThumbprint(host.thumbprint)).toBeNull();
      });

      it('a retired host thumbprint can be registered again by a new host', async () => {
        const host = hostFixture();
        await store.createHost(host);
        await store.rotateHostKey(host.id, host.thumbprint, { thumbprint: uid('thp'), publicJwk: host.publicJwk, updatedAtMs: 1 });
        const newcomer = hostFixture({ thumbprint: host.thumbprint });
        expect((await store.createHost(newcomer)).created).toBe(true);
      });

      it('rotateHostKey with a stale expected thumbprint is a conflict and changes nothing', async () => {
        const host = hostFixture();
        await store.createHost(host);
        const next = { thumbprint: uid('thp'), publicJwk: host.publicJwk, updatedAtMs: 1 };
        expect(await store.rotateHostKey(host.id, uid('thp'), next)).toBe('conflict');
        expect(await store.getHost(host.id)).toEqual(host);
        expect(await store.findHostByThumbprint(next.thumbprint)).toBeNull();
        // The new thumbprint was released: another host may take it.
        expect((await store.createHost(hostFixture({ thumbprint: next.thumbprint }))).created).toBe(true);
      });

      it('rotateHostKey onto a thumbprint another host owns is taken and changes nothing', async () => {
        const [host, other] = [hostFixture(), hostFixture()];
        await store.createHost(host);
        await store.createHost(other);
        const next = { thumbprint: other.thumbprint, publicJwk: other.publicJwk, updatedAtMs: 1 };
        expect(await store.rotateHostKey(host.id, host.thumbprint, next)).toBe('taken');
        expect(await store.getHost(host.id)).toEqual(host);
        expect(await store.findHostByThumbprint(host.thumbprint)).toEqual(host);
        expect(await store.findHostByThumbprint(other.thumbprint)).toEqual(other);
      });

      it('rotateHostKey of an unknown host is not_found and leaves the new thumbprint free', async () => {
        const thumbprint = uid('thp');
        expect(await store.rotateHostKey(uid('hst'), uid('thp'), { thumbprint, publicJwk: { kty: 'OKP' }, updatedAtMs: 1 })).toBe('not_found');
        expect((await store.createHost(hostFixture({ thumbprint }))).created).toBe(true);
      });

      it('two racing rotations from one key: exactly one wins', async () => {
        const host = hostFixture();
        await store.createHost(host);
        const targets = Array.from({ length: 4 }, () => ({ thumbprint: uid('thp'), publicJwk: host.publicJwk, updatedAtMs: 1 }));
        const outcomes = await Promise.all(targets.map((next) => store.rotateHostKey(host.id, host.thumbprint, next)));
        expect(outcomes.filter((outcome) => outcome === 'ok')).toHaveLength(1);
        expect(outcomes.filter((outcome) => outcome === 'conflict')).toHaveLength(3);
        const winner = targets[outcomes.indexOf('ok')]!;
        expect((await store.getHost(host.id))?.thumbprint).toBe(winner.thumbprint);
        for (const next of targets) {
          const found = await store.findHostByThumbprint(next.thumbprint);
          expect(found?.id ?? null).toBe(next === winner ? host.id : null);
        }
      });

      it("listHostAgentIds lists the host's agents, sorted, and nothing for an unknown host", async () => {
        const host = hostFixture();
        await store.createHost(host);
        const agents = [snapshotFixture(host.id), snapshotFixture(host.id), snapshotFixture(host.id)];
        for (const snapshot of agents) await store.createAgent(snapshot);
        expect(await store.listHostAgentIds(host.id)).toEqual(agents.map((s) => s.agent.id).sort());
        expect(await store.listHostAgentIds(uid('hst'))).toEqual([]);
      });

      it('a host patch cannot change identity fields, even smuggled in past the type', async () => {
        const host = hostFixture();
        await store.createHost(host);
        const hostPatch = { name: 'renamed', id: 'hst_other', thumbprint: 'thp_other' } as Parameters<Store['updateHost']>[1];
        expect(await store.updateHost(host.id, hostPatch)).toEqual({ host: { ...host, name: 'renamed' }, updated: true });
      });

      describe('isolation: callers cannot change stored state by mutating objects', () => {
        it('mutating inputs after a write changes nothing stored', async () => {
          const host = hostFixture();
          const original = structuredClone(host);
          await store.createHost(host);
          host.defaultCapabilities.push('mutated');
          host.publicJwk.x = 'mutated';
          expect(await store.getHost(host.id)).toEqual(original);
        });

        it('mutating returned records changes nothing stored', async () => {
          const host = hostFixture();
          await store.createHost(host);
          const readHost = (await store.getHost(host.id))!;
          readHost.defaultCapabilities.push('mutated');
          readHost.publicJwk.x = 'mutated';
          expect(await store.getHost(host.id)).toEqual(host);
        });
      });
    });

    // Agents with their grants and sessions, the (host, key) index, admission, and the hot path (AgentRecords).
    describe('AgentRecords', () => {
      it('a created agent reads back with its grants and session, field for field', async () => {
        const host = hostFixture();
        const snapshot = snapshotFixture(host.id, {
          agent: {
            approval: { id: uid('apr'), grantIds: ['g1'], createdAtMs: 1, expiresAtMs: 2, intervalSeconds: 5 },
            reason: 'waiting',
            lastUsedAtMs: 7,
          },
        });
        const result = await store.createAgent(snapshot);
        expect(result).toEqual({ created: true, snapshot });
        expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
        expect(await store.findAgentIdByKey(host.id, snapshot.agent.keyThumbprint)).toBe(snapshot.agent.id);
        expect(await store.listHostAgentIds(host.id)).toEqual([snapshot.agent.id]);
      });

      it('an agent without grants, session or optional fields reads back exactly', async () => {
        const { userId: _u, activatedAtMs: _a, ...agent } = agentFixture(uid('hst'), { status: 'pending' });
        const snapshot: AgentSnapshot = { agent, grants: [], sessionExpiresAtMs: null };
        await store.createAgent(snapshot);
        const stored = await store.getAgent(agent.id);
        expect(stored).toEqual(snapshot);
        expect(stored?.agent).not.toHaveProperty('userId');
        expect(stored?.agent).not.toHaveProperty('approval');
      });

      it('unknown agents and keys resolve to null', async () => {
        expect(await store.getAgent(uid('agt'))).toBeNull();
        expect(await store.findAgentIdByKey(uid('hst'), uid('akt'))).toBeNull();
      });

      it('an id that cannot be a hash tag is refused on create and not found on read', async () => {
        const snapshot = snapshotFixture(uid('hst'), { agent: { id: 'agt_{evil}' }, capabilities: [] });
        await expect(store.createAgent(snapshot)).rejects.toThrow(/not storable/);
        expect(await store.getAgent('agt_{evil}')).toBeNull();
        expect(await store.executeRoundTrip(roundTrip(snapshot))).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [] });
      });

      it('a grant that names another agent is refused', async () => {
        const snapshot = snapshotFixture(uid('hst'));
        snapshot.grants.push(grantFixture(uid('agt'), 'echo'));
        await expect(store.createAgent(snapshot)).rejects.toThrow(/belongs to agent/);
        expect(await store.getAgent(snapshot.agent.id)).toBeNull();
      });

      it('a second agent with the same (host, key) is not created; the existing id is returned', async () => {
        const { host, snapshot } = await seedAgent();
        const duplicate = snapshotFixture(host.id, { agent: { keyThumbprint: snapshot.agent.keyThumbprint } });
        expect(await store.createAgent(duplicate)).toEqual({ created: false, reason: 'exists', existingAgentId: snapshot.agent.id });
        expect(await store.getAgent(duplicate.agent.id)).toBeNull();
        expect(await store.listHostAgentIds(host.id)).toEqual([snapshot.agent.id]);
      });

      it('the same agent key under two hosts names two agents', async () => {
        const keyThumbprint = uid('akt');
        const [a, b] = [snapshotFixture(uid('hst'), { agent: { keyThumbprint } }), snapshotFixture(uid('hst'), { agent: { keyThumbprint } })];
        expect((await store.createAgent(a)).created).toBe(true);
        expect((await store.createAgent(b)).created).toBe(true);
      });

      /** A host and an agent snapshot that copies its status and key, as registration builds one. */
      async function hostAndNewAgent(hostOverrides: Partial<HostRecord> = {}, agentOverrides: Partial<AgentRecord> = {}) {
        const host = hostFixture(hostOverrides);
        await store.createHost(host);
        const snapshot = snapshotFixture(host.id, { agent: { hostStatus: host.status, hostThumbprint: host.thumbprint, ...agentOverrides } });
        return { host, snapshot };
      }
      const roomy = (extra: Partial<AgentAdmission> = {}): AgentAdmission => ({ hostUserId: 'usr_1', maxAgents: 10, maxPendingAgents: 10, nowMs: Date.now(), ...extra });

      it('admission: an agent is linked to its host only while the host has the status and key the agent copied', async () => {
        const { host, snapshot } = await hostAndNewAgent();
        await store.updateHost(host.id, { status: 'revoked' });
        expect(await store.createAgent(snapshot, roomy())).toEqual({ created: false, reason: 'host_changed' });
        expect(await store.getAgent(snapshot.agent.id)).toBeNull();
        expect(await store.listHostAgentIds(host.id)).toEqual([]);
        expect(await store.findAgentIdByKey(host.id, snapshot.agent.keyThumbprint)).toBeNull();
        const other = await hostAndNewAgent({}, { hostThumbprint: uid('thp') });
        expect(await store.createAgent(other.snapshot, roomy())).toEqual({ created: false, reason: 'host_changed' });
        const ghost = snapshotFixture(uid('hst'));
        expect(await store.createAgent(ghost, roomy())).toEqual({ created: false, reason: 'host_changed' });
        // A host linked to another person (or unlinked) since the registration was decided: refused too.
        const relinked = await hostAndNewAgent();
        expect(await store.createAgent(relinked.snapshot, roomy({ hostUserId: 'usr_2' }))).toEqual({ created: false, reason: 'host_changed' });
        expect(await store.createAgent(relinked.snapshot, roomy({ hostUserId: undefined }))).toEqual({ created: false, reason: 'host_changed' });
        const fine = await hostAndNewAgent();
        expect((await store.createAgent(fine.snapshot, roomy())).created).toBe(true);
      });

      it('admission: a host holds at most maxAgents agents, and at most maxPendingAgents waiting ones', async () => {
        const { host, snapshot } = await hostAndNewAgent();
        expect((await store.createAgent(snapshot, roomy({ maxAgents: 1 }))).created).toBe(true);
        const second = snapshotFixture(host.id, { agent: { hostStatus: host.status, hostThumbprint: host.thumbprint } });
        expect(await store.createAgent(second, roomy({ maxAgents: 1 }))).toEqual({ created: false, reason: 'too_many_agents' });
        expect(await store.getAgent(second.agent.id)).toBeNull();
        const nowMs = Date.now();
        const pending = () => snapshotFixture(host.id, { agent: { status: 'pending', hostStatus: host.status, hostThumbprint: host.thumbprint } });
        const a = pending();
        expect((await store.createAgent(a, roomy({ maxPendingAgents: 1, pendingUntilMs: nowMs + 60_000, nowMs }))).created).toBe(true);
        const b = pending();
        expect(await store.createAgent(b, roomy({ maxPendingAgents: 1, pendingUntilMs: nowMs + 60_000, nowMs }))).toEqual({ created: false, reason: 'too_many_pending' });
        // A decided agent frees its slot; so does an approval that lapsed.
        await store.forgetPendingAgent(host.id, a.agent.id);
        expect((await store.createAgent(b, roomy({ maxPendingAgents: 1, pendingUntilMs: nowMs + 60_000, nowMs }))).created).toBe(true);
        const c = pending();
        expect((await store.createAgent(c, roomy({ maxPendingAgents: 1, pendingUntilMs: nowMs + 120_000, nowMs: nowMs + 60_001 }))).created).toBe(true);
      });

      it('admission racing a host revocation: every agent that got in is in the set the revocation lists afterwards', async () => {
        for (let round = 0; round < 20; round++) {
          const host = hostFixture();
          await store.createHost(host);
          const snapshots = Array.from({ length: 8 }, () => snapshotFixture(host.id, { agent: { hostStatus: 'active', hostThumbprint: host.thumbprint } }));
          const creates = snapshots.map((snapshot) => store.createAgent(snapshot, roomy()));
          await store.updateHost(host.id, { status: 'revoked' });
          // What a revocation's cascade reads right after its status write:
          const listed = new Set(await store.listHostAgentIds(host.id));
          const results = await Promise.all(creates);
          results.forEach((result, i) => {
            if (result.created) expect(listed.has(snapshots[i]!.agent.id)).toBe(true);
            else expect(result).toEqual({ created: false, reason: 'host_changed' });
          });
        }
      });

      it('racing creates of one (host, key): exactly one is created, the rest get its id, no leftovers', async () => {
        const hostId = uid('hst');
        const keyThumbprint = uid('akt');
        const candidates = Array.from({ length: 6 }, () => snapshotFixture(hostId, { agent: { keyThumbprint } }));
        const results = await Promise.all(candidates.map((snapshot) => store.createAgent(snapshot)));
        const created = results.filter((result) => result.created);
        expect(created).toHaveLength(1);
        const winnerId = created[0]!.snapshot.agent.id;
        for (const result of results) if (!result.created) expect(result).toEqual({ created: false, reason: 'exists', existingAgentId: winnerId });
        for (const candidate of candidates) {
          const stored = await store.getAgent(candidate.agent.id);
          expect(stored?.agent.id ?? null).toBe(candidate.agent.id === winnerId ? winnerId : null);
        }
        expect(await store.listHostAgentIds(hostId)).toEqual([winnerId]);
        expect(await store.findAgentIdByKey(hostId, keyThumbprint)).toBe(winnerId);
      });

      it('casAgent applies the change, bumps the version, and returns the new snapshot', async () => {
        const { snapshot } = await seedAgent();
        const { agent } = snapshot;
        const sessionExpiresAtMs = Date.now() + 5 * MINUTE_MS;
        const result = await store.casAgent(agent.id, agent.version, {
          set: { status: 'revoked', hostStatus: 'revoked', updatedAtMs: agent.updatedAtMs + 1, userId: undefined },
          sessionExpiresAtMs,
        });
        const expected: AgentSnapshot = {
          agent: { ...agent, status: 'revoked', hostStatus: 'revoked', updatedAtMs: agent.updatedAtMs + 1, version: agent.version + 1 },
          grants: snapshot.grants,
          sessionExpiresAtMs,
        };
        expect(result).toEqual({ ok: true, snapshot: expected });
        expect(await store.getAgent(agent.id)).toEqual(expected);
      });

      it('casAgent on a stale version is a conflict, applies nothing, and shows the current state', async () => {
        const { snapshot } = await seedAgent();
        const id = snapshot.agent.id;
        const first = await store.casAgent(id, 1, { set: { status: 'pending' } });
        expect(first.ok).toBe(true);
        const stale = await store.casAgent(id, 1, { set: { status: 'revoked' }, upsertGrants: [grantFixture(id, 'x')] });
        expect(stale.ok).toBe(false);
        expect(stale.ok === false && stale.reason).toBe('conflict');
        expect(stale.snapshot?.agent).toMatchObject({ status: 'pending', version: 2 });
        expect(await store.getAgent(id)).toEqual(stale.snapshot);
      });

      it('two racing casAgent calls on one version: exactly one wins', async () => {
        const { snapshot } = await seedAgent();
        const results = await Promise.all(
          (['revoked', 'pending', 'expired', 'claimed'] as const).map((status) => store.casAgent(snapshot.agent.id, 1, { set: { status } })),
        );
        expect(results.filter((result) => result.ok)).toHaveLength(1);
        expect((await store.getAgent(snapshot.agent.id))?.agent.version).toBe(2);
      });

      it('a patch cannot change identity fields or the version, even smuggled in past the type', async () => {
        const { snapshot } = await seedAgent();
        const smuggled = { status: 'revoked', id: 'agt_other', hostId: 'hst_other', version: 42, createdAtMs: 0 } as AgentPatch;
        const result = await store.casAgent(snapshot.agent.id, 1, { set: smuggled });
        expect(result.snapshot?.agent).toEqual({ ...snapshot.agent, status: 'revoked', version: 2 });
      });

      it('casAgent on an unknown agent is not_found', async () => {
        expect(await store.casAgent(uid('agt'), 1, { set: { status: 'active' } })).toEqual({ ok: false, reason: 'not_found', snapshot: null });
      });

      it('casAgent sets an approval and approval: null removes it', async () => {
        const { snapshot } = await seedAgent();
        const id = snapshot.agent.id;
        const approval = { id: uid('apr'), grantIds: [snapshot.grants[0]!.id], createdAtMs: 1, expiresAtMs: 2, intervalSeconds: 5 };
        const set = await store.casAgent(id, 1, { set: { approval } });
        expect(set.snapshot?.agent.approval).toEqual(approval);
        const removed = await store.casAgent(id, 2, { set: { approval: null } });
        expect(removed.snapshot?.agent).not.toHaveProperty('approval');
        expect((await store.getAgent(id))?.agent).not.toHaveProperty('approval');
      });

      it('replaceGrants replaces every grant; upsertGrants inserts and overwrites by id only', async () => {
        const { snapshot } = await seedAgent({ capabilities: ['echo', 'files.read'] });
        const id = snapshot.agent.id;
        const replacement = [grantFixture(id, 'payments.send'), grantFixture(id, 'echo')];
        const replaced = await store.casAgent(id, 1, { replaceGrants: replacement });
        expect(replaced.snapshot?.grants).toEqual([...replacement].sort(byId));

        const revoked = { ...replacement[0]!, status: 'revoked' as const, reason: 'by admin' };
        const added = grantFixture(id, 'files.write', { expiresAtMs: 99 });
        const upserted = await store.casAgent(id, 2, { upsertGrants: [revoked, added] });
        expect(upserted.snapshot?.grants).toEqual([revoked, replacement[1]!, added].sort(byId));
        expect((await store.getAgent(id))?.grants).toEqual([revoked, replacement[1]!, added].sort(byId));

        const emptied = await store.casAgent(id, 3, { replaceGrants: [] });
        expect(emptied.snapshot?.grants).toEqual([]);
      });

      it('the capability index follows every grant change, so the hot path sees exactly that capability', async () => {
        const { snapshot } = await seedAgent({ capabilities: ['echo', 'echo', 'files.read'] });
        const id = snapshot.agent.id;
        const grantsFor = async (capability: string): Promise<string[]> => {
          const result = await store.executeRoundTrip(roundTrip(snapshot, { capabilities: [capability] }));
          if (result.kind !== 'ok') throw new Error(`unexpected ${result.kind}`);
          return ids(result.grants);
        };
        const echoIds = snapshot.grants.filter((g) => g.capability === 'echo').map((g) => g.id).sort();
        expect(await grantsFor('echo')).toEqual(echoIds);

        // Moving a grant to another capability removes it from the old one's index.
        const moved = { ...snapshot.grants.find((g) => g.capability === 'echo')!, capability: 'files.read' };
        await store.casAgent(id, 1, { upsertGrants: [moved] });
        expect(await grantsFor('echo')).toEqual(echoIds.filter((g) => g !== moved.id));
        expect(await grantsFor('files.read')).toContain(moved.id);

        // Replacing drops the old index entirely.
        const fresh = grantFixture(id, 'payments.send');
        await store.casAgent(id, 2, { replaceGrants: [fresh] });
        expect(await grantsFor('echo')).toEqual([]);
        expect(await grantsFor('files.read')).toEqual([]);
        expect(await grantsFor('payments.send')).toEqual([fresh.id]);

        // Upserting the same grant twice never lists it twice.
        await store.casAgent(id, 3, { upsertGrants: [fresh, { ...fresh, status: 'revoked' }] });
        expect(await grantsFor('payments.send')).toEqual([fresh.id]);
      });

      it('claimAgentKey claims a free index, recognises its own, and refuses one another agent holds, changing nothing', async () => {
        const { host, snapshot } = await seedAgent();
        const newKey = uid('akt');
        expect(await store.claimAgentKey(host.id, snapshot.agent.id, newKey)).toBe('claimed');
        expect(await store.findAgentIdByKey(host.id, newKey)).toBe(snapshot.agent.id);
        expect(await store.claimAgentKey(host.id, snapshot.agent.id, newKey)).toBe('ours');
        const other = snapshotFixture(host.id);
        await store.createAgent(other);
        expect(await store.claimAgentKey(host.id, other.agent.id, newKey)).toBe('taken');
        expect(await store.claimAgentKey(host.id, snapshot.agent.id, other.agent.keyThumbprint)).toBe('taken');
        expect(await store.findAgentIdByKey(host.id, other.agent.keyThumbprint)).toBe(other.agent.id);
      });

      it('releaseAgentKey frees an index only while it names that agent', async () => {
        const { host, snapshot } = await seedAgent();
        const other = snapshotFixture(host.id);
        await store.createAgent(other);
        await store.releaseAgentKey(host.id, other.agent.id, snapshot.agent.keyThumbprint);
        expect(await store.findAgentIdByKey(host.id, snapshot.agent.keyThumbprint)).toBe(snapshot.agent.id);
        await store.releaseAgentKey(host.id, snapshot.agent.id, snapshot.agent.keyThumbprint);
        expect(await store.findAgentIdByKey(host.id, snapshot.agent.keyThumbprint)).toBeNull();
        // The old key is free again for a new registration.
        const again = snapshotFixture(host.id, { agent: { keyThumbprint: snapshot.agent.keyThumbprint } });
        expect((await store.createAgent(again)).created).toBe(true);
      });

      describe('isolation: callers cannot change stored state by mutating objects', () => {
        it('mutating inputs after a write changes nothing stored', async () => {
          const host = hostFixture();
          const snapshot = snapshotFixture(host.id);
          const original = structuredClone(snapshot);
          await store.createHost(host);
          await store.createAgent(snapshot);
          snapshot.agent.publicJwk.x = 'mutated';
          snapshot.grants[0]!.constraints!['currency'] = 'mutated';
          snapshot.grants.pop();
          expect(await store.getAgent(snapshot.agent.id)).toEqual(original);

          const upsert = grantFixture(snapshot.agent.id, 'echo');
          const upsertCopy = structuredClone(upsert);
          await store.casAgent(snapshot.agent.id, 1, { upsertGrants: [upsert] });
          upsert.status = 'revoked';
          const stored = await store.getAgent(snapshot.agent.id);
          expect(stored?.grants.find((g) => g.id === upsert.id)).toEqual(upsertCopy);
        });

        it('mutating returned records changes nothing stored', async () => {
          const { snapshot } = await seedAgent();
          const read = (await store.getAgent(snapshot.agent.id))!;
          read.agent.status = 'revoked';
          read.grants[0]!.constraints!['currency'] = 'mutated';
          read.grants.pop();
          const cas = await store.casAgent(snapshot.agent.id, 99, {});
          cas.snapshot!.grants[0]!.status = 'revoked';
          const executed = await store.executeRoundTrip(roundTrip(snapshot));
          if (executed.kind !== 'ok') throw new Error('expected ok');
          executed.agent.publicJwk.x = 'mutated';
          executed.grants[0]!.status = 'revoked';

          const stored = await store.getAgent(snapshot.agent.id);
          expect(stored?.grants).toEqual(snapshot.grants);
          expect(stored?.agent.publicJwk).toEqual(snapshot.agent.publicJwk);
          expect(stored?.agent.status).toBe('active');
        });
      });

      describe('executeRoundTrip (the hot path)', () => {
        it('an unknown agent is not_found', async () => {
          expect(await store.executeRoundTrip(roundTrip(snapshotFixture(uid('hst'))))).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [] });
        });

        it('a usable agent: returns the agent as read, the old deadline, and the grants of that capability; then extends', async () => {
          const { snapshot } = await seedAgent({ capabilities: ['echo', 'files.read'] });
          const request = roundTrip(snapshot, { capabilities: ['echo'] });
          const result = await store.executeRoundTrip(request);
          expect(result).toEqual({
            kind: 'ok',
            agent: snapshot.agent,
            sessionExpiresAtMs: snapshot.sessionExpiresAtMs,
            grants: snapshot.grants.filter((grant) => grant.capability === 'echo'),
            counts: [],
            auditWritten: [],
            decisionsWritten: [],
          });
          const after = await store.getAgent(snapshot.agent.id);
          expect(after?.sessionExpiresAtMs).toBe(request.nowMs + request.sessionTtlMs);
          expect(after?.agent.lastUsedAtMs).toBe(request.nowMs);
          expect(after?.agent.version).toBe(snapshot.agent.version);
        });

        it('grants of every status come back; other capabilities and unknown ones do not', async () => {
          const { snapshot } = await seedAgent({ capabilities: [] });
          const id = snapshot.agent.id;
          const statuses = ['active', 'pending', 'denied', 'revoked'] as const;
          const echo = statuses.map((status) => grantFixture(id, 'echo', { status }));
          await store.casAgent(id, 1, { upsertGrants: [...echo, grantFixture(id, 'other')] });
          const result = await store.executeRoundTrip(roundTrip(snapshot));
          expect(result.kind === 'ok' && result.grants).toEqual(echo.sort(byId));
          const none = await store.executeRoundTrip(roundTrip(snapshot, { capabilities: ['not.a.capability'] }));
          expect(none.kind === 'ok' && none.grants).toEqual([]);
        });

        it('several capabilities (batch execute): the grants of each, any status, in one call; others do not come back', async () => {
          const { snapshot } = await seedAgent({ capabilities: [] });
          const id = snapshot.agent.id;
          const echo = [grantFixture(id, 'echo'), grantFixture(id, 'echo', { status: 'revoked' })];
          const files = [grantFixture(id, 'files.read', { status: 'pending' })];
          const payments = grantFixture(id, 'payments.send');
          await store.casAgent(id, 1, { upsertGrants: [...echo, ...files, payments] });
          const result = await store.executeRoundTrip(roundTrip(snapshot, { capabilities: ['echo', 'files.read', 'not.a.capability'] }));
          expect(result.kind === 'ok' && result.grants).toEqual([...echo, ...files].sort(byId));
        });

        it('several capabilities: one jti, one session extension, exactly as for one', async () => {
          const { snapshot } = await seedAgent({ capabilities: ['echo', 'files.read'] });
          const request = roundTrip(snapshot, { capabilities: ['echo', 'files.read'] });
          const result = await store.executeRoundTrip(request);
          expect(result).toEqual({ kind: 'ok', agent: snapshot.agent, sessionExpiresAtMs: snapshot.sessionExpiresAtMs, grants: [...snapshot.grants].sort(byId), counts: [], auditWritten: [], decisionsWritten: [] });
          const after = await store.getAgent(snapshot.agent.id);
          expect(after?.sessionExpiresAtMs).toBe(request.nowMs + request.sessionTtlMs);
          expect(after?.agent.lastUsedAtMs).toBe(request.nowMs);
          expect(await store.executeRoundTrip({ ...request, capabilities: ['files.read'] })).toEqual({ kind: 'replay', counts: [], auditWritten: [], decisionsWritten: [] });
        });

        it('a capability named twice returns its grants once; no capabilities return no grants', async () => {
          const { snapshot } = await seedAgent({ capabilities: ['echo', 'echo'] });
          const twice = await store.executeRoundTrip(roundTrip(snapshot, { capabilities: ['echo', 'echo'] }));
          expect(twice.kind === 'ok' && ids(twice.grants)).toEqual(ids(snapshot.grants));
          const none = await store.executeRoundTrip(roundTrip(snapshot, { capabilities: [] }));
          expect(none).toMatchObject({ kind: 'ok', grants: [] });
        });

        it('a stale key version or a replay with several capabilities writes nothing, as with one', async () => {
          const { snapshot } = await seedAgent({ capabilities: ['echo', 'files.read'] });
          const stale = roundTrip(snapshot, { capabilities: ['echo', 'files.read'], keyVersion: snapshot.agent.keyVersion + 1 });
          expect(await store.executeRoundTrip(stale)).toEqual({ kind: 'stale_key', auditWritten: [], decisionsWritten: [] });
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
          const first = roundTrip(snapshot, { capabilities: ['echo', 'files.read'] });
          expect((await store.executeRoundTrip(first)).kind).toBe('ok');
          const afterFirst = await store.getAgent(snapshot.agent.id);
          expect(await store.executeRoundTrip({ ...first, nowMs: first.nowMs + 1000 })).toEqual({ kind: 'replay', counts: [], auditWritten: [], decisionsWritten: [] });
          expect(await store.getAgent(snapshot.agent.id)).toEqual(afterFirst);
        });

        it('spends its counters once the key version is confirmed (a replay too, an unknown agent or a stale key not), counting each window', async () => {
          const { snapshot } = await seedAgent();
          const id = snapshot.agent.id;
          // Keys in the agent's hash tag and in another's: on a Redis Cluster the second is spent apart.
          const counters = [
            { key: `contract-counter:{${id}}:own`, points: 2, windowSeconds: 60 },
            { key: `contract-counter:{${uid('other')}}:shared`, points: 1, windowSeconds: 60 },
          ];
          const counted = (result: ExecuteRoundTripResult) => ('counts' in result ? result.counts.map((count) => count.consumed) : null);
          const first = await store.executeRoundTrip(roundTrip(snapshot, { counters }));
          expect(counted(first)).toEqual([2, 1]);
          if (first.kind !== 'ok') throw new Error('expected ok');
          for (const count of first.counts) expect(count.msBeforeNext).toBeGreaterThan(0);
          for (const count of first.counts) expect(count.msBeforeNext).toBeLessThanOrEqual(60_000);
          const second = roundTrip(snapshot, { counters });
          expect(counted(await store.executeRoundTrip(second))).toEqual([4, 2]);
          expect(await store.executeRoundTrip({ ...second, nowMs: second.nowMs + 1 })).toMatchObject({ kind: 'replay', counts: [{ consumed: 6 }, { consumed: 3 }] });
          expect(await store.executeRoundTrip(roundTrip(snapshot, { counters: [counters[0]!], keyVersion: snapshot.agent.keyVersion + 1 }))).toEqual({ kind: 'stale_key', auditWritten: [], decisionsWritten: [] });
          expect(await store.executeRoundTrip(roundTrip(snapshotFixture(snapshot.agent.hostId), { counters: [counters[0]!] }))).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [] });
          expect(counted(await store.executeRoundTrip(roundTrip(snapshot, { counters: [counters[0]!] })))).toEqual([8]);
        });

        it('more counters than one round trip may spend are refused before anything is written', async () => {
          const { snapshot } = await seedAgent();
          const counters = Array.from({ length: MAX_ROUND_TRIP_COUNTERS + 1 }, (_, i) => ({ key: `contract-counter:{${snapshot.agent.id}}:${i}`, points: 1, windowSeconds: 60 }));
          const request = roundTrip(snapshot, { counters });
          await expect(store.executeRoundTrip(request)).rejects.toThrow(/at most/);
          expect(await store.recordAgentJti(snapshot.agent.id, request.jti, 60_000)).toBe(true);
        });

        it('appends the audit events it carries whatever its outcome, and says which it wrote', async () => {
          const { snapshot } = await seedAgent();
          const marker = uid('carried');
          const carried = (n: number) => ({ records: [{ at: new Date().toISOString(), type: 'execute.allowed', actor: 'agent' as const, agent_id: snapshot.agent.id, marker, n }], maxEvents: 100_000 });
          // Where the events went to another node (a Redis Cluster), which were written comes as a promise.
          const outcome = async (request: ExecuteRoundTrip) => {
            const result = await store.executeRoundTrip(request);
            return { kind: result.kind, auditWritten: await result.auditWritten };
          };
          const first = roundTrip(snapshot, { audit: carried(1) });
          expect(await outcome(first)).toEqual({ kind: 'ok', auditWritten: [true] });
          expect(await outcome({ ...first, audit: carried(2) })).toEqual({ kind: 'replay', auditWritten: [true] });
          expect(await outcome(roundTrip(snapshot, { keyVersion: 99, audit: carried(3) }))).toEqual({ kind: 'stale_key', auditWritten: [true] });
          expect(await outcome(roundTrip(snapshotFixture(snapshot.agent.hostId), { audit: carried(4) }))).toEqual({ kind: 'not_found', auditWritten: [true] });
          const newest = await store.readAuditEvents(null, 50);
          expect(newest.filter((event) => event.marker === marker).map((event) => event.n)).toEqual([4, 3, 2, 1]);
        });

        it('appends the decision records it carries whatever its outcome, beside the audit events, and says which it wrote', async () => {
          const { snapshot } = await seedAgent();
          const marker = uid('decided');
          const decided = (...ns: number[]) => ({ records: ns.map((n) => JSON.stringify({ marker, n })), maxRecords: 100_000 });
          const audited = (n: number) => ({ records: [{ at: new Date().toISOString(), type: 'execute.allowed', actor: 'agent' as const, marker, n }], maxEvents: 100_000 });
          // Where the records went to another node (a Redis Cluster), which were written comes as a promise.
          const outcome = async (request: ExecuteRoundTrip) => {
            const result = await store.executeRoundTrip(request);
            return { kind: result.kind, auditWritten: await result.auditWritten, decisionsWritten: await result.decisionsWritten };
          };
          const first = roundTrip(snapshot, { decisions: decided(1, 2), audit: audited(1) });
          expect(await outcome(first)).toEqual({ kind: 'ok', auditWritten: [true], decisionsWritten: [true, true] });
          expect(await outcome({ ...first, decisions: decided(3), audit: audited(2) })).toEqual({ kind: 'replay', auditWritten: [true], decisionsWritten: [true] });
          expect(await outcome(roundTrip(snapshot, { keyVersion: 99, decisions: decided(4) }))).toEqual({ kind: 'stale_key', auditWritten: [], decisionsWritten: [true] });
          expect(await outcome(roundTrip(snapshotFixture(snapshot.agent.hostId), { decisions: decided(5) }))).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [true] });
          // An id no agent can have (no hash tag on Redis) is not_found before any script: its records are still appended.
          const untaggable = { ...roundTrip(snapshot, { decisions: decided(6) }), agentId: 'agt_{not-a-tag}' };
          expect(await outcome(untaggable)).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [true] });
          const newest = await store.readDecisionRecords(50);
          const ours = newest.map((decision) => JSON.parse(decision.json) as { marker?: string; n: number }).filter((parsed) => parsed.marker === marker);
          expect(ours.map((parsed) => parsed.n)).toEqual([6, 5, 4, 3, 2, 1]);
          const events = await store.readAuditEvents(null, 50);
          expect(events.filter((event) => event.marker === marker).map((event) => event.n)).toEqual([2, 1]);
        });

        it('decision records beyond what one round trip may carry, or a bound that is not a positive integer, are refused before anything is written', async () => {
          const { snapshot } = await seedAgent();
          const marker = uid('refused');
          const records = Array.from({ length: MAX_ROUND_TRIP_DECISION_RECORDS + 1 }, (_, n) => JSON.stringify({ marker, n }));
          const tooMany = roundTrip(snapshot, { decisions: { records, maxRecords: 100_000 } });
          await expect(store.executeRoundTrip(tooMany)).rejects.toThrow(/at most/);
          for (const maxRecords of [0, 1.5, Number.NaN]) {
            await expect(store.executeRoundTrip(roundTrip(snapshot, { jti: tooMany.jti, decisions: { records: records.slice(0, 1), maxRecords } }))).rejects.toThrow(/maxRecords/);
          }
          expect(await store.recordAgentJti(snapshot.agent.id, tooMany.jti, 60_000)).toBe(true);
          const newest = await store.readDecisionRecords(MAX_DECISION_READ);
          expect(newest.filter((decision) => decision.json.includes(marker))).toEqual([]);
          // The most one round trip may carry is carried, each said to be written.
          const most = await store.executeRoundTrip(roundTrip(snapshot, { decisions: { records: records.slice(1), maxRecords: 100_000 } }));
          expect(await most.decisionsWritten).toEqual(records.slice(1).map(() => true));
        });

        it('more capability names than one round trip may carry are refused before anything is written', async () => {
          const { snapshot } = await seedAgent();
          const names = Array.from({ length: MAX_ROUND_TRIP_CAPABILITIES + 1 }, (_, i) => `cap.${i}`);
          const request = roundTrip(snapshot, { capabilities: names });
          await expect(store.executeRoundTrip(request)).rejects.toThrow(/at most/);
          expect(await store.recordAgentJti(snapshot.agent.id, request.jti, 60_000)).toBe(true);
        });

        it('a stale key version is refused and writes nothing: the jti stays unused, the session stays', async () => {
          const { snapshot } = await seedAgent();
          const request = roundTrip(snapshot, { keyVersion: snapshot.agent.keyVersion + 1 });
          expect(await store.executeRoundTrip(request)).toEqual({ kind: 'stale_key', auditWritten: [], decisionsWritten: [] });
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
          expect(await store.recordAgentJti(snapshot.agent.id, request.jti, 60_000)).toBe(true);
        });

        it('a replayed jti is refused and the replay writes nothing', async () => {
          const { snapshot } = await seedAgent();
          const first = roundTrip(snapshot);
          expect((await store.executeRoundTrip(first)).kind).toBe('ok');
          const afterFirst = await store.getAgent(snapshot.agent.id);
          const replay = { ...first, nowMs: first.nowMs + 1000 };
          expect(await store.executeRoundTrip(replay)).toEqual({ kind: 'replay', counts: [], auditWritten: [], decisionsWritten: [] });
          expect(await store.getAgent(snapshot.agent.id)).toEqual(afterFirst);
        });

        it('a session elapsed at nowMs is not extended, but the jti is still consumed', async () => {
          const { snapshot } = await seedAgent();
          const request = roundTrip(snapshot, { nowMs: snapshot.sessionExpiresAtMs! + 1 });
          const result = await store.executeRoundTrip(request);
          expect(result.kind === 'ok' && result.sessionExpiresAtMs).toBe(snapshot.sessionExpiresAtMs);
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
          expect(await store.recordAgentJti(snapshot.agent.id, request.jti, 60_000)).toBe(false);
        });

        it('a session deadline already past on the clock is gone (no session), and nothing extends it', async () => {
          const { snapshot } = await seedAgent({ sessionExpiresAtMs: Date.now() - 1000 });
          expect((await store.getAgent(snapshot.agent.id))?.sessionExpiresAtMs).toBeNull();
          const result = await store.executeRoundTrip(roundTrip(snapshot));
          expect(result.kind === 'ok' && result.sessionExpiresAtMs).toBeNull();
          expect((await store.getAgent(snapshot.agent.id))?.sessionExpiresAtMs).toBeNull();
        });

        it('an agent without a session is not extended', async () => {
          const { snapshot } = await seedAgent({ sessionExpiresAtMs: null });
          await store.executeRoundTrip(roundTrip(snapshot));
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
        });

        const unusable: [string, Partial<AgentRecord>][] = [
          ['the host is revoked', { hostStatus: 'revoked' }],
          ['the host is pending', { hostStatus: 'pending' }],
          ['the agent is revoked', { status: 'revoked' }],
          ['the agent is pending', { status: 'pending' }],
          ['the agent is expired', { status: 'expired' }],
          ['the max lifetime has elapsed', { maxLifetimeExpiresAtMs: Date.now() - 1 }],
          ['the absolute lifetime has elapsed', { absoluteExpiresAtMs: Date.now() - 1 }],
        ];
        it.each(unusable)('no extension and no lastUsedAtMs when %s', async (_label, agentOverrides) => {
          const { snapshot } = await seedAgent({ agent: agentOverrides });
          const result = await store.executeRoundTrip(roundTrip(snapshot));
          expect(result).toMatchObject({ kind: 'ok', agent: snapshot.agent, sessionExpiresAtMs: snapshot.sessionExpiresAtMs });
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);
        });

        it('usability is judged at nowMs, not at the wall clock (an injected clock works)', async () => {
          const { snapshot } = await seedAgent({ sessionExpiresAtMs: Date.now() + 2 * HOUR_MS });
          const atMaxLifetime = roundTrip(snapshot, { nowMs: snapshot.agent.maxLifetimeExpiresAtMs });
          await store.executeRoundTrip(atMaxLifetime);
          expect(await store.getAgent(snapshot.agent.id)).toEqual(snapshot);

          const halfHourLater = roundTrip(snapshot, { nowMs: Date.now() + 30 * MINUTE_MS });
          await store.executeRoundTrip(halfHourLater);
          const after = await store.getAgent(snapshot.agent.id);
          expect(after?.sessionExpiresAtMs).toBe(halfHourLater.nowMs + halfHourLater.sessionTtlMs);
          expect(after?.agent.lastUsedAtMs).toBe(halfHourLater.nowMs);
        });
      });
    });

    // What may happen once: jtis, status polls, WebAuthn challenges (ReplayRecords).
    describe('ReplayRecords', () => {
      it('recordAgentJti refuses a jti already recorded, and shares it with executeRoundTrip both ways', async () => {
        const { snapshot } = await seedAgent();
        const id = snapshot.agent.id;
        const jti = uid('jti');
        expect(await store.recordAgentJti(id, jti, 60_000)).toBe(true);
        expect(await store.recordAgentJti(id, jti, 60_000)).toBe(false);
        expect(await store.executeRoundTrip(roundTrip(snapshot, { jti }))).toEqual({ kind: 'replay', counts: [], auditWritten: [], decisionsWritten: [] });

        const executed = roundTrip(snapshot);
        expect((await store.executeRoundTrip(executed)).kind).toBe('ok');
        expect(await store.recordAgentJti(id, executed.jti, 60_000)).toBe(false);
      });

      it('agent jtis are partitioned by agent', async () => {
        const jti = uid('jti');
        expect(await store.recordAgentJti(uid('agt'), jti, 60_000)).toBe(true);
        expect(await store.recordAgentJti(uid('agt'), jti, 60_000)).toBe(true);
      });

      it('host jtis are partitioned by thumbprint and separate from agent jtis', async () => {
        const [thumbprint, jti] = [uid('thp'), uid('jti')];
        expect(await store.recordHostJti(thumbprint, jti, 60_000)).toBe(true);
        expect(await store.recordHostJti(thumbprint, jti, 60_000)).toBe(false);
        expect(await store.recordHostJti(uid('thp'), jti, 60_000)).toBe(true);
        expect(await store.recordAgentJti(uid('agt'), jti, 60_000)).toBe(true);
      });

      it('a WebAuthn challenge is used once: of ten racing uses one wins, and it stays used until it expires', async () => {
        const key = uid('challenge');
        const outcomes = await Promise.all(Array.from({ length: 10 }, () => store.useChallenge(key, 60_000)));
        expect(outcomes.filter(Boolean)).toHaveLength(1);
        expect(await store.useChallenge(key, 60_000)).toBe(false);
        expect(await store.useChallenge(uid('challenge'), 60_000)).toBe(true);
      });

      it('a status poll is recorded once per window, per agent, and the window passes', async () => {
        const [agentId, other] = [uid('agt'), uid('agt')];
        expect(await store.recordStatusPoll(agentId, EXPIRES_MS)).toBe(true);
        expect(await store.recordStatusPoll(agentId, EXPIRES_MS)).toBe(false);
        expect(await store.recordStatusPoll(other, EXPIRES_MS)).toBe(true);
        await sleep(EXPIRES_MS + PAST_MS);
        expect(await store.recordStatusPoll(agentId, EXPIRES_MS)).toBe(true);
      });

      it('a jti is forgotten once its ttl has passed', async () => {
        const { snapshot } = await seedAgent();
        const [agentJti, hostJti, executedJti] = [uid('jti'), uid('jti'), uid('jti')];
        const thumbprint = uid('thp');
        expect(await store.recordAgentJti(snapshot.agent.id, agentJti, 50)).toBe(true);
        expect(await store.recordHostJti(thumbprint, hostJti, 50)).toBe(true);
        expect((await store.executeRoundTrip(roundTrip(snapshot, { jti: executedJti, jtiTtlMs: 50 }))).kind).toBe('ok');
        await sleep(150);
        expect(await store.recordAgentJti(snapshot.agent.id, agentJti, 50)).toBe(true);
        expect(await store.recordHostJti(thumbprint, hostJti, 50)).toBe(true);
        expect((await store.executeRoundTrip(roundTrip(snapshot, { jti: executedJti, jtiTtlMs: 50 }))).kind).toBe('ok');
      });

      it('a ttl that is not a positive number is refused', async () => {
        await expect(store.recordHostJti(uid('thp'), uid('jti'), 0)).rejects.toThrow(/ttlMs/);
        await expect(store.recordAgentJti(uid('agt'), uid('jti'), Number.NaN)).rejects.toThrow(/ttlMs/);
      });
    });

    // What waits for a decision: the clean-up and the user-code index (PendingIndex).
    describe('PendingIndex', () => {
      it('clean-up: only agents still pending and older than the cut-off are removed, with their index entries, once', async () => {
        const host = hostFixture({ status: 'pending' });
        await store.createHost(host);
        const old = snapshotFixture(host.id, { agent: { status: 'pending', createdAtMs: 1000, hostStatus: 'pending', hostThumbprint: host.thumbprint } });
        const young = snapshotFixture(host.id, { agent: { status: 'pending', createdAtMs: 5000, hostStatus: 'pending', hostThumbprint: host.thumbprint } });
        const decided = snapshotFixture(host.id, { agent: { status: 'active', createdAtMs: 1000, hostStatus: 'pending', hostThumbprint: host.thumbprint } });
        for (const a of [old, young, decided]) {
          await store.createAgent(a);
          await store.trackPending('agent', a.agent.id, a.agent.createdAtMs);
        }
        expect(await store.listStalePending('agent', 3000, 10)).toEqual(expect.arrayContaining([old.agent.id, decided.agent.id]));
        expect(await store.listStalePending('agent', 3000, 10)).not.toContain(young.agent.id);
        const other = subject.peer ? await subject.peer() : store;
        const results = await Promise.all([store.removeStalePendingAgent(old.agent.id, 3000), other.removeStalePendingAgent(old.agent.id, 3000)]);
        expect(results.filter(Boolean)).toHaveLength(1);
        expect(await store.getAgent(old.agent.id)).toBeNull();
        expect(await store.findAgentIdByKey(host.id, old.agent.keyThumbprint)).toBeNull();
        expect(await store.listHostAgentIds(host.id)).not.toContain(old.agent.id);
        expect(await store.removeStalePendingAgent(young.agent.id, 3000)).toBe(false);
        expect(await store.removeStalePendingAgent(decided.agent.id, 3000)).toBe(false);
        expect(await store.getAgent(decided.agent.id)).not.toBeNull();
        // A pending host with agents stays; once it has none and is old enough, it goes.
        expect(await store.removeStalePendingHost(host.id, Date.now() + 60_000)).toBe(false);
        for (const a of [young, decided]) await store.removeStalePendingAgent(a.agent.id, Number.MAX_SAFE_INTEGER).catch(() => false);
        const lone = hostFixture({ status: 'pending', createdAtMs: 1000, jwksUrl: `https://keys.example.test/${uid('jwks')}` });
        await store.createHost(lone);
        await store.trackPending('host', lone.id, 1000);
        expect(await store.listStalePending('host', 3000, 10)).toContain(lone.id);
        expect(await store.removeStalePendingHost(lone.id, 3000)).toBe(true);
        expect(await store.getHost(lone.id)).toBeNull();
        expect(await store.findHostByThumbprint(lone.thumbprint)).toBeNull();
        // Its URL is free again: a new host may register with it.
        expect(await store.findHostByJwksUrl(lone.jwksUrl!)).toBeNull();
        const again = hostFixture({ jwksUrl: lone.jwksUrl! });
        expect((await store.createHost(again)).created).toBe(true);
        expect(await store.listStalePending('host', 3000, 10)).not.toContain(lone.id);
      });

      it('a user-code lookup key finds its agent until the approval expires', async () => {
        const [lookupKey, agentId] = [uid('luk'), uid('agt')];
        expect(await store.findAgentIdByUserCode(lookupKey)).toBeNull();
        await store.indexUserCode(lookupKey, agentId, Date.now() + EXPIRES_MS);
        expect(await store.findAgentIdByUserCode(lookupKey)).toBe(agentId);
        await sleep(EXPIRES_MS + PAST_MS);
        expect(await store.findAgentIdByUserCode(lookupKey)).toBeNull();
      });
    });

    // People's host links, passkeys and sessions (PersonRecords).
    describe('PersonRecords', () => {
      it("a person's host links are kept, listed and changed, for any person id", async () => {
        const person = `https://idp.example/{${uid('p')}}|sub with spaces`;
        expect(await store.listPersonHostIds(person)).toEqual([]);
        await store.addPersonHost(person, 'hst_b');
        await store.addPersonHost(person, 'hst_a');
        await store.addPersonHost(person, 'hst_a');
        expect(await store.listPersonHostIds(person)).toEqual(['hst_a', 'hst_b']);
        await store.removePersonHost(person, 'hst_b');
        expect(await store.listPersonHostIds(person)).toEqual(['hst_a']);
        expect(await store.listPersonHostIds(`${person}x`)).toEqual([]);
      });

      it("a person's passkeys: added once each, at most max, rewritten only while they exist (a removed one never comes back)", async () => {
        const person = `https://idp.example/{${uid('p')}}|sub with spaces`;
        expect(await store.listPasskeys(person)).toEqual([]);
        expect(await store.addPasskey(person, 'cred-a', '{"n":1}', 2)).toBe('added');
        expect(await store.addPasskey(person, 'cred-a', '{"n":2}', 2)).toBe('exists');
        expect(await store.addPasskey(person, 'cred-b', '{"n":3}', 2)).toBe('added');
        expect(await store.addPasskey(person, 'cred-c', '{"n":4}', 2)).toBe('full');
        expect((await store.listPasskeys(person)).sort((x, y) => x.id.localeCompare(y.id))).toEqual([{ id: 'cred-a', json: '{"n":1}' }, { id: 'cred-b', json: '{"n":3}' }]);
        expect(await store.updatePasskey(person, 'cred-a', '{"n":5}')).toBe(true);
        expect(await store.removePasskey(person, 'cred-a')).toBe(true);
        expect(await store.removePasskey(person, 'cred-a')).toBe(false);
        expect(await store.updatePasskey(person, 'cred-a', '{"n":6}')).toBe(false);
        expect(await store.listPasskeys(person)).toEqual([{ id: 'cred-b', json: '{"n":3}' }]);
        expect(await store.listPasskeys(`${person}x`)).toEqual([]);
      });

      it('two passkey ceremonies at once cannot both pass the count', async () => {
        const person = uid('person');
        const outcomes = await Promise.all(Array.from({ length: 10 }, (_, i) => store.addPasskey(person, `cred-${i}`, '{}', 3)));
        expect(outcomes.filter((o) => o === 'added')).toHaveLength(3);
        expect(await store.listPasskeys(person)).toHaveLength(3);
      });

      it('a person is found by their id or their address (in any case) once saved, and nobody else is', async () => {
        const person = `https://idp.example/{${uid('p')}}|sub`;
        const email = `${uid('Ada')}@Example.org`;
        expect(await store.findPersonByHint(person)).toBeNull();
        expect(await store.getPersonEmail(person)).toBeNull();
        await store.savePersonContact(person, email);
        expect(await store.findPersonByHint(person)).toBe(person);
        expect(await store.findPersonByHint(email.toLowerCase())).toBe(person);
        expect(await store.getPersonEmail(person)).toBe(email);
        expect(await store.findPersonByHint(`x${email.toLowerCase()}`)).toBeNull();
        // The address moves to whoever signs in with it last; the first keeps their id as a hint.
        const other = `${person}-other`;
        await store.savePersonContact(other, email);
        expect(await store.findPersonByHint(email.toLowerCase())).toBe(other);
        await store.savePersonContact(person, undefined);
        expect(await store.getPersonEmail(person)).toBeNull();
        expect(await store.findPersonByHint(person)).toBe(person);
      });

      it("a person's inbox lists live entries, latest deadline first, bounded, a later deadline winning", async () => {
        const person = uid('person');
        const nowMs = Date.now();
        expect(await store.listInbox(person, nowMs, 10)).toEqual([]);
        await store.addToInbox(person, 'agt_a', nowMs + 60_000, 3);
        await store.addToInbox(person, 'agt_b', nowMs + 120_000, 3);
        await store.addToInbox(person, 'agt_c', nowMs + 30_000, 3);
        expect(await store.listInbox(person, nowMs, 10)).toEqual(['agt_b', 'agt_a', 'agt_c']);
        expect(await store.listInbox(person, nowMs, 2)).toEqual(['agt_b', 'agt_a']);
        expect(await store.listInbox(person, nowMs + 45_000, 10)).toEqual(['agt_b', 'agt_a']);
        await store.addToInbox(person, 'agt_c', nowMs + 180_000, 3);
        await store.addToInbox(person, 'agt_c', nowMs + 10_000, 3);
        expect(await store.listInbox(person, nowMs, 10)).toEqual(['agt_c', 'agt_b', 'agt_a']);
        // Over the bound, the entry nearest to lapsing goes.
        await store.addToInbox(person, 'agt_d', nowMs + 90_000, 3);
        expect(await store.listInbox(person, nowMs, 10)).toEqual(['agt_c', 'agt_b', 'agt_d']);
        expect(await store.listInbox(`${person}x`, nowMs, 10)).toEqual([]);
      });

      it('a person session is saved, loaded, replaced, deleted, and expires with its ttl', async () => {
        const key = uid('ses');
        expect(await store.loadSession(key)).toBeNull();
        await store.saveSession(key, '{"a":1}', 60_000);
        expect(await store.loadSession(key)).toBe('{"a":1}');
        await store.saveSession(key, '{"a":2}', EXPIRES_MS);
        expect(await store.loadSession(key)).toBe('{"a":2}');
        await sleep(EXPIRES_MS + PAST_MS);
        expect(await store.loadSession(key)).toBeNull();
        await store.saveSession(key, '{}', 60_000);
        await store.deleteSession(key);
        expect(await store.loadSession(key)).toBeNull();
      });
    });

    // The audit trail (AuditRecords): its own file, store.audit-contract.ts.
    auditContract(() => subject);

    // Recorded policy decisions (DecisionRecords), in a file of their own as the audit trail's are.
    decisionContract(() => subject);
    enrollmentContract(() => subject);

    // The backend itself: shared secrets, invalidations, durability, health (StoreBackend).
    describe('StoreBackend', () => {
      it('a shared secret is created once and is the same for every caller', async () => {
        const name = uid('secret');
        const first = await store.sharedSecret(name);
        expect(Buffer.from(first, 'base64url')).toHaveLength(32);
        expect(await store.sharedSecret(name)).toBe(first);
        expect(await store.sharedSecret(uid('secret'))).not.toBe(first);
      });

      describe('key-cache invalidation', () => {
        /** Publishes until the listener has the id: subscribing is asynchronous, so the first may be early. */
        async function publishUntilHeard(publisher: Store, heard: string[], agentId: string): Promise<void> {
          const deadline = Date.now() + 5000;
          while (!heard.includes(agentId)) {
            if (Date.now() > deadline) throw new Error('the invalidation never arrived');
            await publisher.publishAgentInvalidation(agentId);
            await sleep(25);
          }
        }

        it('a published invalidation reaches listeners of every store on the same state', async () => {
          const other = subject.peer ? await subject.peer() : store;
          const heardHere: string[] = [];
          const heardThere: string[] = [];
          store.onAgentInvalidation((agentId) => heardHere.push(agentId));
          other.onAgentInvalidation((agentId) => heardThere.push(agentId));
          const agentId = uid('agt');
          await publishUntilHeard(store, heardThere, agentId);
          await publishUntilHeard(other, heardHere, agentId);
          expect(heardHere).toContain(agentId);
          expect(heardThere).toContain(agentId);
        });

        it('a listener that throws does not keep the message from the next one', async () => {
          const heard: string[] = [];
          store.onAgentInvalidation(() => {
            throw new Error('listener bug');
          });
          store.onAgentInvalidation((agentId) => heard.push(agentId));
          await publishUntilHeard(store, heard, uid('agt'));
        });
      });

      it('ping answers while the store is open', async () => {
        await expect(store.ping()).resolves.toBeUndefined();
      });

      it('confirmDurable answers durable where there is no replica to wait for, for any records, known or not', async () => {
        // The contract runs on a store with no replica (the memory store, a lone Redis, a cluster
        // of masters): nothing is waited for. test/integration/store.redis-durability.test.ts
        // covers a master with a replica, and one that stops acknowledging.
        await expect(store.confirmDurable({ agentIds: ['agt_missing', 'agt_{odd}'], hostIds: ['host_missing'] })).resolves.toBe('durable');
        await expect(store.confirmDurable({})).resolves.toBe('durable');
      });
    });
  });
}
