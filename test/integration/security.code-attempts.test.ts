// Guessing user codes on the approval page, in parallel (DESIGN §8: wrong codes are counted
// atomically in the store): a signed-in session looks up at most USER_CODE_SESSION_ATTEMPTS (5)
// wrong codes per window however many it sends at once, an address at most
// RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR however many sessions it spreads them over, and a right
// code gives the session's point back. "Looked up" is counted on the wire: a proxy between the
// server and Redis records every read of the code index (GET <prefix>ucode:{...}), so a lookup that
// slipped past a limit would show there even if the page said otherwise. Real Redis, each race run
// many times; every round comes from an address of its own (one proxy hop trusted, so
// X-Forwarded-For names it) and so starts with a full address budget.
import { randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USER_CODE_SESSION_ATTEMPTS } from '../../src/ratelimit/limits.ts';
import { signedInBrowser } from '../support/approval-pages.ts';
import { Client, http, type HttpResult } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import type { PersonBrowser } from '../support/person-browser.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startRedisProxy, type RedisProxy } from '../support/redis-proxy.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const ADDRESS_ATTEMPTS_PER_HOUR = 20;

let proxy: RedisProxy;
let server: TestServer;
let c: Client;
let round = 0;

beforeAll(async () => {
  proxy = await startRedisProxy(await redisUrlForTests());
  server = await startTestServer({
    store: 'redis',
    redisUrl: proxy.url,
    env: { INSECURE_DEV_SIGN_IN: 'true', RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR: String(ADDRESS_ATTEMPTS_PER_HOUR), TRUST_PROXY: '1' },
  });
  c = new Client(server);
});
afterAll(async () => {
  await server.close();
  await proxy.close();
});

/** An address of this round's own (documentation range 198.18.0.0/15), so earlier rounds spent none of its budget. */
const freshAddress = () => {
  round++;
  return `198.18.${Math.floor(round / 250)}.${(round % 250) + 1}`;
};

const ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
/** A code of the right shape that names no approval (so it is looked up, and found wanting). */
const wrongCode = () => {
  const letters = Array.from({ length: 8 }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
  return `${letters.slice(0, 4)}-${letters.slice(4)}`;
};

/** GET /device?user_code= as this browser, from `address`. */
function enterCode(browser: PersonBrowser, address: string, code: string): Promise<HttpResult> {
  return http('GET', c.url(`/device?user_code=${encodeURIComponent(code)}`), { headers: { cookie: browser.cookie, 'x-forwarded-for': address, accept: 'text/html' } });
}

/**
 * Reads of the code index since `proxy.reset()`: the lookups the server actually made. A lookup is
 * recorded when the proxy passes it to Redis, before its answer comes back, so every lookup behind
 * an answer the test holds is counted.
 */
const lookups = () => proxy.commands.filter((command) => command.name === 'GET' && command.key?.startsWith(`${server.config.REDIS_KEY_PREFIX}ucode:`)).length;

const wasLookedUp = (res: HttpResult) => res.status === 400 && res.text.includes('That code is not valid');
function expectTooMany(res: HttpResult, context: string) {
  expect(res.status, `${context}: ${res.status} ${res.text.slice(0, 300)}`).toBe(429);
  expect(res.text).toContain('Too many wrong codes');
  expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
}

describe('wrong user codes sent in parallel (Redis)', () => {
  it('15 parallel wrong codes from one session look up at most 5; the 6th and later get 429 rate_limited, and so does the next one', async () => {
    for (let i = 0; i < 25; i++) {
      const address = freshAddress();
      const { browser } = await signedInBrowser(server.baseUrl, `Guesser ${round}`);
      proxy.reset();
      const answers = await Promise.all(Array.from({ length: 15 }, () => enterCode(browser, address, wrongCode())));
      const next = await enterCode(browser, address, wrongCode());
      const context = `round ${i}: ${answers.map((a) => a.status).join(',')}`;
      expect(lookups(), context).toBeLessThanOrEqual(USER_CODE_SESSION_ATTEMPTS);
      expect(answers.filter(wasLookedUp).length, context).toBe(lookups());
      // Exactly the limit went through (nothing else refused them), every other one was told to wait.
      expect(lookups(), context).toBe(USER_CODE_SESSION_ATTEMPTS);
      for (const answer of answers.filter((a) => !wasLookedUp(a))) expectTooMany(answer, context);
      expectTooMany(next, `${context}; the next one`);
      expect(lookups(), `${context}; the next one was looked up`).toBe(USER_CODE_SESSION_ATTEMPTS);
    }
  }, 60_000);

  it(`the per-address limit (RATE_LIMIT_USER_CODE_ATTEMPTS_PER_HOUR=${ADDRESS_ATTEMPTS_PER_HOUR}) holds when five sessions guess in parallel from one address, and the next session is refused too`, async () => {
    for (let i = 0; i < 12; i++) {
      const address = freshAddress();
      // Five sessions, each within its own allowance (5 wrong codes), 25 guesses in all from one address.
      const browsers = await Promise.all(Array.from({ length: 5 }, (_, n) => signedInBrowser(server.baseUrl, `Crowd ${round}-${n}`).then((b) => b.browser)));
      const latecomer = (await signedInBrowser(server.baseUrl, `Latecomer ${round}`)).browser;
      proxy.reset();
      const answers = await Promise.all(browsers.flatMap((browser) => Array.from({ length: USER_CODE_SESSION_ATTEMPTS }, () => enterCode(browser, address, wrongCode()))));
      const next = await enterCode(latecomer, address, wrongCode());
      const context = `round ${i}: ${answers.map((a) => a.status).join(',')}`;
      expect(lookups(), context).toBeLessThanOrEqual(ADDRESS_ATTEMPTS_PER_HOUR);
      expect(answers.filter(wasLookedUp).length, context).toBe(lookups());
      expect(lookups(), context).toBe(ADDRESS_ATTEMPTS_PER_HOUR);
      for (const answer of answers.filter((a) => !wasLookedUp(a))) expectTooMany(answer, context);
      // A session that tried nothing yet is still refused from this address: the address's budget is spent.
      expectTooMany(next, `${context}; a new session from the same address`);
      expect(lookups(), `${context}; the new session's guess was looked up`).toBe(ADDRESS_ATTEMPTS_PER_HOUR);
    }
  }, 60_000);

  it("a right code does not use up the session's allowance: after 10 lookups of a right code, 5 wrong ones sent in parallel are all looked up, and only the 6th is refused", async () => {
    for (let i = 0; i < 12; i++) {
      const address = freshAddress();
      const { res } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
      const userCode = res.json.approval.user_code as string;
      const { browser } = await signedInBrowser(server.baseUrl, `Right ${round}`);
      // One after the other, as a person reloads the page: each spends a point before the lookup and
      // gets it back after (so parallel lookups of a right code can be refused while in flight).
      for (let n = 0; n < 10; n++) {
        const right = await enterCode(browser, address, userCode);
        expect(right.status, `round ${i}, right code ${n}: ${right.text.slice(0, 300)}`).toBe(200);
        expect(right.text).toContain('Allow this agent?');
      }
      proxy.reset();
      const wrongs = await Promise.all(Array.from({ length: USER_CODE_SESSION_ATTEMPTS }, () => enterCode(browser, address, wrongCode())));
      expect(wrongs.map((w) => w.status), `round ${i}`).toEqual(wrongs.map(() => 400));
      expect(lookups(), `round ${i}`).toBe(USER_CODE_SESSION_ATTEMPTS);
      expectTooMany(await enterCode(browser, address, wrongCode()), `round ${i}: the 6th wrong code`);
      // Refused before the lookup, and the right code is refused now as well: the allowance is gone.
      expect(lookups(), `round ${i}`).toBe(USER_CODE_SESSION_ATTEMPTS);
      expectTooMany(await enterCode(browser, address, userCode), `round ${i}: the right code after the allowance is spent`);
    }
  }, 60_000);
});
