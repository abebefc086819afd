// The plugin guide's whole walk, as written: plugins/README.md's new operator and its unit test
// added to a fresh copy of the repository, then `npm test` there, the whole suite with the operator
// loaded, then the operator deployed to a running server. It protects the guide's promise that a
// new operator keeps `npm test` green (no test counts the plugins a user may add). It runs the
// suite once more, so it is in the slow suite (`npm run test:slow`; vitest.config.ts), not in `npm test`.
import { describe, expect, it } from 'vitest';
import { NESTED_ENV, runGuide, systemNode } from '../support/guides.ts';

const WALK_TIMEOUT_MS = 30 * 60_000;
const node = systemNode();

describe(`the plugin guide's walk, ending in npm test, with the system's Node (${node.version}) first on the PATH`, () => {
  it('plugins/README.md: a new operator as the guide writes it keeps npm test green and loads on a running server', async (ctx) => {
    if (process.env[NESTED_ENV] === '1') ctx.skip('this is a guide\'s own `npm test`, started by the run that follows the guides');
    const run = await runGuide('plugins/README.md', { slow: true, timeoutMs: WALK_TIMEOUT_MS });
    expect(run.code, run.output).toBe(0);
    expect(run.stdout).toMatch(/^ends_with +plugin +ends_with\.ts +/m);
    expect(run.newUntracked).toEqual(expect.arrayContaining(['plugins/ends_with.ts', 'test/unit/ends_with.test.ts']));
  }, WALK_TIMEOUT_MS + 60_000);
});
