// `npm run bench:parts`: what each step of the execute path costs in CPU, in process, without HTTP
// or a load generator competing for the cores. Starts agentgate's app on a real Redis (as the
// integration tests do), provisions one agent with a constrained grant, and runs each step 32 at a
// time, the way concurrent requests interleave. CPU is this process's, all threads (the libuv pool
// included), per call; Redis's own CPU is not counted. BENCH_PARTS_CALLS sets the calls per row.
import { KeyObject, randomUUID } from 'node:crypto';
import { cpus } from 'node:os';
import { compactVerify, importJWK } from 'jose';
import { loadSodium, nodeCryptoVerifier, sodiumVerifier } from '../src/auth/ed25519-verify.ts';
import { decodeJwt, verifySignature } from '../src/auth/jwt.ts';
import { KeyImporter } from '../src/auth/keys.ts';
import { systemClock } from '../src/common/clock.ts';
import { executeCapability } from '../src/services/execute.ts';
import { Client } from '../test/support/client.ts';
import { startTestServer } from '../test/support/server.ts';
import { presign } from './jwt.ts';

const CALLS = Number(process.env.BENCH_PARTS_CALLS ?? 40_000);
const IN_FLIGHT = 32;
const CONSTRAINED = { name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } } };
const ARGUMENTS = { amount: 250, currency: 'USD' };

// Budgets high enough that no row is refused: the rows spend the agent's budget ~240,000 times.
const server = await startTestServer({ store: 'redis', env: { RATE_LIMIT_AGENT_PER_MINUTE: '10000000', RATE_LIMIT_HOST_PER_MINUTE: '10000000' } });
try {
  const agent = await new Client(server).activeAgent([CONSTRAINED]);
  const deps = { ...server.app.deps, clock: systemClock };
  const audience = server.config.executeUrl;
  const signer = [{ id: agent.id, privateKey: KeyObject.from(agent.key.privateKey as Parameters<typeof KeyObject.from>[0]), hostThumbprint: agent.host.thumbprint }];
  const snapshot = (await deps.store.getAgent(agent.id))!;
  const key = await deps.keys.put(snapshot.agent);
  const roundTrip = (counters: boolean) => {
    const budgets = counters ? deps.limits.callerSpend(agent.id, key.hostId, 1) : null;
    return deps.store.executeRoundTrip({
      agentId: agent.id, keyVersion: key.keyVersion, jti: randomUUID(), jtiTtlMs: 120_000, capabilities: [CONSTRAINED.name],
      nowMs: Date.now(), sessionTtlMs: 3_600_000, counters: budgets?.counters ?? [],
    }).then(async (result) => {
      if (budgets) await budgets.verdict(result.kind === 'ok' ? result.counts : undefined);
      return result;
    });
  };
  // The same key on each Ed25519 backend, and as the WebCrypto key jose verified with before execute moved to libsodium.
  const sodium = loadSodium();
  const keyOn = async (importer: KeyImporter) => importer.import(snapshot.agent.publicJwk);
  const nodeKey = await keyOn(new KeyImporter(nodeCryptoVerifier()));
  const sodiumKey = 'sodium' in sodium ? await keyOn(new KeyImporter(sodiumVerifier(sodium.sodium))) : null;
  const webCryptoKey = await importJWK({ ...snapshot.agent.publicJwk }, 'EdDSA');
  const budgets = () => Promise.all([deps.limits.consume('agent', agent.id), deps.limits.consume('host', key.hostId)]);

  /** Runs `step` CALLS times, IN_FLIGHT at once; returns CPU µs per call and calls per second. */
  async function measure(step: (i: number) => unknown): Promise<[number, number]> {
    let next = 0;
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (next < CALLS) await step(next++);
    }));
    const cpu = process.cpuUsage(cpuBefore);
    return [(cpu.user + cpu.system) / CALLS, CALLS / ((performance.now() - started) / 1000)];
  }

  const rows: Array<[string, (i: number) => unknown]> = [
    ['JWT precheck (decode, claims)', (i) => deps.agentAuth.precheck(tokens[i]!, [audience, server.config.issuer])],
    ...(sodiumKey ? [['signature verification (libsodium, as shipped where it loads)', (i: number) => verifySignature(decoded[i]!, sodiumKey)] as [string, (i: number) => unknown]] : []),
    ['signature verification (node:crypto, the fallback)', (i) => verifySignature(decoded[i]!, nodeKey)],
    ['signature verification (jose on WebCrypto, as shipped before libsodium)', (i) => compactVerify(tokens[i]!, webCryptoKey, { algorithms: ['EdDSA'] })],
    ['execute script round trip, decoded, no budgets', () => roundTrip(false)],
    ['agent and host budgets through rate-limiter-flexible (the other endpoints)', budgets],
    ['execute script spending the budgets as counters (execute\'s one command)', () => roundTrip(true)],
    ['policy decision (2 constraints)', () => deps.policy.decideExecute({
      now_ms: Date.now(), agent: { id: agent.id, mode: 'delegated', host_id: key.hostId }, capability: CONSTRAINED.name,
      arguments: ARGUMENTS, grants: [{ id: 'grt_bench', constraints: CONSTRAINED.constraints }],
    })],
    // Only executes whose grants use a plugin operator pay this: one message round trip to a worker.
    // The sandbox runs one batch per agent at a time, so the calls in flight come from as many agents.
    ['plugin operator in the sandbox (regex, worker round trip)', (i) => deps.pluginSandbox.evaluate(
      [{ name: 'regex', operand: '^[A-Z]{3}$', actual: 'USD', grantIds: [`grt_bench_${i % IN_FLIGHT}`] }], `agt_bench_${i % IN_FLIGHT}`,
    )],
    ['whole execute (no HTTP)', (i) => executeCapability(deps, tokens[i]!, { capability: CONSTRAINED.name, arguments: ARGUMENTS })],
  ];
  // Every row that verifies or executes needs fresh tokens; a warm-up pass runs each row once first.
  let tokens = presign(signer, CALLS, audience);
  let decoded = tokens.map((t) => decodeJwt(t, 'agent+jwt'));
  const lines = [
    `Machine: ${cpus()[0]?.model.trim() || 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}; ${CALLS} calls per row, ${IN_FLIGHT} in flight.`,
    '',
    '| step | CPU µs/call | calls/s |',
    '|---|---|---|',
  ];
  // The test server's clock stands still; bring it to now after signing, so the tokens are current.
  const freshTokens = () => {
    tokens = presign(signer, CALLS, audience);
    decoded = tokens.map((t) => decodeJwt(t, 'agent+jwt'));
    server.clock.set(Date.now());
  };
  for (const [label, step] of rows) {
    freshTokens();
    await measure(step);
    freshTokens();
    const [cpuUs, perSecond] = await measure(step);
    lines.push(`| ${label} | ${cpuUs.toFixed(1)} | ${Math.round(perSecond)} |`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await server.close();
}
