// Changing the policy with its effect known first, over HTTP on a real server (memory and Redis
// stores): decisions are recorded as agents use the server, a preview of a candidate counts exactly
// the decisions it would flip, a reload with max_flips is refused (409, the preview in the body) when
// it would flip more and the live policy stays, and a shadow sees every live decision, counts where
// it disagrees, and never changes an answer. The live policy is the allow-everything fixture, the
// candidate the maintenance-window fixture that refuses every execute.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { copyFile, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { ADMIN_TOKEN, forEachStore, testServerForBlock } from '../support/server.ts';

const FIXTURES = 'test/fixtures/policies';
const SECRET = 'correct-horse-battery-staple-42';
const METRICS_TOKEN = 'test-metrics-token-0123456789';

type Fixture = 'allow' | 'deny' | 'misbehaving';
const echoLike = (name: string, description: string) => ({ name, description, input: { type: 'object' }, output: { type: 'object' }, handler: { type: 'echo' } });
/** `forge` is where the misbehaving fixture answers an allow naming a grant the call does not hold: an answer the engine refuses to vouch for. */
const CAPABILITIES = [echoLike('echo', 'Returns its arguments.'), echoLike('forge', 'Returns its arguments; the misbehaving policy forges its grant.')];
const artefact = (name: Fixture) => readFile(join(FIXTURES, `${name}.wasm`));

