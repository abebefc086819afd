// The decision log (src/services/decision-log.ts): which decisions are recorded (every grants
// decision, execute decisions by the sample), that a recorded decision never holds a redacted value,
// that a decision which depends on a redacted value is marked rather than recorded as re-runnable,
// and that recording and observing never change a decision. The policy is the default one as the
// service knows it (SERVICE_POLICY), really evaluated.
import { beforeAll, describe, expect, it } from 'vitest';
import { parseDecisionRecord, type DecisionRecord } from '../../src/policy/decision-records.ts';
import { loadPolicyEngine, type WasmPolicyEngine } from '../../src/policy/engine.ts';
import { compileRedaction } from '../../src/policy/redaction.ts';
import type { ExecuteInput, GrantsInput, PolicyEngine } from '../../src/policy/types.ts';
import { DECISION_QUEUE_MAX, DecisionLog, recordingPolicy, type DecisionObserver } from '../../src/services/decision-log.ts';
import { MemoryStore } from '../../src/store/memory/memory-store.ts';
import { MAX_ROUND_TRIP_DECISION_RECORDS, type DecisionRecords } from '../../src/store/store.ts';
import { SERVICE_POLICY } from '../support/policies.ts';

const NOW_MS = 1_767_225_600_000;
const SECRET = 'hunter2-0123456789';
const silent = { debug() {}, info() {}, warn() {}, error() {}, child() { return silent; } } as never;

let engine: WasmPolicyEngine;
beforeAll(async () => {
  engine = await loadPolicyEngine(SERVICE_POLICY);
});

function executeInput(args: Record<string, unknown>, constraints: Record<string, unknown> | null): ExecuteInput {
  return {
    now_ms: NOW_MS,
    agent: { id: 'agt_1', mode: 'delegated', host_id: 'hst_1' },
    capability: 'transfer_money',
    arguments: args,
    grants: [{ id: 'grt_1', constraints: constraints as ExecuteInput['grants'][number]['constraints'] }],
  };
}

const grantsInput: GrantsInput = {
  now_ms: NOW_MS,
  action: 'register',
  host: { id: 'hst_1', status: 'active', linked: true, default_capabilities: ['read_weather'] },
  agent: { id: null, mode: 'delegated' },
  requests: [{ capability: 'read_weather', exists: true, constraints: null, previous_status: null }],
};

function logOver(store: DecisionRecords, options: { sample?: number; random?: () => number; redact?: string } = {}): DecisionLog {
  return new DecisionLog({
    store, sample: options.sample ?? 1, maxRecords: 1000, flushMs: 1000, redaction: compileRedaction(options.redact ?? 'password'),
    writeDeadlineMs: 2000, logger: silent, ...(options.random ? { random: options.random } : {}),
  });
}

async function storedRecords(store: MemoryStore): Promise<DecisionRecord[]> {
  const stored = await store.readDecisionRecords(1000);
  return stored.reverse().map((s) => {
    const record = parseDecisionRecord({ ...JSON.parse(s.json) as object, id: s.id });
    if (record === null) throw new Error(`stored a malformed record: ${s.json}`);
    return record;
  });
}

describe('which decisions are recorded', () => {
  it('records every grants decision, whatever the execute sample', async () => {
    const store = new MemoryStore();
    const log = logOver(store, { sample: 0 });
    const policy = recordingPolicy(engine, log);
    for (let i = 0; i < 3; i++) policy.decideGrants(grantsInput);
    policy.decideExecute(executeInput({ amount: 5 }, null));
    await log.flush();
    const records = await storedRecords(store);
    expect(records.map((r) => r.entrypoint)).toEqual(['agentgate/grants', 'agentgate/grants', 'agentgate/grants']);
    expect(records[0]!.sha256).toBe(engine.info().sha256);
    expect(records[0]!.output).toEqual(engine.decideGrants(grantsInput));
  });

  it('records execute decisions by the sample: a draw below it records, one at or above it does not', async () => {
    const store = new MemoryStore();
    const draws = [0.1, 0.25, 0.9, 0.2499];
    const log = logOver(store, { sample: 0.25, random: () => draws.shift()! });
    const policy = recordingPolicy(engine, log);
    for (let amount = 1; amount <= 4; amount++) policy.decideExecute(executeInput({ amount }, null));
    await log.flush();
    const records = await storedRecords(store);
    expect(records.map((r) => (r.input.arguments as { amount: number }).amount)).toEqual([1, 4]);
  });

  it('rides a store call the caller makes anyway: handOver takes at most a round trip\'s worth, oldest first', () => {
    const log = logOver(new MemoryStore());
    const policy = recordingPolicy(engine, log);
    for (let amount = 0; amount < MAX_ROUND_TRIP_DECISION_RECORDS + 5; amount++) policy.decideExecute(executeInput({ amount }, null));
    const first = log.handOver()!;
    expect(first.records).toHaveLength(MAX_ROUND_TRIP_DECISION_RECORDS);
    expect((JSON.parse(first.records[0]!) as DecisionRecord).input.arguments).toEqual({ amount: 0 });
    first.settle(Promise.resolve(first.records.map(() => true)));
    expect(log.handOver()!.records).toHaveLength(5);
    expect(log.handOver()).toBeNull();
  });

  it('a flood of decisions drops the oldest records beyond the queue bound, counted, and never grows past it', () => {
    const log = logOver(new MemoryStore());
    const policy = recordingPolicy(engine, log);
    for (let i = 0; i < DECISION_QUEUE_MAX + 7; i++) policy.decideGrants(grantsInput);
    expect(log.queued).toBe(DECISION_QUEUE_MAX);
    expect(log.counters.droppedQueueFull).toBe(7);
  });

  it('a store that refuses the append loses those records, counted; the decisions stood', async () => {
    const failing: DecisionRecords = {
      appendDecisionRecords: () => Promise.reject(new Error('Redis is down')),
      readDecisionRecords: () => Promise.resolve([]),
      decisionStreamAddress: () => null,
    };
    const log = logOver(failing);
    const policy = recordingPolicy(engine, log);
    expect(policy.decideGrants(grantsInput)).toEqual(engine.decideGrants(grantsInput));
    await log.flush();
    expect(log.counters).toMatchObject({ recorded: 1, written: 0, droppedWriteFailed: 1 });
  });
});

