// Candidate policies evaluated off the main thread (src/policy/candidates.ts), with the committed
// fixture artefacts in real worker threads. The guarantees: a preview in a worker reports exactly
// what previewDecisions reports in process, however the records are paged; a shadow counts and
// reports every decision it would have made otherwise, by the same rules; and a candidate that
// throws, answers garbage, or never answers (spin.wasm) is counted or stopped, never thrown into
// the caller, and never lets observations pile up beyond the queue.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CandidatePolicies, CandidatesClosedError, CandidateTimeoutError, type CandidatePoliciesOptions, type ShadowDisagreement, type ShadowObservation } from '../../src/policy/candidates.ts';
import type { DecisionRecord, OperatorAnswer } from '../../src/policy/decision-records.ts';
import { loadPolicyEngine, PolicyLoadError, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { previewDecisions } from '../../src/policy/preview.ts';
import type { ExecuteInput, GrantsInput } from '../../src/policy/types.ts';
import { silentLogger, type Logger } from '../../src/logger.ts';
import { FIXTURES_DIR, fixturePolicy, SERVICE_POLICY } from '../support/policies.ts';
import { within } from '../support/within.ts';

const NOW_MS = 1_767_225_600_000;
const AT = '2026-01-01T00:00:00.000Z';

const artefact = (name: string) => readFileSync(path.join(FIXTURES_DIR, `${name}.wasm`));
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

let service: WasmPolicyEngine;
let allowAll: WasmPolicyEngine;
let denyAll: WasmPolicyEngine;

beforeAll(async () => {
  service = await loadPolicyEngine(SERVICE_POLICY);
  allowAll = await loadPolicyEngine(fixturePolicy('allow'));
  denyAll = await loadPolicyEngine(fixturePolicy('deny'));
});

function executeInput(hostId: string, capability: string, args: Record<string, unknown> = {}, constraints: ExecuteInput['grants'][number]['constraints'] = null): ExecuteInput {
  return { now_ms: NOW_MS, agent: { id: 'agt_1', mode: 'delegated', host_id: hostId }, capability, arguments: args, grants: [{ id: 'grt_1', constraints }] };
}

function grantsInput(requests: string[]): GrantsInput {
  return {
    now_ms: NOW_MS,
    action: 'register',
    host: { id: 'hst_a', status: 'active', linked: true, default_capabilities: ['read_file'] },
    agent: { id: null, mode: 'delegated' },
    requests: requests.map((capability) => ({ capability, exists: true, constraints: null, previous_status: null })),
  };
}

/** A live execute decision as `live` made it, as the caller hands it to observe(). */
function executeObservation(live: WasmPolicyEngine, input: ExecuteInput): ShadowObservation {
  return { entrypoint: 'agentgate/execute', input: input as unknown as Record<string, unknown>, output: live.decideExecute(input) };
}

function grantsObservation(live: WasmPolicyEngine, input: GrantsInput): ShadowObservation {
  return { entrypoint: 'agentgate/grants', input: input as unknown as Record<string, unknown>, output: live.decideGrants(input) };
}

function record(observation: ShadowObservation, live: WasmPolicyEngine): DecisionRecord {
  return { at: AT, entrypoint: observation.entrypoint, sha256: live.info().sha256, input: observation.input, output: observation.output };
}

/**
 * Recorded traffic whose live decisions the comments name: ten executes the allow-everything policy
 * allowed, two the default policy refused (over amount.max), and one grants decision of the default
 * policy (grant, approval, deny). Against the maintenance-window policy: 10 allow_to_deny, the two
 * refusals unchanged, and the approval and the deny become grants (2 deny_to_allow, 1 unchanged).
 */
function recordedTraffic(): DecisionRecord[] {
  const allowed = [
    ...[10, 20, 30, 40, 50].map((amount) => executeInput('hst_a', 'transfer_money', { amount })),
    ...[60, 70].map((amount) => executeInput('hst_b', 'transfer_money', { amount })),
    ...['/a', '/b', '/c'].map((file) => executeInput('hst_a', 'read_file', { path: file })),
  ].map((input) => record(executeObservation(allowAll, input), allowAll));
  const refused = [500, 600].map((amount) => record(executeObservation(service, executeInput('hst_a', 'transfer_money', { amount }, { amount: { max: 100 } })), service));
  const grants = record(grantsObservation(service, grantsInput(['read_file', 'write_file', 'purge_all_data'])), service);
  return [...allowed, ...refused, grants];
}

async function* pagesOf<T>(records: readonly T[], sizes: readonly number[]): AsyncGenerator<readonly T[]> {
  let start = 0;
  for (const size of sizes) {
    yield records.slice(start, start + size);
    start += size;
  }
}

/** Waits, polling and bounded, until `condition` holds. */
async function until(what: string, condition: () => boolean): Promise<void> {
  let stopped = false;
  const poll = async () => {
    while (!stopped && !condition()) await delay(5);
  };
  try {
    await within(10_000, what, poll());
  } finally {
    stopped = true;
  }
}

const opened: CandidatePolicies[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((candidates) => candidates.close()));
});

