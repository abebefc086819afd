// `node bench/policy.ts`: the policy's cost on the hot path (issue 3). Loads the committed artefact
// through loadPolicyEngine, as agentgate does, and measures agentgate/execute on representative
// inputs: decisions per second from a loop without timers, p50/p99 from per-call hrtime.
import { cpus } from 'node:os';
import { loadPolicyEngine } from '../src/policy/engine.ts';
import type { ExecuteInput } from '../src/policy/types.ts';

const WARMUP = 20_000;
const TIMED = 100_000;

const input = (args: Record<string, unknown>, constraints: Record<string, unknown> | null): ExecuteInput => ({
  now_ms: Date.now(),
  agent: { id: 'agt_bench', mode: 'delegated', host_id: 'hst_bench' },
  capability: 'transfer_money',
  arguments: args,
  grants: [{ id: 'grt_bench', constraints }],
});

const three = { amount: { min: 1, max: 1000 }, currency: { in: ['USD', 'EUR'] }, region: { not_in: ['north'] } };
const scenarios: Array<[string, ExecuteInput]> = [
  ['no constraints', input({ amount: 5 }, null)],
  ['3 constraints, allowed', input({ amount: 250, currency: 'USD', region: 'east' }, three)],
  ['3 constraints, 3 violations', input({ amount: 5000, currency: 'GBP', region: 'north' }, three)],
  ['1 plugin operator (trivial evaluator)', input({ code: 'ABZ' }, { code: { ends_with: 'Z' } })],
];

const engine = await loadPolicyEngine({
  wasmPath: 'policies/dist/policy.wasm',
  goldenPath: 'policies/golden.json',
  operator: (name, operand, actual) => name === 'ends_with' && typeof actual === 'string' && actual.endsWith(String(operand)),
});

const rows: string[] = [];
for (const [label, decision] of scenarios) {
  for (let i = 0; i < WARMUP; i++) engine.decideExecute(decision);
  const started = process.hrtime.bigint();
  for (let i = 0; i < TIMED; i++) engine.decideExecute(decision);
  const perSecond = Math.round(TIMED / (Number(process.hrtime.bigint() - started) / 1e9));
  const samples = new Float64Array(TIMED);
  for (let i = 0; i < TIMED; i++) {
    const t = process.hrtime.bigint();
    engine.decideExecute(decision);
    samples[i] = Number(process.hrtime.bigint() - t) / 1000;
  }
  samples.sort();
  const pct = (p: number) => samples[Math.min(TIMED - 1, Math.floor(p * TIMED))]!.toFixed(1);
  rows.push(`| ${label} | ${perSecond} | ${pct(0.5)} | ${pct(0.99)} |`);
}
process.stdout.write([
  `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; ${WARMUP} warm-up and ${TIMED} timed decisions per row, one thread.`,
  '',
  '| agentgate/execute input | decisions/s | p50 µs | p99 µs |',
  '|---|---|---|---|',
  ...rows,
  '',
].join('\n'));