describe('redaction of what is recorded', () => {
  it('no redacted value reaches the store: not in the input, not as a violation\'s actual value', async () => {
    const store = new MemoryStore();
    const log = logOver(store, { redact: 'password' });
    const policy = recordingPolicy(engine, log);
    // Allowed, and refused with the secret as the violation's actual value.
    policy.decideExecute(executeInput({ password: SECRET, amount: 1 }, { password: { in: [SECRET] } }));
    const refused = policy.decideExecute(executeInput({ password: SECRET, amount: 1 }, { password: { in: ['something-else'] } }));
    expect(refused.violations[0]).toMatchObject({ field: 'password', actual: SECRET });
    await log.flush();
    const stored = await store.readDecisionRecords(1000);
    expect(stored).toHaveLength(2);
    for (const entry of stored) expect(entry.json).not.toContain(SECRET);
  });

  it('marks a decision whose outcome depends on a redacted value, so a preview cannot count it as a flip', async () => {
    const store = new MemoryStore();
    // Only the argument: a bare name would redact the grant's constraint on it too, and the two
    // "[redacted]" would still match.
    const log = logOver(store, { redact: 'arguments.password' });
    const policy = recordingPolicy(engine, log);
    // Allowed only because the password matched: once redacted it would be refused.
    expect(policy.decideExecute(executeInput({ password: SECRET }, { password: SECRET })).allow).toBe(true);
    // Allowed whatever the password is: redaction changes nothing about it.
    expect(policy.decideExecute(executeInput({ password: SECRET, amount: 3 }, { amount: { max: 5 } })).allow).toBe(true);
    await log.flush();
    const [dependent, independent] = await storedRecords(store);
    expect(dependent!.redactionDependent).toBe(true);
    expect(independent!.redactionDependent).toBeUndefined();
    expect(log.counters.redactionDependent).toBe(1);
  });
});

describe('recording and observing never change a decision', () => {
  it('answers exactly what the engine answers, and lets its exception through with nothing recorded', async () => {
    const store = new MemoryStore();
    const log = logOver(store);
    const policy = recordingPolicy(engine, log);
    const input = executeInput({ amount: 9 }, { amount: { max: 5 } });
    expect(policy.decideExecute(input)).toEqual(engine.decideExecute(input));
    const throwing: PolicyEngine = {
      decideGrants: () => { throw new Error('policy failed'); },
      decideExecute: () => { throw new Error('policy failed'); },
      info: () => engine.info(),
    };
    const failingPolicy = recordingPolicy(throwing, log);
    expect(() => failingPolicy.decideGrants(grantsInput)).toThrow('policy failed');
    expect(() => failingPolicy.decideExecute(input)).toThrow('policy failed');
    await log.flush();
    expect(await store.readDecisionRecords(1000)).toHaveLength(1);
  });

  it('offers every decision to an active observer, sampled or not, with the operator answers the decision used; an observer that throws changes nothing', () => {
    const seen: Array<{ entrypoint: string; operatorAnswers?: unknown }> = [];
    const observer: DecisionObserver = {
      active: () => true,
      observe: (o) => {
        seen.push(o);
        throw new Error('observer broke');
      },
    };
    const policy = recordingPolicy(engine, logOver(new MemoryStore(), { sample: 0 }), observer);
    const input = executeInput({ path: '/tmp/x' }, { path: { starts_with: '/tmp/' } });
    const plugin = (name: string, operand: unknown, actual: unknown) => name === 'starts_with' && String(actual).startsWith(String(operand));
    expect(policy.decideExecute(input, plugin)).toEqual(engine.decideExecute(input, plugin));
    expect(policy.decideGrants(grantsInput)).toEqual(engine.decideGrants(grantsInput));
    expect(seen.map((o) => o.entrypoint)).toEqual(['agentgate/execute', 'agentgate/grants']);
    expect(seen[0]!.operatorAnswers).toEqual([['starts_with', '/tmp/', '/tmp/x', true]]);
  });
});
