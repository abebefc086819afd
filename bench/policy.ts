// The policy's cost on the hot path. Loads the committed artefact through
// loadPolicyEngine, as agentgate does (output checks included), and measures agentgate/execute on
// representative inputs, one thread: a warm-up, then decisions per second from a loop without
// timers, then p50/p99 from per-call hrtime. Prints a markdown table with the machine.
//
// Run the file itself with Node >= 22.18 (it is TypeScript; Node strips the types), from anywhere:
//   node bench/policy.ts                      (node_modules/.bin/node is the pinned Node 24)
// or `npm run bench:policy`. BENCH_POLICY_TIMED sets the timed decisions per row (default 100000).
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { isDeepStrictEqual } from 'node:util';
import { loadPolicyEngine } from '../src/policy/engine.ts';
import type { ExecuteInput, ExecuteOutput } from '../src/policy/types.ts';

const TIMED = Number(process.env.BENCH_POLICY_TIMED ?? 100_000);
const WARMUP = Math.max(1000, Math.round(TIMED / 5));
// The shipped policy by default; the smoke test points these at the test fixture, so a security
// team's policy change (a time window, say) cannot make the benchmark's expected decisions fail.
const wasmPath = process.env.POLICY_WASM_PATH ?? new URL('../policies/dist/policy.wasm', import.meta.url).pathname;
const goldenPath = process.env.POLICY_GOLDEN_PATH ?? new URL('../policies/golden.json', import.meta.url).pathname;

const input = (args: Record<string, unknown>, constraints: Record<string, unknown> | null): ExecuteInput => ({
  now_ms: 1_767_225_600_000,
  agent: { id: 'agt_bench', mode: 'delegated', host_id: 'hst_bench' },
  capability: 'transfer_money',
  arguments: args,
  grants: [{ id: 'grt_bench', constraints }],
});

const allowed: ExecuteOutput = { allow: true, grant_id: 'grt_bench', violations: [] };
const three = { amount: { min: 1, max: 1000 }, currency: { in: ['USD', 'EUR'] }, region: { not_in: ['north'] } };

/** Each row's input and the decision it must produce, checked before timing. */
const scenarios: Array<{ label: string; input: ExecuteInput; expected: ExecuteOutput }> = [
  { label: 'no constraints', input: input({ amount: 5 }, null), expected: allowed },
  { label: '3 constraints, allowed', input: input({ amount: 250, currency: 'USD', region: 'east' }, three), expected: allowed },
  {
    label: '3 constraints, 3 violations',
    input: input({ amount: 5000, currency: 'GBP', region: 'north' }, three),
    expected: {
      allow: false,
      reason: 'constraint violated',
      violations: [
        { field: 'amount', constraint: { max: 1000 }, actual: 5000 },
        { field: 'currency', constraint: { in: ['USD', 'EUR'] }, actual: 'GBP' },
        { field: 'region', constraint: { not_in: ['north'] }, actual: 'north' },
      ],
    },
  },
  { label: '1 plugin operator (trivial evaluator), allowed', input: input({ code: 'ABZ' }, { code: { ends_with: 'Z' } }), expected: allowed },
];

const engine = await loadPolicyEngine({
  wasmPath,
  goldenPath,
  operator: (name, operand, actual) => name === 'ends_with' && typeof actual === 'string' && actual.endsWith(String(operand)),
});

const rows: string[] = [];
for (const { label, input: decision, expected } of scenarios) {
  const got = engine.decideExecute(decision);
  if (!isDeepStrictEqual(got, expected)) throw new Error(`${label}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
  for (let i = 0; i < WARMUP; i++) engine.decideExecute(decision);
  const started = process.hrtime.bigint();
  for (let i = 0; i < TIMED; i++) engine.decideExecute(decision);
  const perSecond = Math.round(TIMED / (Number(process.hrtime.bigint() - started) / 1e9));
  const samplesUs = new Float64Array(TIMED);
  for (let i = 0; i < TIMED; i++) {
    const t = process.hrtime.bigint();
    engine.decideExecute(decision);
    samplesUs[i] = Number(process.hrtime.bigint() - t) / 1000;
  }
  samplesUs.sort();
  const pct = (p: number) => samplesUs[Math.min(TIMED - 1, Math.floor(p * TIMED))]!.toFixed(1);
  rows.push(`| ${label} | ${perSecond} | ${pct(0.5)} | ${pct(0.99)} |`);
}

const sha256 = createHash('sha256').update(readFileSync(wasmPath)).digest('hex');
process.stdout.write([
  `Machine: ${cpus()[0]?.model.trim() || 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}. `
    + `policy.wasm sha256 ${sha256.slice(0, 12)}…; ${WARMUP} warm-up and ${TIMED} timed decisions per row, one thread.`,
  '',
  '| agentgate/execute input | decisions/s | p50 µs | p99 µs |',
  '|---|---|---|---|',
  ...rows,
  '',
].join('\n'));
