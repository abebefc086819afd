// The store contract's part for the HostEnrollments role (src/store/store.ts), run by storeContract
// (store.contract.ts) on the memory store, Redis and Redis Cluster, as a describe block of its own
// like every other role's: an enrollment is kept whole under its token hash and never overwritten,
// is bound to a host exactly once however many callers race, keeps its expiry when bound, and is
// forgotten when its time to be kept has passed. The service's rules on top (the hour, the day, the
// errors) are tested over HTTP in people.host-enrollment.test.ts.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EnrollmentRecord } from '../../src/domain/types.ts';
import type { StoreUnderTest } from './store.contract.ts';

const DAY_MS = 24 * 3600 * 1000;
/** Long enough to read an enrollment back on a busy machine, short enough to watch it go. */
const SHORT_RETAIN_MS = 2000;

/** A token hash as the service makes one: SHA-256, base64url. */
const tokenHash = () => randomBytes(32).toString('base64url');

function enrollmentFixture(overrides: Partial<EnrollmentRecord> = {}): EnrollmentRecord {
  const nowMs = Date.now();
  return {
    id: `enr_${randomBytes(16).toString('base64url')}`,
    personId: 'https://idp.example/{odd}|person with spaces',
    name: 'build runner ✓',
    defaultCapabilities: ['echo', 'weather_lookup'],
    tokenHash: tokenHash(),
    createdAtMs: nowMs,
    expiresAtMs: nowMs + 3600 * 1000,
    state: 'pending',
    ...overrides,
  };
}

/** Polls `read` until it answers null, for at most `withinMs`: expiry runs on the store's own clock. */
async function forgottenWithin(read: () => Promise<unknown>, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  while ((await read()) !== null) {
    if (Date.now() > deadline) throw new Error(`still there after ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function enrollmentContract(current: () => StoreUnderTest): void {
  describe('HostEnrollments', () => {
    const store = () => current().store;

    it('an enrollment is kept whole under its token hash, and no other hash finds it', async () => {
      const enrollment = enrollmentFixture();
      expect(await store().findEnrollment(enrollment.tokenHash)).toBeNull();
      expect(await store().createEnrollment(enrollment, DAY_MS)).toBe(true);
      expect(await store().findEnrollment(enrollment.tokenHash)).toEqual(enrollment);
      expect(await store().findEnrollment(tokenHash())).toBeNull();
      // A value that cannot be a key's hash tag was never stored, and is not found (nor bound).
      expect(await store().findEnrollment('a{b}c')).toBeNull();
      expect(await store().completeEnrollment('a{b}c', 'hst_x', Date.now())).toBe('not_found');
    });

    it('an enrollment is never overwritten: a second create under one hash answers false and changes nothing', async () => {
      const enrollment = enrollmentFixture();
      expect(await store().createEnrollment(enrollment, DAY_MS)).toBe(true);
      expect(await store().createEnrollment({ ...enrollment, personId: 'someone else', defaultCapabilities: ['transfer_money'] }, DAY_MS)).toBe(false);
      expect(await store().findEnrollment(enrollment.tokenHash)).toEqual(enrollment);
    });

    it('a pending enrollment is bound to a host once; binding it again answers not_pending and keeps the first host; an unknown hash is not_found', async () => {
      const enrollment = enrollmentFixture();
      await store().createEnrollment(enrollment, DAY_MS);
      const atMs = enrollment.createdAtMs + 60_000;
      expect(await store().completeEnrollment(enrollment.tokenHash, 'hst_first', atMs)).toBe('enrolled');
      expect(await store().completeEnrollment(enrollment.tokenHash, 'hst_second', atMs + 1)).toBe('not_pending');
      expect(await store().findEnrollment(enrollment.tokenHash)).toEqual({ ...enrollment, state: 'enrolled', hostId: 'hst_first', enrolledAtMs: atMs });
      expect(await store().completeEnrollment(tokenHash(), 'hst_third', atMs)).toBe('not_found');
    });

    it('of many binds at once with one token hash, exactly one wins', async () => {
      const enrollment = enrollmentFixture();
      await store().createEnrollment(enrollment, DAY_MS);
      const peer = await (current().peer?.() ?? Promise.resolve(store()));
      const outcomes = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? store() : peer).completeEnrollment(enrollment.tokenHash, `hst_${i}`, Date.now())));
      expect(outcomes.filter((o) => o === 'enrolled')).toHaveLength(1);
      expect(outcomes.filter((o) => o === 'not_pending')).toHaveLength(11);
      const winner = `hst_${outcomes.indexOf('enrolled')}`;
      expect((await store().findEnrollment(enrollment.tokenHash))?.hostId).toBe(winner);
    });

    it('an enrollment is forgotten once its time to be kept has passed, bound or not (binding keeps its expiry)', async () => {
      const pending = enrollmentFixture();
      const bound = enrollmentFixture();
      await store().createEnrollment(pending, SHORT_RETAIN_MS);
      expect(await store().findEnrollment(pending.tokenHash)).not.toBeNull();
      await store().createEnrollment(bound, SHORT_RETAIN_MS);
      expect(await store().completeEnrollment(bound.tokenHash, 'hst_bound', Date.now())).toBe('enrolled');
      await forgottenWithin(() => store().findEnrollment(pending.tokenHash), 10_000);
      await forgottenWithin(() => store().findEnrollment(bound.tokenHash), 10_000);
      expect(await store().completeEnrollment(pending.tokenHash, 'hst_late', Date.now())).toBe('not_found');
    });
  });
}
