// The benchmarks keep working: each one runs end to end for a moment, and the
// load benchmark's answers are exactly the intended ones. No speed is asserted here; speed lives in
// the benchmarks' own output (bench/RESULTS.md), never in a timed test.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SERVICE_POLICY } from '../support/policies.ts';

const NODE = process.execPath;
// The smoke run's JSON results go to a temporary directory, never over a developer's own.
const scratch = mkdtempSync(path.join(tmpdir(), 'agentgate-bench-smoke-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * Runs a benchmark script to completion (bounded) and returns its stdout. The script leads its own
 * process group, so a timeout kills the servers it started along with it.
 */
function runBench(script: string, env: Record<string, string>, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    // The service fixture policy, not the shipped one: a security team's policy change (a time
    // window, say) must not make the benchmarks' expected decisions fail `npm test`.
    const policy = { POLICY_WASM_PATH: SERVICE_POLICY.wasmPath, POLICY_GOLDEN_PATH: SERVICE_POLICY.goldenPath };
    const child = spawn(NODE, [script], { env: { ...process.env, ...policy, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // Already gone.
      }
      reject(new Error(`${script} did not finish within ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${script} exited with ${code}\n${stderr}`));
    });
  });
}

/** A value over the rounds in bench/results/latest.json (bench/run.ts). */
interface Spread { median: number; min: number; max: number; perRound: (number | null)[] }

/** The parts of bench/results/latest.json this test reads. */
interface BenchResults {
  machine: string;
  results: { scenario: string; round: number; connections: number; requestsPerSecond: number; latencyMsP99: number; allocatedBytesPerRequest: number | null }[];
  settings: { durationSeconds: number; connections: number[]; rounds: number; decisionLogSample: number; previewDecisions: number };
  rounds: { connections: number; round: number; results: (BenchResults['results'][number] & { cpuPerRequestUs: { server: number } })[]; preview?: PreviewRun }[];
  summary: {
    scenario: string; rounds: number; throughputRatioToFloor: Spread; p99RatioToFloor: Spread | null;
    allocatedBytesPerRequest: Spread | null; allocationRatioToFloor: Spread | null; executesPerSecond?: Spread; executesRatioToSingle?: Spread;
  }[];
  recordingCost: {
    connections: number; rounds: number; sample: number; targetPercent: number;
    costPercentAtSample: Spread; serverCpuUsPerRecordedDecision: Spread | null; derivedCostPercentAtSample: Spread | null;
  }[];
  previews: { connections: number; rounds: number; requested: number; evaluated: (number | null)[]; errors: (number | null)[]; statuses: number[]; seconds: Spread }[];
}

/** A preview under load, as one round of bench/results/latest.json holds it. */
interface PreviewRun {
  windowSeconds: number;
  preview: { requested: number; status: number; seconds: number; evaluated: number | null; decisions: number | null; unchanged: number | null; allowToDeny: number | null; denyToAllow: number | null; errors: number | null; truncated: boolean };
  executeDuringPreview: { requests: number; latencyMsP99: number | null };
  executeOutsidePreview: { requests: number; latencyMsP99: number | null };
}

/** The markdown table rows of a benchmark's output, as cells. */
const tableRows = (output: string) =>
  output.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| scenario') && !line.startsWith('| step') && !line.startsWith('| agentgate'))
    .map((line) => line.split('|').slice(1, -1).map((cell) => cell.trim()));

