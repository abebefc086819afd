// The in-memory Store, for the quick start and unit tests (DESIGN §3). It keeps the Redis store's
// semantics exactly (the shared contract suite runs against both), including the ones that come
// from Redis itself: a session deadline in the past is gone (Redis expires the key in real time),
// and replay records expire after their ttl. Records are deep-copied on the way in and out, so a
// caller can never change stored state except through these methods. Nothing survives a restart.
//
// The store is made of one object per role of store.ts, assembled by compose.ts:
//   hosts      MemoryHostRecords     (host-records.ts)   over the shared tables (record-tables.ts)
//   agents     MemoryAgentRecords    (agent-records.ts)  over the shared tables and the jti cache
//   replay     MemoryReplayRecords   (replay-records.ts) over the jti cache
//   pending    MemoryPendingIndex    (pending-index.ts)  over the shared tables
//   people     MemoryPersonRecords   (person-records.ts)
//   enrollments MemoryHostEnrollments (host-enrollments.ts)
//   audit      MemoryAuditRecords    (audit-ring.ts)
//   decisions  MemoryDecisionRecords (decision-ring.ts)
//   backend    MemoryBackend         (backend.ts)
// All of them hold the one gate (shared-state.ts): the clock, and whether the store is closed.
import { composeStore } from '../compose.ts';
import type { Store } from '../store.ts';
import { MemoryAgentRecords } from './agent-records.ts';
import { MemoryAuditRecords } from './audit-ring.ts';
import { MemoryBackend } from './backend.ts';
import { MemoryDecisionRecords } from './decision-ring.ts';
import { MemoryHostEnrollments } from './host-enrollments.ts';
import { MemoryHostRecords } from './host-records.ts';
import { MemoryPendingIndex } from './pending-index.ts';
import { MemoryPersonRecords } from './person-records.ts';
import { RecordTables } from './record-tables.ts';
import { MemoryReplayRecords, ReplayCache } from './replay-records.ts';
import { MemoryGate, MemoryStoreClosedError } from './shared-state.ts';

export { MemoryStoreClosedError };

interface MemoryStoreOptions {
  /** Wall clock (epoch ms) for jti and session expiry, as Redis's own clock would be; default Date.now. */
  now?: () => number;
  /** Upper bound on remembered jtis; past it, recording refuses rather than forget a live jti. */
  maxReplayRecords?: number;
  /** An invalidation listener threw; reported, as the Redis store reports its listener errors. */
  onListenerError?: (error: Error) => void;
}

/** Every member of Store, put on each instance by composeStore (compose.ts) in the constructor. */
export interface MemoryStore extends Store {}

/**
 * A class whose constructor has composeStore fill the instance with the roles' methods, so that
 * `new MemoryStore(options)` stays the way to make one.
 */
export class MemoryStore {
  constructor(options: MemoryStoreOptions = {}) {
    const gate = new MemoryGate(options.now ?? Date.now);
    const tables = new RecordTables(gate.now);
    const jtis = new ReplayCache(gate.now, options.maxReplayRecords);
    // The agent records append the audit events and decision records the hot path's round trip
    // carries to this trail and these records.
    const audit = new MemoryAuditRecords(gate);
    const decisions = new MemoryDecisionRecords(gate);
    composeStore(this, {
      hosts: new MemoryHostRecords(gate, tables),
      agents: new MemoryAgentRecords(gate, tables, jtis, audit, decisions),
      replay: new MemoryReplayRecords(gate, jtis),
      pending: new MemoryPendingIndex(gate, tables),
      people: new MemoryPersonRecords(gate),
      enrollments: new MemoryHostEnrollments(gate),
      audit,
      decisions,
      backend: new MemoryBackend(gate, options.onListenerError),
    });
  }
}
