// The Redis store's enrollments (the HostEnrollments role of store.ts): one hash per enrollment,
// under a key tagged by its token's SHA-256 (keys.ts hostEnrollment), one field per record field
// (records.ts ENROLLMENT_FIELDS), with an expiry that is its clean-up. Every call touches that one
// key; creating it (with its expiry) and binding it to a host are scripts on it (scripts.ts), so each
// is atomic on a single Redis and on a Cluster alike.
import type { EnrollmentRecord } from '../../domain/types.ts';
import { assertFiniteMs, isTaggable, normalizeTtlMs } from '../checks.ts';
import { ENROLLMENT_FIELDS } from '../records.ts';
import type { EnrollmentCompletion, HostEnrollments } from '../store.ts';
import { compileTable, decodeFlatHash, encodeHash } from './field-codec.ts';
import { RedisRole } from './parts.ts';

const ENROLLMENT = compileTable(ENROLLMENT_FIELDS);

export class RedisHostEnrollments extends RedisRole implements HostEnrollments {
  async createEnrollment(enrollment: EnrollmentRecord, retainMs: number): Promise<boolean> {
    if (!isTaggable(enrollment.tokenHash)) throw new Error('an enrollment token hash must be taggable');
    const key = this.redis.keys.hostEnrollment(enrollment.tokenHash);
    const created = await this.redis.scripts.agentgateCreateEnrollment(key, String(normalizeTtlMs(retainMs)), encodeHash(ENROLLMENT, enrollment));
    return created === 1;
  }

  async findEnrollment(tokenHash: string): Promise<EnrollmentRecord | null> {
    // A hash of a token is base64url; anything else was never stored.
    if (!isTaggable(tokenHash)) return null;
    const fields = await this.redis.connection.hgetall(this.redis.keys.hostEnrollment(tokenHash));
    return Object.keys(fields).length === 0 ? null : decodeFlatHash<EnrollmentRecord>(ENROLLMENT, Object.entries(fields).flat(), 'enrollment');
  }

  async completeEnrollment(tokenHash: string, hostId: string, atMs: number): Promise<EnrollmentCompletion> {
    if (!isTaggable(tokenHash)) return 'not_found';
    assertFiniteMs('atMs', atMs);
    const outcome = await this.redis.scripts.agentgateCompleteEnrollment(this.redis.keys.hostEnrollment(tokenHash), hostId, String(Math.trunc(atMs)));
    if (outcome === 'enrolled' || outcome === 'not_pending' || outcome === 'not_found') return outcome;
    throw new Error(`unexpected answer from the enrollment script: ${String(outcome)}`);
  }
}
