// A preview runs in a child process of its own (src/policy/candidate-runner.ts says why), and on the
// Redis store that process reads the recorded decisions itself, on a connection of its own. The
// guarantees: the process and every thread in it run at the lowest priority; it is stopped with its
// preview at the deadline, and never outlives the process that started it, even while a candidate
// spins in wasm; the server's own connection reads none of the records; and a stream the preview's
// process cannot reach is 503 service_unavailable, the cause logged and not shown.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { CandidatePolicies, CandidateTimeoutError } from '../../src/policy/candidates.ts';
import type { DecisionRecord } from '../../src/policy/decision-records.ts';
import { createLogger, silentLogger } from '../../src/logger.ts';
import { Client, code, http } from '../support/client.ts';
import { FIXTURES_DIR } from '../support/policies.ts';
import { ADMIN_TOKEN, testServerForBlock } from '../support/server.ts';

const ROOT = path.resolve(fileURLToPath(import.meta.url), '../../..');
const artefact = (name: string) => readFileSync(path.join(FIXTURES_DIR, `${name}.wasm`));

/** An allowed execute the deny fixture (a maintenance window) refuses. */
function allowedExecute(i: number): DecisionRecord {
  return {
    at: '2026-01-01T00:00:00.000Z',
    entrypoint: 'agentgate/execute',
    sha256: 'a'.repeat(64),
    input: { now_ms: 1_767_225_600_000, agent: { id: `agt_${i}`, mode: 'delegated', host_id: 'hst_a' }, capability: 'echo', arguments: {}, grants: [{ id: 'grt_1', constraints: null }] },
    output: { allow: true, grant_id: 'grt_1', violations: [] },
  };
}