forEachStore('policy rollout', (storeKind) => {
  // Made when the block is collected: the server's settings name it, and they are read before any beforeAll of this block runs.
  const dir = mkdtempSync(join(tmpdir(), 'agentgate-rollout-'));
  copyFileSync(join(FIXTURES, 'allow.golden.json'), join(dir, 'golden.json'));
  copyFileSync(join(FIXTURES, 'allow.wasm'), join(dir, 'policy.wasm'));
  const server = testServerForBlock(() => ({
    store: storeKind,
    capabilities: CAPABILITIES,
    env: {
      POLICY_WASM_PATH: join(dir, 'policy.wasm'), POLICY_GOLDEN_PATH: join(dir, 'golden.json'), POLICY_WATCH: 'false',
      DECISION_LOG_SAMPLE: '1', DECISION_LOG_REDACT: 'password', METRICS_TOKEN,
    },
  }));
  const c = new Client(server);
  let agent: TestAgent;

  /** Puts a fixture on disk where the server reads its artefact (not loaded until a reload). */
  async function onDisk(name: Fixture): Promise<void> {
    await copyFile(join(FIXTURES, `${name}.golden.json`), join(dir, 'golden.json'));
    await copyFile(join(FIXTURES, `${name}.wasm`), join(dir, 'policy.wasm'));
  }
  const admin = (method: string, path: string, body?: Uint8Array | string, headers: Record<string, string> = {}) =>
    http(method, c.url(path), { token: ADMIN_TOKEN, ...(body === undefined ? {} : { body, headers: { 'content-type': 'application/wasm', ...headers } }) });
  /** The shadow's tally once `done` holds (the shadow judges off the request path, so a moment later). */
  async function shadowTallyOnce(done: (tally: Record<string, number>) => boolean) {
    let last = await admin('GET', '/admin/policy/shadow');
    await expect.poll(async () => {
      last = await admin('GET', '/admin/policy/shadow');
      return done(last.json as Record<string, number>);
    }, { timeout: 10_000, interval: 20 }).toBe(true);
    return last;
  }
  const liveSha = async () => (await c.admin('GET', '/admin/policy')).json.sha256 as string;

  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** `n` allowed executes, each recorded (DECISION_LOG_SAMPLE=1). */
  async function executes(n: number, args: Record<string, unknown> = {}): Promise<void> {
    for (let i = 0; i < n; i++) expect((await c.execute(agent, 'echo', args)).status).toBe(200);
  }

  describe('preview', () => {
    it('counts exactly the recorded executes a candidate would refuse, grouped by capability, host and rule', async () => {
      agent = await c.activeAgent(['echo', 'forge']);
      await executes(7);
      const res = await admin('POST', '/admin/policy/preview', await artefact('deny'));
      expect(res.status).toBe(200);
      expect(res.json).toMatchObject({ allow_to_deny: 7, deny_to_allow: 0, errors: { count: 0 } });
      expect(res.json.groups).toEqual([
        expect.objectContaining({ direction: 'allow_to_deny', capability: 'echo', host_id: agent.registration.host_id as string, rule: 'maintenance window', count: 7 }),
      ]);
      // The same candidate as the live policy flips nothing.
      const same = await admin('POST', '/admin/policy/preview', await artefact('allow'));
      expect(same.json).toMatchObject({ allow_to_deny: 0, deny_to_allow: 0 });
      expect(same.json.unchanged).toBe(same.json.decisions);
    });

    it('without a body previews the artefact on disk, and changes nothing live', async () => {
      const before = await liveSha();
      await onDisk('deny');
      try {
        const res = await admin('POST', '/admin/policy/preview');
        expect(res.json).toMatchObject({ allow_to_deny: 7 });
        expect(await liveSha()).toBe(before);
        expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      } finally {
        await onDisk('allow');
      }
      // The execute above is recorded too: 8 from here on.
    });

    it('refuses what is not a policy artefact (400), and a caller without the admin token before reading its body (401, 403)', async () => {
      expect(code(await admin('POST', '/admin/policy/preview', Buffer.from('\0asm\x01\0\0\0 truncated')))).toBe('400 invalid_request');
      const wasm = { body: await artefact('deny'), headers: { 'content-type': 'application/wasm' } };
      expect(code(await http('POST', c.url('/admin/policy/preview'), wasm))).toBe('401 authentication_required');
      expect(code(await http('POST', c.url('/admin/policy/preview'), { ...wasm, token: 'not-the-admin-token-0123456789' }))).toBe('403 unauthorized');
      expect(code(await admin('POST', '/admin/policy/preview?decisions=0'))).toBe('400 invalid_request');
    });

    it('records no redacted value: an argument named by DECISION_LOG_REDACT never reaches the stored decisions', async () => {
      await executes(1, { password: SECRET });
      await server.app.deps.decisions.flush();
      const stored = await server.store.readDecisionRecords(1000);
      expect(stored.length).toBeGreaterThan(0);
      expect(stored.some((s) => s.json.includes('[redacted]'))).toBe(true);
      for (const entry of stored) expect(entry.json).not.toContain(SECRET);
    });
  });

  describe('reload guarded by max_flips', () => {
    it('refuses (409 max_flips_exceeded, the preview in the body) a reload that would flip more, and the live policy stays', async () => {
      const before = await liveSha();
      await onDisk('deny');
      try {
        const refused = await c.admin('POST', '/admin/policy/reload', { max_flips: 3 });
        expect(code(refused)).toBe('409 max_flips_exceeded');
        expect(refused.json.preview).toMatchObject({ allow_to_deny: 9, deny_to_allow: 0 });
        const byShare = await c.admin('POST', '/admin/policy/reload', { max_flips: '10%' });
        expect(code(byShare)).toBe('409 max_flips_exceeded');
        expect(await liveSha()).toBe(before);
        expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      } finally {
        await onDisk('allow');
      }
    });

    it('reloads when the preview stays within max_flips, and answers the preview it passed', async () => {
      await onDisk('deny');
      const res = await c.admin('POST', '/admin/policy/reload', { max_flips: 10 });
      expect(res.status).toBe(200);
      expect(res.json.preview).toMatchObject({ allow_to_deny: 10 });
      expect(code(await c.execute(agent, 'echo', {}))).toBe('403 capability_not_granted');
      await onDisk('allow');
      expect((await c.admin('POST', '/admin/policy/reload')).status).toBe(200);
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    });

    it('refuses a malformed max_flips (400) and changes nothing', async () => {
      for (const maxFlips of [-1, 1.5, '101%', 'ten', '5']) {
        expect(code(await c.admin('POST', '/admin/policy/reload', { max_flips: maxFlips }))).toBe('400 invalid_request');
      }
    });
  });

  describe('shadow', () => {
    it('sees every live decision, counts its disagreements by capability, and the live answer is the one enforced', async () => {
      expect(code(await admin('GET', '/admin/policy/shadow'))).toBe('404 no_shadow_policy');
      const loaded = await admin('POST', '/admin/policy/shadow', await artefact('deny'));
      expect(loaded.status).toBe(200);
      await executes(5, { password: SECRET });
      const tally = await shadowTallyOnce((t) => t.disagreed === 5);
      expect(tally.json).toMatchObject({ sha256: loaded.json.sha256, observed: 5, agreed: 0, disagreed: 5, dropped: 0, errors: 0 });
      expect(tally.json.by_capability).toEqual({ echo: { allow_to_deny: 5, deny_to_allow: 0, other: 0 } });
      expect(tally.text).not.toContain(SECRET);
      const metrics = await http('GET', c.url('/metrics'), { token: METRICS_TOKEN, headers: { accept: 'text/plain' } });
      expect(metrics.text).toContain('agentgate_policy_shadow_disagreements_total{entrypoint="agentgate/execute",capability="echo",direction="allow_to_deny"} 5');
    });

    it('a shadow that cannot decide counts errors and never changes a live answer', async () => {
      expect((await admin('POST', '/admin/policy/shadow', await artefact('misbehaving'))).status).toBe(200);
      for (let i = 0; i < 3; i++) expect((await c.execute(agent, 'forge', {})).status).toBe(200);
      const tally = await shadowTallyOnce((t) => t.errors === 3);
      expect(tally.json).toMatchObject({ observed: 3, agreed: 0, disagreed: 0, errors: 3 });
    });

    it('promotes in one call: the shadow becomes the live policy (golden decisions checked) and is gone', async () => {
      expect((await admin('POST', '/admin/policy/shadow', await artefact('deny'))).status).toBe(200);
      // The golden decisions on disk are the ones the promoted artefact must pass.
      await copyFile(join(FIXTURES, 'deny.golden.json'), join(dir, 'golden.json'));
      const promoted = await c.admin('POST', '/admin/policy/shadow/promote');
      expect(promoted.status).toBe(200);
      expect(await liveSha()).toBe(promoted.json.sha256);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('403 capability_not_granted');
      expect(code(await admin('GET', '/admin/policy/shadow'))).toBe('404 no_shadow_policy');
      await onDisk('allow');
      expect((await c.admin('POST', '/admin/policy/reload')).status).toBe(200);
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    });

    it('a shadow whose artefact fails the golden decisions is not promoted (422) and stays loaded', async () => {
      // allow.golden.json is on disk: the maintenance-window artefact refuses what it expects allowed.
      expect((await admin('POST', '/admin/policy/shadow', await artefact('deny'))).status).toBe(200);
      const before = await liveSha();
      expect(code(await c.admin('POST', '/admin/policy/shadow/promote'))).toBe('422 reload_rejected');
      expect(await liveSha()).toBe(before);
      expect((await admin('GET', '/admin/policy/shadow')).status).toBe(200);
      expect((await admin('DELETE', '/admin/policy/shadow')).status).toBe(204);
      expect(code(await admin('DELETE', '/admin/policy/shadow'))).toBe('404 no_shadow_policy');
    });

    it('refuses a shadow that is not an artefact (400) or none at all (400), and a caller without the admin token (401, 403)', async () => {
      expect(code(await admin('POST', '/admin/policy/shadow', Buffer.from('not wasm')))).toBe('400 invalid_request');
      expect(code(await admin('POST', '/admin/policy/shadow'))).toBe('400 invalid_request');
      for (const [method, path] of [['GET', '/admin/policy/shadow'], ['POST', '/admin/policy/shadow/promote'], ['DELETE', '/admin/policy/shadow']] as const) {
        expect(code(await http(method, c.url(path)))).toBe('401 authentication_required');
        expect(code(await http(method, c.url(path), { token: 'not-the-admin-token-0123456789' }))).toBe('403 unauthorized');
      }
    });
  });
});
