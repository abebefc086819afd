// The memory store's enrollments (the HostEnrollments role of store.ts), as
// redis/host-enrollments.ts keeps them: one entry per token hash, forgotten when its time to be
// kept has passed on the store's clock (as its Redis key would expire), and bound to a host once.
import type { EnrollmentRecord } from '../../domain/types.ts';
import { normalizeTtlMs } from '../checks.ts';
import type { EnrollmentCompletion, HostEnrollments } from '../store.ts';
import { ExpiringMap, type MemoryGate } from './shared-state.ts';

export class MemoryHostEnrollments implements HostEnrollments {
  readonly #gate: MemoryGate;
  /** Token hash -> the enrollment, with the deadline it is kept until. */
  readonly #enrollments: ExpiringMap<{ record: EnrollmentRecord; untilMs: number }>;

  constructor(gate: MemoryGate) {
    this.#gate = gate;
    this.#enrollments = new ExpiringMap(gate.now);
  }

  async createEnrollment(enrollment: EnrollmentRecord, retainMs: number): Promise<boolean> {
    this.#gate.assertOpen();
    const untilMs = this.#gate.now() + normalizeTtlMs(retainMs);
    if (this.#enrollments.get(enrollment.tokenHash) !== null) return false;
    this.#enrollments.set(enrollment.tokenHash, { record: structuredClone(enrollment), untilMs }, untilMs);
    return true;
  }

  async findEnrollment(tokenHash: string): Promise<EnrollmentRecord | null> {
    this.#gate.assertOpen();
    const entry = this.#enrollments.get(tokenHash);
    return entry === null ? null : structuredClone(entry.record);
  }

  async completeEnrollment(tokenHash: string, hostId: string, atMs: number): Promise<EnrollmentCompletion> {
    this.#gate.assertOpen();
    // No await between the read and the write: one caller moves it, as the Redis script does.
    const entry = this.#enrollments.get(tokenHash);
    if (entry === null) return 'not_found';
    if (entry.record.state !== 'pending') return 'not_pending';
    const record: EnrollmentRecord = { ...entry.record, state: 'enrolled', hostId, enrolledAtMs: atMs };
    this.#enrollments.set(tokenHash, { record, untilMs: entry.untilMs }, entry.untilMs);
    return 'enrolled';
  }
}