function candidatePolicies(options: Partial<CandidatePoliciesOptions> = {}): CandidatePolicies {
  const candidates = new CandidatePolicies({ shadowQueueMax: 1000, previewTimeoutMs: 20_000, onDisagreement: () => {}, logger: silentLogger, ...options });
  opened.push(candidates);
  return candidates;
}

describe('a preview in a worker', () => {
  it('reports exactly what previewDecisions reports in process, with the candidate\'s sha256', async () => {
    const records = recordedTraffic();
    const candidates = candidatePolicies();
    const report = await candidates.preview(artefact('deny'), pagesOf(records, [records.length]));
    expect(report).toStrictEqual({ ...previewDecisions(records, denyAll), sha256: sha256(artefact('deny')) });
    expect(report).toMatchObject({ evaluated: 13, decisions: 15, unchanged: 3, allow_to_deny: 10, deny_to_allow: 2, other_changes: 0, errors: { count: 0 } });
    expect(report.groups.map((g) => [g.direction, g.capability, g.host_id, g.rule, g.count])).toEqual([
      ['allow_to_deny', 'transfer_money', 'hst_a', 'maintenance window', 5],
      ['allow_to_deny', 'read_file', 'hst_a', 'maintenance window', 3],
      ['allow_to_deny', 'transfer_money', 'hst_b', 'maintenance window', 2],
      ['deny_to_allow', 'purge_all_data', 'hst_a', 'blocked by policy', 1],
      ['deny_to_allow', 'write_file', 'hst_a', 'user approval required', 1],
    ]);
  });

  it('merges pages, and pages cut into chunks, into one report', async () => {
    const traffic = recordedTraffic();
    const records = Array.from({ length: 2600 }, (_, i) => traffic[i % traffic.length]!);
    const candidates = candidatePolicies();
    // 1500 records go to the worker as two chunks; then a page of 1000, one of 100, and an empty one.
    const report = await candidates.preview(artefact('deny'), pagesOf(records, [1500, 1000, 100, 0]), { examplesPerGroup: 2, maxGroups: 3 });
    expect(report).toStrictEqual({ ...previewDecisions(records, denyAll, { examplesPerGroup: 2, maxGroups: 3 }), sha256: sha256(artefact('deny')) });
    expect(report).toMatchObject({ evaluated: 2600, decisions: 3000, allow_to_deny: 2000, deny_to_allow: 400, unchanged: 600 });
    expect(report.groups).toHaveLength(3);
  });

  it('reads a store\'s texts of the records as it reads the records (the worker parses them); a text that is not a record is an error', async () => {
    const records = recordedTraffic();
    const texts = records.map((record, i) => ({ id: `${i + 1}-0`, json: JSON.stringify(record) }));
    const candidates = candidatePolicies();
    const fromTexts = await candidates.preview(artefact('deny'), pagesOf(texts, [texts.length]));
    const withIds = records.map((record, i) => ({ ...record, id: `${i + 1}-0` }));
    expect(fromTexts).toStrictEqual({ ...previewDecisions(withIds, denyAll), sha256: sha256(artefact('deny')) });
    const broken = await candidates.preview(artefact('deny'), pagesOf([{ id: '9-0', json: '{"not": "a record"' }, ...texts.slice(0, 2)], [3]));
    expect(broken).toMatchObject({ evaluated: 3, errors: { count: 1 } });
    expect(broken.errors.examples[0]!.error).toMatch(/^record 9-0 is malformed/);
  });

  it('refuses bytes that are not a policy with PolicyLoadError, and options that bound nothing with RangeError', async () => {
    const candidates = candidatePolicies();
    await expect(candidates.preview(Buffer.from('not a policy'), pagesOf([], []))).rejects.toBeInstanceOf(PolicyLoadError);
    await expect(candidates.preview(artefact('misbehaving-grants-only'), pagesOf([], []))).rejects.toThrow(/lacks the entrypoint\(s\) agentgate\/execute/);
    await expect(candidates.preview(artefact('deny'), pagesOf([], []), { maxGroups: -1 })).rejects.toBeInstanceOf(RangeError);
    // The worker serves the next preview as before.
    await expect(candidates.preview(artefact('deny'), pagesOf([], []))).resolves.toMatchObject({ evaluated: 0 });
  });

  it('a candidate that never answers is stopped at the timeout, the source is closed, and the next preview runs on a fresh worker', async () => {
    // Generous, so that a loaded machine still loads the candidate in time and the spin is what is stopped.
    const candidates = candidatePolicies({ previewTimeoutMs: 6000 });
    const spin = record(executeObservation(allowAll, executeInput('hst_a', 'spin')), allowAll);
    let pagesRead = 0;
    let sourceClosed = false;
    const source: AsyncIterable<readonly DecisionRecord[]> = {
      [Symbol.asyncIterator]: () => ({
        next: async () => (pagesRead++ < 2 ? { done: false, value: [spin] } : { done: true, value: undefined }),
        return: async () => {
          sourceClosed = true;
          return { done: true, value: undefined };
        },
      }),
    };
    const error = await candidates.preview(artefact('spin'), source).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CandidateTimeoutError);
    expect((error as Error).message).toBe('the preview did not finish within 6000 ms; its worker was stopped');
    // The first page spins in the worker while the second is read; the third is never asked for.
    expect(pagesRead).toBe(2);
    expect(sourceClosed).toBe(true);
    const records = recordedTraffic();
    await expect(candidates.preview(artefact('deny'), pagesOf(records, [records.length]))).resolves.toMatchObject({ evaluated: 13, allow_to_deny: 10 });
  });

  it('a page source that never yields times out too', async () => {
    // Long enough for the worker's process to start and load the candidate on a loaded machine, so
    // that the wait for the source is what times out.
    const candidates = candidatePolicies({ previewTimeoutMs: 4000 });
    let asked = false;
    const stuck: AsyncIterable<readonly DecisionRecord[]> = {
      [Symbol.asyncIterator]: () => ({
        next: () => {
          asked = true;
          return new Promise<IteratorResult<readonly DecisionRecord[]>>(() => {});
        },
      }),
    };
    await expect(candidates.preview(artefact('deny'), stuck)).rejects.toBeInstanceOf(CandidateTimeoutError);
    expect(asked).toBe(true);
  });
});