describe('benchmarks run end to end', () => {
  it('npm run bench: baseline, then the floor and the execute scenarios in two alternating rounds, with only the intended non-2xx answers, medians, spreads, heap allocation per request, recording\'s cost and a preview under load', async () => {
    // Tokens for 20,000 requests a second: more than this suite's machines serve, so none repeats
    // outside the replay scenario.
    const resultsFile = path.join(scratch, 'latest.json');
    const output = await runBench('bench/run.ts', {
      BENCH_DURATION_SECONDS: '1', BENCH_CONNECTIONS: '4', BENCH_ROUNDS: '2', BENCH_TOKENS_PER_SECOND: '20000', BENCH_RESULTS_FILE: resultsFile,
      BENCH_PREVIEW_WINDOW_SECONDS: '2', BENCH_PREVIEW_DECISIONS: '2000',
    }, 200_000);
    // The baseline once, then two rounds of the floor and six scenarios, and the preview's window.
    expect(output).toMatch(/^Expected wall time: about \d+ min \d+ s: 15 timed windows of 1 s and 2 of 2 s \(with a preview\)/m);
    expect(output).toMatch(/^Decision stream filled with 2,000 copies of records the server wrote/m);
    const [perRowPart, summaryPart] = output.split('\nSummary:');
    expect(summaryPart).toBeDefined();

    // The per-row table: every window, in the order run, with its round and its allocation.
    const BASELINE = 'baseline: bare Express JSON POST [Node 24]';
    const FLOOR = 'floor: bare Express JSON POST + one Ed25519 verification (libsodium) [Node 24]';
    const ALLOWED = 'execute: allowed, constrained grant [Node 24]';
    const UNRECORDED = 'execute: allowed, nothing recorded (DECISION_LOG_SAMPLE=0) [Node 24]';
    const ALL_RECORDED = 'execute: allowed, every decision recorded (DECISION_LOG_SAMPLE=1) [Node 24]';
    const PREVIEWED = 'execute: allowed, while a preview reads 2,000 recorded decisions (2 s window) [Node 24]';
    const VIOLATED = 'execute: constraint violated (403 expected) [Node 24]';
    const REPLAYED = 'execute: allowed with 5% replays (401 expected) [Node 24]';
    const BATCHED = 'execute: batch of 10 allowed calls (10 executes per request) [Node 24]';
    const rows = tableRows(perRowPart!);
    expect(rows.map((r) => [r[0], r[12]])).toEqual([
      [BASELINE, '1'],
      [FLOOR, '1'], [ALLOWED, '1'], [UNRECORDED, '1'], [ALL_RECORDED, '1'], [VIOLATED, '1'], [REPLAYED, '1'], [BATCHED, '1'], [PREVIEWED, '1'],
      [FLOOR, '2'], [ALLOWED, '2'], [UNRECORDED, '2'], [ALL_RECORDED, '2'], [VIOLATED, '2'], [REPLAYED, '2'], [BATCHED, '2'], [PREVIEWED, '2'],
    ]);
    const cells = rows.map((r) => ({ ok: Number(r[5]), non2xx: Number(r[6]), errors: Number(r[7]), allocatedBytesPerRequest: Number(r[13]) }));
    for (const row of cells) expect(row.errors).toBe(0);
    const baseline = cells[0]!;
    expect(baseline.non2xx).toBe(0);
    for (const round of [cells.slice(1, 9), cells.slice(9, 17)]) {
      const [floor, allowed, unrecorded, allRecorded, violated, replayed, batched, previewed] = round;
      // The floor verifies every token it gets: all of them are genuine.
      expect(floor!.ok).toBeGreaterThan(0);
      expect(floor!.non2xx).toBe(0);
      // Each round signs its own tokens: the second round's allowed executes replay none of the first's.
      expect(allowed!.ok).toBeGreaterThan(0);
      expect(allowed!.non2xx).toBe(0);
      // The agentgates that record nothing and everything serve the same agents and tokens: all allowed.
      for (const twin of [unrecorded, allRecorded, previewed]) {
        expect(twin!.ok).toBeGreaterThan(0);
        expect(twin!.non2xx).toBe(0);
      }
      expect(violated!.ok).toBe(0);
      expect(violated!.non2xx).toBeGreaterThan(0);
      // Every 20th token after the first hundred repeats an earlier one.
      expect(replayed!.ok).toBeGreaterThan(0);
      if (replayed!.ok + replayed!.non2xx > 200) expect(replayed!.non2xx).toBeGreaterThan(0);
      // The bench checked one batch's items all completed before its window; every batch then answers 200.
      expect(batched!.ok).toBeGreaterThan(0);
      expect(batched!.non2xx).toBe(0);
    }
    // Allocation is measured inside each server (not a speed): an Express request allocates some
    // kilobytes of heap, never nothing and never megabytes.
    for (const row of cells) {
      expect(row.allocatedBytesPerRequest).toBeGreaterThan(1_000);
      expect(row.allocatedBytesPerRequest).toBeLessThan(10_000_000);
    }

    // The printed summary: the floor and each scenario, each value a median with its spread.
    const spread = /^[\d,.]+ \[[\d,.]+–[\d,.]+\]$/;
    const summaryRows = tableRows(summaryPart!);
    const SCENARIOS = [FLOOR, ALLOWED, UNRECORDED, ALL_RECORDED, VIOLATED, REPLAYED, BATCHED, PREVIEWED];
    expect(summaryRows.map((r) => r[0])).toEqual(SCENARIOS);
    for (const row of summaryRows) {
      expect(row[2]).toBe('2');
      for (const cell of [row[3], row[5], row[7], row[8]]) expect(cell).toMatch(spread);
    }
    expect(summaryPart).toMatch(/Batch of 10 at 4 connections, median of 2 rounds: \d+ executes\/s, [\d.]+ \[[\d.]+–[\d.]+\] × single execute of the same round/);

    // The JSON: the old shape (machine, every row in `results`), plus settings, rounds and summary.
    const latest = JSON.parse(readFileSync(resultsFile, 'utf8')) as BenchResults;
    expect(latest.machine).toEqual(expect.any(String));
    expect(latest.results.map((r) => [r.scenario, r.round])).toEqual(rows.map((r) => [r[0], Number(r[12])]));
    expect(latest.settings).toMatchObject({ durationSeconds: 1, connections: [4], rounds: 2 });
    expect(latest.rounds.map((r) => [r.connections, r.round, r.results.length])).toEqual([[4, 1, 9], [4, 2, 8]]);
    expect(latest.summary.map((s) => s.scenario)).toEqual(SCENARIOS);
    for (const summary of latest.summary) {
      expect(summary.rounds).toBe(2);
      // Each ratio is recomputed from the rounds: the scenario over the floor of the same round.
      const perRound = latest.rounds.map((round) => ({ row: round.results.find((r) => r.scenario === summary.scenario)!, floor: round.results.find((r) => r.scenario === FLOOR)! }));
      const checkSpread = (value: Spread | null, expected: number[]) => {
        expect(value).not.toBeNull();
        expect(value!.perRound).toHaveLength(2);
        value!.perRound.forEach((v, i) => expect(v).toBeCloseTo(expected[i]!, 9));
        // With two rounds the median is their mean, between the lowest and the highest.
        expect(value!.median).toBeCloseTo((expected[0]! + expected[1]!) / 2, 9);
        expect(value!.min).toBeCloseTo(Math.min(...expected), 9);
        expect(value!.max).toBeCloseTo(Math.max(...expected), 9);
      };
      checkSpread(summary.throughputRatioToFloor, perRound.map((p) => p.row.requestsPerSecond / p.floor.requestsPerSecond));
      checkSpread(summary.allocatedBytesPerRequest, perRound.map((p) => p.row.allocatedBytesPerRequest!));
      checkSpread(summary.allocationRatioToFloor, perRound.map((p) => p.row.allocatedBytesPerRequest! / p.floor.allocatedBytesPerRequest!));
      // A floor p99 of 0 ms (possible at 4 connections) leaves that round's p99 ratio undefined.
      if (perRound.every((p) => p.floor.latencyMsP99 > 0)) checkSpread(summary.p99RatioToFloor, perRound.map((p) => p.row.latencyMsP99 / p.floor.latencyMsP99));
      if (summary.scenario === FLOOR) expect([summary.throughputRatioToFloor.median, summary.allocationRatioToFloor!.median]).toEqual([1, 1]);
    }
    const batchSummary = latest.summary.find((s) => s.scenario === BATCHED)!;
    expect(batchSummary.executesPerSecond!.median).toBeGreaterThan(0);
    expect(batchSummary.executesRatioToSingle!.perRound).toHaveLength(2);

    // Recording's cost: each round's difference of server CPU per request, recomputed from the rounds.
    expect(summaryPart).toMatch(/^Recording's cost at 4 connections \[Node 24\], 2 round\(s\)\. Server CPU µs per allowed execute, per round: recorded at DECISION_LOG_SAMPLE=0\.01: /m);
    expect(summaryPart).toMatch(/^ {2}Measured at 0\.01: \(recorded − nothing recorded\) ÷ recorded = -?[\d.]+ \[-?[\d.]+–-?[\d.]+\] % of execute's server CPU per request .*target ≤ 3 %/m);
    expect(summaryPart).toMatch(/^ {2}Every decision recorded − nothing recorded = -?[\d.]+ \[-?[\d.]+–-?[\d.]+\] µs per recorded decision; at 0\.01 that is 0\.01 × /m);
    expect(latest.recordingCost).toHaveLength(1);
    const cost = latest.recordingCost[0]!;
    expect([cost.connections, cost.rounds, cost.sample, cost.targetPercent]).toEqual([4, 2, 0.01, 3]);
    const serverCpu = (round: BenchResults['rounds'][number], scenario: string) => round.results.find((r) => r.scenario === scenario)!.cpuPerRequestUs.server;
    latest.rounds.forEach((round, i) => {
      const [atSample, none, all] = [serverCpu(round, ALLOWED), serverCpu(round, UNRECORDED), serverCpu(round, ALL_RECORDED)];
      expect(cost.costPercentAtSample.perRound[i]).toBeCloseTo((100 * (atSample - none)) / atSample, 9);
      expect(cost.serverCpuUsPerRecordedDecision!.perRound[i]).toBe(all - none);
      expect(cost.derivedCostPercentAtSample!.perRound[i]).toBeCloseTo((100 * 0.01 * (all - none)) / atSample, 9);
    });

    // The preview under load: every round previews the 2,000 newest records, copies of real ones
    // whose recorded answers are the live policy's, so the live artefact changes none of them.
    expect(summaryPart).toMatch(/^Preview under load at 4 connections \[Node 24\], 2 round\(s\): 2,000 recorded decisions asked for, status 200, 200, evaluated 2,000, 2,000, errors 0, 0; took /m);
    expect(summaryPart).toMatch(/^ {2}Execute in that window, per round, requests that completed while the preview ran \/ the rest: p50 /m);
    for (const round of latest.rounds) {
      const run = round.preview!;
      expect(run.windowSeconds).toBe(2);
      expect(run.preview).toMatchObject({ requested: 2000, status: 200, evaluated: 2000, errors: 0, allowToDeny: 0, denyToAllow: 0, truncated: false });
      expect(run.preview.unchanged).toBe(run.preview.decisions);
      expect(run.preview.seconds).toBeGreaterThan(0);
      expect(run.executeDuringPreview.requests + run.executeOutsidePreview.requests).toBeGreaterThan(0);
    }
    expect(latest.previews).toHaveLength(1);
    expect(latest.previews[0]).toMatchObject({ connections: 4, rounds: 2, requested: 2000, evaluated: [2000, 2000], errors: [0, 0], statuses: [200, 200] });
  }, 210_000);

  it('npm run bench:parts: every step of execute runs', async () => {
    const output = await runBench('bench/parts.ts', { BENCH_PARTS_CALLS: '300' }, 60_000);
    const rows = tableRows(output);
    expect(rows.map((r) => r[0])).toContain('whole execute (no HTTP)');
    for (const row of rows) expect(Number(row[1])).toBeGreaterThan(0);
  }, 70_000);

  it('npm run bench:policy: every row decides as expected', async () => {
    const output = await runBench('bench/policy.ts', { BENCH_POLICY_TIMED: '1000' }, 60_000);
    expect(tableRows(output)).toHaveLength(4);
  }, 70_000);
});
