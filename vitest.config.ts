import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

// Node's compile cache for the test processes and every process they start with this environment
// (servers, the command-line tool, the benchmarks): the type-stripped and compiled code of each module
// is kept on disk, so the hundreds of processes a run starts skip that work after the first (about a
// third of a server's start-up CPU; src/main.ts turns on the same cache for the server's own start).
process.env.NODE_COMPILE_CACHE ??= fileURLToPath(new URL('./node_modules/.cache/agentgate-compile/', import.meta.url));

// Two projects. `fast` is what `npm test` runs after the type check: every unit and integration test
// but SLOW, three or four minutes on a two-core machine. `slow` is `npm run test:slow`: the batteries
// that spend their time waiting on real time or real processes (Redis cut or frozen at every command
// of the approval flow, decisions raced against each other, ten thousand anonymous sign-ins, callers
// hammering the audit trail window after window, a webhook receiver that hangs and fails through its
// backoff, the guides walked in copies of the repository, the benchmarks end to end) and the tests
// that drive Chromium. Each of them took 10 to 80 s of a run that had to finish in four minutes.
// .ci/run runs both. `npx vitest run <file>` finds a file in either.
const SLOW = [
  'test/integration/browser.*.test.ts',
  'test/integration/security.approval-faults.test.ts',
  'test/integration/security.approval-races.test.ts',
  'test/integration/security.anonymous-cost.test.ts',
  'test/integration/audit.aggregation.test.ts',
  'test/integration/audit.webhook.test.ts',
  'test/integration/guides.test.ts',
  'test/integration/bench.smoke.test.ts',
  // The command-line tool driven end to end: each test runs the CLI as a process (a dozen of them
  // for some), against a server; a minute of a run, spent starting processes.
  'test/integration/cli.test.ts',
  // A test that names itself slow (test/integration/guides.slow.test.ts).
  'test/**/*.slow.test.ts',
];

export default defineConfig({
  test: {
    // Integration tests start throwaway Redis servers and a three-node Redis Cluster. A test that
    // starts agentgate processes sets its own, longer timeout (test/support/agentgate-process.ts).
    testTimeout: 20_000,
    projects: [
      { extends: true, test: { name: 'fast', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...SLOW] } },
      { extends: true, test: { name: 'slow', include: SLOW } },
    ],
  },
});