describe('a shadow', () => {
  it('counts every decision it would have made otherwise, by capability, and reports each with its input', async () => {
    const disagreements: ShadowDisagreement[] = [];
    const candidates = candidatePolicies({ onDisagreement: (d) => disagreements.push(d) });
    expect(candidates.tally()).toBeNull();
    await expect(candidates.loadShadow(artefact('deny'))).resolves.toEqual({ sha256: sha256(artefact('deny')) });
    const flipped = [
      ...[1, 2, 3, 4].map((amount) => executeObservation(allowAll, executeInput('hst_a', 'transfer_money', { amount }))),
      ...['/a', '/b'].map((file) => executeObservation(allowAll, executeInput('hst_b', 'read_file', { path: file }))),
    ];
    // Refused live and by the shadow; and a grants decision whose three grants the shadow grants too.
    const agreeing = [
      ...[500, 600].map((amount) => executeObservation(service, executeInput('hst_a', 'transfer_money', { amount }, { amount: { max: 100 } }))),
      grantsObservation(allowAll, grantsInput(['echo', 'read_file', 'write_file'])),
    ];
    for (const observation of [...flipped, ...agreeing]) candidates.observe(observation);
    await until('the shadow evaluated 9 observations', () => candidates.tally()?.evaluated === 9);
    const tally = candidates.tally()!;
    expect(tally).toStrictEqual({
      sha256: sha256(artefact('deny')), loaded_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) as unknown as string,
      observed: 9, evaluated: 9, agreed: 5, disagreed: 6, dropped: 0, errors: 0, queued: 0, running: 0,
      by_capability: { transfer_money: { allow_to_deny: 4, deny_to_allow: 0, other: 0 }, read_file: { allow_to_deny: 2, deny_to_allow: 0, other: 0 } },
    });
    expect(disagreements).toHaveLength(6);
    expect(disagreements.map((d) => d.input)).toEqual(flipped.map((o) => o.input));
    // The caller's own input object, not a copy that went through the worker.
    expect(disagreements[0]!.input).toBe(flipped[0]!.input);
    expect(disagreements[4]).toStrictEqual({ entrypoint: 'agentgate/execute', direction: 'allow_to_deny', capability: 'read_file', host_id: 'hst_b', rule: 'maintenance window', input: flipped[4]!.input });
  });

  it('re-runs execute decisions on the recorded operator answers; a throw, a malformed answer, a missing answer or an unreadable observation is an error, never a throw', async () => {
    const disagreements: ShadowDisagreement[] = [];
    const candidates = candidatePolicies({ onDisagreement: (d) => disagreements.push(d) });
    await candidates.loadShadow(artefact('misbehaving'));
    const allowed = { allow: true, grant_id: 'grt_1', violations: [] };
    const observation = (capability: string, answers?: OperatorAnswer[]): ShadowObservation => ({
      entrypoint: 'agentgate/execute',
      input: executeInput('hst_a', capability, { op: 'plug' }) as unknown as Record<string, unknown>,
      output: allowed,
      ...(answers === undefined ? {} : { operatorAnswers: answers }),
    });
    const observations: ShadowObservation[] = [
      observation('operator', [['plug', 1, 2, true]]), // agreed
      observation('operator', [['plug', 1, 2, false]]), // allow_to_deny, "operator said no"
      observation('echo'), // agreed
      observation('operator'), // error: needs an answer nobody recorded
      observation('undefined'), // error: the policy is undefined for it
      observation('forge'), // error: allows with a grant the input does not hold
      observation('malformed'), // error: a violation without a constraint
      { ...observation('echo'), output: 'nonsense' }, // error: the live output cannot be read
      observation('echo', [42 as unknown as OperatorAnswer]), // error: answers of the wrong shape
    ];
    for (const o of observations) expect(() => candidates.observe(o)).not.toThrow();
    await until('the shadow evaluated 9 observations', () => candidates.tally()?.evaluated === 9);
    expect(candidates.tally()).toMatchObject({ observed: 9, evaluated: 9, agreed: 2, disagreed: 1, errors: 6, dropped: 0 });
    expect(disagreements.map((d) => [d.direction, d.capability, d.rule])).toEqual([['allow_to_deny', 'operator', 'operator said no']]);
  });

  it('counts a grants change between approval and deny as other, and names at most 1000 capabilities, the rest under (other)', async () => {
    const disagreements: ShadowDisagreement[] = [];
    const candidates = candidatePolicies({ shadowQueueMax: 2000, onDisagreement: (d) => disagreements.push(d) });
    await candidates.loadShadow(artefact('service'));
    // Live refused write_file outright; the default policy asks the user instead.
    candidates.observe({
      entrypoint: 'agentgate/grants',
      input: grantsInput(['write_file']) as unknown as Record<string, unknown>,
      output: { decisions: [{ capability: 'write_file', decision: 'deny', reason: 'no writes' }] },
    });
    // 1002 more capabilities, each refused live and allowed by the default policy (a grant without constraints).
    for (let i = 0; i < 1002; i++) {
      candidates.observe({ entrypoint: 'agentgate/execute', input: executeInput('hst_a', `cap_${i}`) as unknown as Record<string, unknown>, output: { allow: false, violations: [], reason: 'refused live' } });
    }
    await until('the shadow evaluated 1003 observations', () => candidates.tally()?.evaluated === 1003);
    const tally = candidates.tally()!;
    expect(tally).toMatchObject({ observed: 1003, evaluated: 1003, errors: 0, disagreed: 1003, agreed: 0 });
    expect(Object.keys(tally.by_capability)).toHaveLength(1001);
    expect(tally.by_capability.write_file).toEqual({ allow_to_deny: 0, deny_to_allow: 0, other: 1 });
    expect(tally.by_capability.cap_998).toEqual({ allow_to_deny: 0, deny_to_allow: 1, other: 0 });
    expect(tally.by_capability.cap_999).toBeUndefined();
    expect(tally.by_capability['(other)']).toEqual({ allow_to_deny: 0, deny_to_allow: 3, other: 0 });
    expect(disagreements[0]).toMatchObject({ entrypoint: 'agentgate/grants', direction: 'other', capability: 'write_file', host_id: 'hst_a', rule: 'user approval required' });
  });

  it('a disagreement handler that throws breaks nothing: it is logged and the counts go on', async () => {
    const logged: string[] = [];
    const logger: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: (msg) => logged.push(msg) };
    const candidates = candidatePolicies({ logger, onDisagreement: () => { throw new Error('handler bug'); } });
    await candidates.loadShadow(artefact('deny'));
    for (const amount of [1, 2, 3]) candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'transfer_money', { amount })));
    await until('the shadow evaluated 3 observations', () => candidates.tally()?.evaluated === 3);
    expect(candidates.tally()).toMatchObject({ disagreed: 3, errors: 0, by_capability: { transfer_money: { allow_to_deny: 3 } } });
    expect(logged).toEqual(['the shadow disagreement handler threw; the disagreement is still counted']);
  });

  it('while the shadow is busy, observations beyond the queue are dropped and counted, and observe returns at once', async () => {
    const candidates = candidatePolicies({ shadowQueueMax: 3, previewTimeoutMs: 60_000 });
    await candidates.loadShadow(artefact('spin'));
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'spin')));
    await until('the spinning decision is with the shadow', () => candidates.tally()?.running === 1);
    for (let i = 0; i < 10; i++) candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    expect(candidates.tally()).toMatchObject({ observed: 11, evaluated: 0, queued: 3, running: 1, dropped: 7, errors: 0 });
    // close() stops the spinning worker rather than waiting for it.
    await within(10_000, 'close()', candidates.close());
    expect(candidates.tally()).toBeNull();
  });

  it('a batch that never finishes is stopped at the timeout and counted as errors; a fresh worker takes over', async () => {
    // Generous, so that a loaded machine still loads the shadow in time and the spin is what is stopped.
    const candidates = candidatePolicies({ previewTimeoutMs: 6000 });
    await candidates.loadShadow(artefact('spin'));
    // Observed in one turn of the event loop, so they leave in one batch and share its fate.
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'spin')));
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    await until('the spinning batch timed out', () => candidates.tally()?.errors === 2);
    expect(candidates.tally()).toMatchObject({ observed: 2, evaluated: 2, errors: 2, agreed: 0, running: 0 });
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    await until('the restarted shadow evaluated the next observation', () => candidates.tally()?.evaluated === 3);
    expect(candidates.tally()).toMatchObject({ observed: 3, evaluated: 3, errors: 2, agreed: 1 });
    await within(10_000, 'close()', candidates.close());
  });

  it('bytes that are not a policy leave the loaded shadow, its bytes and its tally as they were; a new shadow starts a new tally', async () => {
    const candidates = candidatePolicies();
    await candidates.loadShadow(artefact('deny'));
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    await until('the shadow evaluated 1 observation', () => candidates.tally()?.evaluated === 1);
    await expect(candidates.loadShadow(Buffer.from('not a policy'))).rejects.toBeInstanceOf(PolicyLoadError);
    expect(candidates.shadowArtefact()).toEqual(new Uint8Array(artefact('deny')));
    expect(candidates.tally()).toMatchObject({ sha256: sha256(artefact('deny')), evaluated: 1, disagreed: 1 });
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    await until('the kept shadow evaluated another observation', () => candidates.tally()?.evaluated === 2);

    await candidates.loadShadow(artefact('allow'));
    expect(candidates.tally()).toMatchObject({ sha256: sha256(artefact('allow')), observed: 0, evaluated: 0 });
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    await until('the new shadow evaluated 1 observation', () => candidates.tally()?.evaluated === 1);
    expect(candidates.tally()).toMatchObject({ agreed: 1, disagreed: 0 });
  });

  it('without a shadow, observe does nothing; after close, nothing is accepted', async () => {
    const candidates = candidatePolicies();
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    expect(candidates.tally()).toBeNull();
    expect(candidates.hasShadow()).toBe(false);
    await candidates.loadShadow(artefact('deny'));
    expect(candidates.hasShadow()).toBe(true);
    candidates.clearShadow();
    expect(candidates.hasShadow()).toBe(false);
    expect(candidates.shadowArtefact()).toBeNull();
    candidates.observe(executeObservation(allowAll, executeInput('hst_a', 'echo')));
    expect(candidates.tally()).toBeNull();
    await candidates.close();
    await expect(candidates.preview(artefact('deny'), pagesOf([], []))).rejects.toBeInstanceOf(CandidatesClosedError);
    await expect(candidates.loadShadow(artefact('deny'))).rejects.toBeInstanceOf(CandidatesClosedError);
  });
});
