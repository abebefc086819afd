// How long a CIBA registration takes to answer when its login_hint names a person, and when it names
// nobody: services/approvals/ciba.ts claims the two cost the same on the request path (one lookup,
// the same budgets), with the inbox write and the notice after the answer. This measures it, from
// the client, on a real server with a real webhook channel: the two kinds take turns, each from a
// host new to the server, with the JWTs signed before the clock starts. Reported as medians and
// percentiles; it asserts nothing (a timing difference is for a person to judge, not for a test).
//
//   node bench/ciba-hint-timing.ts            (memory store; REDIS_URL=redis://… for Redis)
//   CIBA_TIMING_ROUNDS=400 node bench/ciba-hint-timing.ts
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '../test/support/client.ts';
import { newEd25519 } from '../test/support/keys.ts';
import { PersonBrowser } from '../test/support/person-browser.ts';
import { startTestServer } from '../test/support/server.ts';

const ROUNDS = Number(process.env.CIBA_TIMING_ROUNDS ?? 300);
/** Registrations before the measured ones, so both paths run warm. */
const WARM_UP = 30;

/** The nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

async function main(): Promise<void> {
  let notices = 0;
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      notices++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const redisUrl = process.env.REDIS_URL;
  const server = await startTestServer({
    store: redisUrl ? 'redis' : 'memory',
    ...(redisUrl ? { redisUrl } : {}),
    env: {
      INSECURE_DEV_SIGN_IN: 'true',
      APPROVAL_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`,
      APPROVAL_WEBHOOK_SECRET: 'ciba-timing-bench-secret-0123456789abcdef',
      RATE_LIMIT_CIBA_PER_PERSON_PER_HOUR: '10000000',
      RATE_LIMIT_CIBA_PER_HOST_PER_HOUR: '10000000',
      RATE_LIMIT_REGISTRATIONS_PER_HOUR: '10000000',
      RATE_LIMIT_UNKNOWN_HOST_REGISTRATIONS_PER_HOUR: '10000000',
      AGENTS_PER_UNLINKED_HOST_MAX: '100',
      PENDING_AGENTS_PER_HOST_MAX: '100',
    },
  });
  try {
    const client = new Client(server);
    const person = new PersonBrowser(server.baseUrl);
    await person.signIn('timing-bench-person');
    const knownHint = 'dev|timing-bench-person';
    const times: Record<'known' | 'unknown', number[]> = { known: [], unknown: [] };
    for (let i = 0; i < WARM_UP + ROUNDS; i++) {
      // Alternating which goes first, so drift in the machine's load lands on both alike.
      const order: Array<'known' | 'unknown'> = i % 2 === 0 ? ['known', 'unknown'] : ['unknown', 'known'];
      for (const kind of order) {
        const host = await newEd25519();
        const token = await client.hostToken(host, { agentKey: await newEd25519() });
        const body = JSON.stringify({
          name: 'timing probe', mode: 'delegated', capabilities: ['echo'], preferred_method: 'ciba',
          login_hint: kind === 'known' ? knownHint : `nobody-${i}@example.invalid`, binding_message: 'Probe',
        });
        const startedMs = performance.now();
        const res = await fetch(client.url('/agent/register'), {
          method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(10_000),
        });
        const json = (await res.json()) as { approval?: { method?: string } };
        const ms = performance.now() - startedMs;
        if (res.status !== 200 || json.approval?.method !== 'ciba') throw new Error(`unexpected answer ${res.status} ${JSON.stringify(json)}`);
        if (i >= WARM_UP) times[kind].push(ms);
      }
    }
    console.log(`CIBA registration latency, ${ROUNDS} of each, ${redisUrl ? 'Redis' : 'memory store'} (ms; client-side, JWTs signed beforehand):`);
    for (const kind of ['known', 'unknown'] as const) {
      const sorted = [...times[kind]].sort((a, b) => a - b);
      console.log(`  ${kind.padEnd(7)} p10 ${percentile(sorted, 10).toFixed(2)}  median ${percentile(sorted, 50).toFixed(2)}  p90 ${percentile(sorted, 90).toFixed(2)}  p99 ${percentile(sorted, 99).toFixed(2)}`);
    }
    const median = (kind: 'known' | 'unknown') => percentile([...times[kind]].sort((a, b) => a - b), 50);
    console.log(`  median known ÷ unknown: ${(median('known') / median('unknown')).toFixed(3)}; notices sent: ${notices} (the known ones only)`);
  } finally {
    await server.close();
    receiver.close();
  }
}

await main();
