// The benchmarks keep working: each one runs end to end for a moment, and the
// load benchmark's answers are exactly the intended ones. No speed is asserted here; speed lives in
// the benchmarks' own output (bench/RESULTS.md), never in a timed test.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
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

/** The markdown table rows of a benchmark's output, as cells. */
const tableRows = (output: string) =>
  output.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| scenario') && !line.startsWith('| step') && !line.startsWith('| agentgate'))
    .map((line) => line.split('|').slice(1, -1).map((cell) => cell.trim()));

describe('benchmarks run end to end', () => {
  it('npm run bench: baseline, floor and the execute scenarios, with only the intended non-2xx answers', async () => {
    // Tokens for 20,000 requests a second: more than this suite's machines serve, so none repeats
    // outside the replay scenario.
    const output = await runBench('bench/run.ts', {
      BENCH_DURATION_SECONDS: '1', BENCH_CONNECTIONS: '4', BENCH_TOKENS_PER_SECOND: '20000', BENCH_RESULTS_FILE: path.join(scratch, 'latest.json'),
    }, 80_000);
    const rows = tableRows(output);
    expect(rows.map((r) => r[0])).toEqual([
      'baseline: bare Express JSON POST [Node 24]',
      'floor: bare Express JSON POST + one Ed25519 verification (libsodium) [Node 24]',
      'execute: allowed, constrained grant [Node 24]',
      'execute: constraint violated (403 expected) [Node 24]',
      'execute: allowed with 5% replays (401 expected) [Node 24]',
      'execute: batch of 10 allowed calls (10 executes per request) [Node 24]',
    ]);
    const [baseline, floor, allowed, violated, replayed, batched] = rows.map((r) => ({ ok: Number(r[5]), non2xx: Number(r[6]), errors: Number(r[7]) }));
    for (const row of [baseline, floor, allowed, violated, replayed, batched]) expect(row!.errors).toBe(0);
    // The bench checked one batch's items all completed before its window; every batch then answers 200.
    expect(batched!.ok).toBeGreaterThan(0);
    expect(batched!.non2xx).toBe(0);
    expect(output).toMatch(/Batch of 10 at 4 connections: \d+ executes\/s, [\d.]+ × single execute/);
    expect(baseline!.non2xx).toBe(0);
    // The floor verifies every token it gets: all of them are genuine.
    expect(floor!.ok).toBeGreaterThan(0);
    expect(floor!.non2xx).toBe(0);
    expect(allowed!.ok).toBeGreaterThan(0);
    expect(allowed!.non2xx).toBe(0);
    expect(violated!.ok).toBe(0);
    expect(violated!.non2xx).toBeGreaterThan(0);
    // Every 20th token after the first hundred repeats an earlier one.
    expect(replayed!.ok).toBeGreaterThan(0);
    if (replayed!.ok + replayed!.non2xx > 200) expect(replayed!.non2xx).toBeGreaterThan(0);
  }, 90_000);

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