/** The `stat` fields of a process or thread after its name: [state, ppid, ...]; field n of proc(5) is at n - 3. */
function statFields(file: string): string[] | null {
  try {
    const stat = readFileSync(file, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** The candidate worker processes `parent` started (found through /proc: this suite runs on Linux). */
function candidateProcesses(parent: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(`/proc/${entry}/stat`);
    if (fields === null || Number(fields[1]) !== parent) continue;
    let commandLine = '';
    try {
      commandLine = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (commandLine.includes('candidate-process')) found.push(Number(entry));
  }
  return found;
}

const alive = (pid: number) => statFields(`/proc/${pid}/stat`)?.[0] !== undefined && statFields(`/proc/${pid}/stat`)?.[0] !== 'Z';

/** Waits, polling and bounded, until `condition` holds. */
const until = (what: string, condition: () => boolean, timeoutMs = 10_000) => expect.poll(condition, { message: what, timeout: timeoutMs, interval: 20 }).toBe(true);

async function* onePage(records: readonly DecisionRecord[]): AsyncGenerator<readonly DecisionRecord[]> {
  yield records;
}

const opened: CandidatePolicies[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((candidates) => candidates.close()));
});

function candidatePolicies(previewTimeoutMs = 20_000): CandidatePolicies {
  const candidates = new CandidatePolicies({ shadowQueueMax: 10, previewTimeoutMs, onDisagreement: () => {}, logger: silentLogger });
  opened.push(candidates);
  return candidates;
}

describe('a preview in a process of its own', () => {
  it('runs outside this process, with every thread of it at the lowest priority (nice 19)', async () => {
    // Another test file's candidates may have run in this process before; only the new one is this test's.
    const before = candidateProcesses(process.pid);
    const candidates = candidatePolicies();
    const report = await candidates.preview(artefact('deny'), onePage([allowedExecute(1), allowedExecute(2)]));
    expect(report).toMatchObject({ evaluated: 2, allow_to_deny: 2 });
    const [worker, ...others] = candidateProcesses(process.pid).filter((pid) => !before.includes(pid));
    expect(worker).toBeDefined();
    expect(others).toEqual([]);
    const threads = readdirSync(`/proc/${worker}/task`);
    expect(threads.length).toBeGreaterThan(1);
    // proc(5): field 19 is the nice value.
    for (const thread of threads) expect(statFields(`/proc/${worker}/task/${thread}/stat`)?.[16]).toBe('19');
  });

  it('the attack of a candidate reading the server\'s secrets: its process gets none of the server\'s environment', async () => {
    const before = candidateProcesses(process.pid);
    process.env.AGENTGATE_TEST_SECRET = 'the-admin-token-of-this-test';
    try {
      const candidates = candidatePolicies();
      await candidates.preview(artefact('deny'), onePage([allowedExecute(1)]));
      const [worker] = candidateProcesses(process.pid).filter((pid) => !before.includes(pid));
      const environment = readFileSync(`/proc/${worker}/environ`, 'utf8').split('\0').map((entry) => entry.split('=')[0]);
      expect(environment).not.toContain('AGENTGATE_TEST_SECRET');
      // What the runner passes, and what Node adds for the IPC channel itself.
      const passed = ['', 'PATH', 'TZ', 'NODE_COMPILE_CACHE', 'NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'NODE_CHANNEL_FD', 'NODE_CHANNEL_SERIALIZATION_MODE'];
      expect(environment.filter((name) => !passed.includes(name!))).toEqual([]);
    } finally {
      delete process.env.AGENTGATE_TEST_SECRET;
    }
  });

  it('a candidate that spins is stopped with its process at the deadline, and the next preview starts another', async () => {
    const before = candidateProcesses(process.pid);
    const ours = () => candidateProcesses(process.pid).filter((pid) => !before.includes(pid));
    // Generous, so that a loaded machine still loads the candidate in time and the spin is what is stopped.
    const candidates = candidatePolicies(4000);
    const spin = { ...allowedExecute(1), input: { ...allowedExecute(1).input, capability: 'spin' } };
    const spinning = candidates.preview(artefact('spin'), onePage([spin]));
    await until('the preview process started', () => ours().length === 1);
    const [stopped] = ours();
    await expect(spinning).rejects.toBeInstanceOf(CandidateTimeoutError);
    // SIGKILL, so gone at once; the poll only waits for the kernel to say so.
    await until('the stopped process gone', () => !alive(stopped!));
    await expect(candidates.preview(artefact('deny'), onePage([allowedExecute(1)]))).resolves.toMatchObject({ allow_to_deny: 1 });
    expect(ours()).toHaveLength(1);
    expect(ours()).not.toContain(stopped);
  });

  it('the attack of a crash mid-preview: a worker spinning in wasm does not outlive the process that started it', async () => {
    // A process of its own starts a preview of the spinning candidate, reports its worker's pid once
    // the spin has begun, and is killed outright, as a crash or an OOM kill would end the server.
    const script = `
      import { readFileSync, readdirSync } from 'node:fs';
      import { CandidatePolicies } from ${JSON.stringify(path.join(ROOT, 'src/policy/candidates.ts'))};
      import { silentLogger } from ${JSON.stringify(path.join(ROOT, 'src/logger.ts'))};
      const candidates = new CandidatePolicies({ shadowQueueMax: 10, previewTimeoutMs: 600000, onDisagreement: () => {}, logger: silentLogger });
      const records = (one) => (async function* () { yield [one]; })();
      const workerCpu = () => {
        for (const entry of readdirSync('/proc')) {
          try {
            const stat = readFileSync('/proc/' + entry + '/stat', 'utf8');
            const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
            if (Number(fields[1]) === process.pid && readFileSync('/proc/' + entry + '/cmdline', 'utf8').includes('candidate-process')) {
              return { pid: entry, ticks: Number(fields[11]) + Number(fields[12]) };
            }
          } catch {}
        }
        return null;
      };
      // A whole preview first, in the same process (it is kept for the next): its CPU is what
      // starting and loading cost, so CPU beyond it is the spin's.
      await candidates.preview(readFileSync(${JSON.stringify(path.join(FIXTURES_DIR, 'deny.wasm'))}), records(${JSON.stringify(allowedExecute(1))}));
      const baseline = workerCpu();
      void candidates.preview(readFileSync(${JSON.stringify(path.join(FIXTURES_DIR, 'spin.wasm'))}), records(${JSON.stringify({ ...allowedExecute(1), input: { ...allowedExecute(1).input, capability: 'spin' } })}));
      // Its pid once it has spun for 0.3 s of CPU beyond that (or, on a machine too loaded to give
      // it that, after 5 s: it is killed wherever it is then).
      const startedAt = Date.now();
      const timer = setInterval(() => {
        const now = workerCpu();
        if (now !== null && (now.ticks > baseline.ticks + 30 || Date.now() - startedAt > 5000)) {
          clearInterval(timer);
          process.stdout.write(now.pid + '\\n');
        }
      }, 50);
    `;
    const starter = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    starter.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    // A whole preview, then the spin's 0.3 s of CPU or 5 s: on a loaded machine, at nice 19, that can take a while.
    await until('the worker spinning', () => output.endsWith('\n'), 25_000);
    const worker = Number(output.trim());
    expect(alive(worker)).toBe(true);
    starter.kill('SIGKILL');
    await until('the spinning worker gone', () => !alive(worker));
  }, 40_000);
});

describe('a preview on the Redis store', () => {
  const logLines: string[] = [];
  const server = testServerForBlock(() => ({ store: 'redis', env: { DECISION_LOG_SAMPLE: '1' }, logger: createLogger('info', (line) => logLines.push(line)) }));
  const c = new Client(server);
  const preview = () => http('POST', c.url('/admin/policy/preview'), { token: ADMIN_TOKEN, body: artefact('deny'), headers: { 'content-type': 'application/wasm' } });

  it('reads the recorded decisions in its own process: the server\'s connection reads none of them', async () => {
    const agent = await c.activeAgent(['echo']);
    for (let i = 0; i < 3; i++) expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    const store = server.store;
    await server.app.deps.decisions.flush();
    const stored = await store.readDecisionRecords(1000);
    const read = store.readDecisionRecords.bind(store);
    store.readDecisionRecords = () => Promise.reject(new Error('the server read the recorded decisions itself'));
    try {
      const res = await preview();
      expect(res.status).toBe(200);
      // Every stored record (the registration's grants decisions and the three executes) was read
      // and evaluated in the preview's process; the three executes are what the candidate refuses.
      expect(res.json).toMatchObject({ evaluated: stored.length, allow_to_deny: 3, errors: { count: 0 } });
    } finally {
      store.readDecisionRecords = read;
    }
  });

  it('a stream that answers with an error is 500 internal_error, not an outage', async () => {
    const store = server.store;
    const real = store.decisionStreamAddress()!;
    const address = store.decisionStreamAddress.bind(store);
    const url = 'url' in real.redis ? real.redis.url : undefined;
    if (url === undefined) throw new Error('the test server uses one Redis');
    // A key that is not a stream: Redis answers WRONGTYPE, which is not the store being unreachable.
    const notAStream = `${real.streamKey}:not-a-stream`;
    const raw = new Redis(url);
    await raw.set(notAStream, 'x');
    store.decisionStreamAddress = () => ({ ...real, streamKey: notAStream });
    try {
      expect(code(await preview())).toBe('500 internal_error');
    } finally {
      store.decisionStreamAddress = address;
      await raw.del(notAStream);
      raw.disconnect();
    }
  });

  it('a stream its process cannot reach is 503 service_unavailable; the cause goes to the log, not to the caller', async () => {
    const store = server.store;
    const address = store.decisionStreamAddress.bind(store);
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    store.decisionStreamAddress = () => ({ redis: { url: 'redis://127.0.0.1:1' }, streamKey: 'ag:test:decisions' });
    try {
      const res = await preview();
      expect(code(res)).toBe('503 service_unavailable');
      expect(JSON.stringify(res.json)).not.toContain('127.0.0.1:1');
      expect(logLines.some((line) => line.includes('the preview could not read the recorded decisions') && line.includes('ECONNREFUSED'))).toBe(true);
    } finally {
      store.decisionStreamAddress = address;
    }
  });
});
