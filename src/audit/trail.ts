// Wiring of the audit trail, used by the one assembly of the service (src/app.ts assembleService):
// the writer, the webhook forwarder when one is configured, and the reloads that change what
// decides (the policy and the operator plugins), which happen outside any request.
import type { Config } from '../config.ts';
import { redisCallDeadlineMs } from '../common/deadline.ts';
import type { Logger } from '../logger.ts';
import { PolicyReloader, type ReloadOutcome, type ReloadTrigger } from '../policy/reloader.ts';
import type { AuditRecords } from '../store/store.ts';
import { AuditForwarder } from './forwarder.ts';
import { AuditLog } from './log.ts';

export interface AuditTrail {
  log: AuditLog;
  /** Null without AUDIT_WEBHOOK_URL. */
  forwarder: AuditForwarder | null;
  /** Writes what is queued, then stops forwarding (giving back what it held). Never throws. */
  close(): Promise<void>;
}

/** `store` is the store itself, not the fail-closed wrapper the services use. */
export function startAuditTrail(config: Config, store: AuditRecords, logger: Logger): AuditTrail {
  const log = new AuditLog({
    store,
    enabled: config.AUDIT_ENABLED,
    maxEvents: config.AUDIT_MAX_EVENTS,
    maxAgeMs: config.AUDIT_MAX_AGE_SECONDS * 1000,
    aggregateWindowMs: config.AUDIT_AGGREGATE_WINDOW_SECONDS * 1000,
    flushMs: config.AUDIT_FLUSH_MS,
    queueMax: config.AUDIT_QUEUE_MAX,
    writeDeadlineMs: redisCallDeadlineMs(config.REDIS_COMMAND_TIMEOUT_MS),
    logger,
  });
  const forwarder = config.AUDIT_WEBHOOK_URL
    ? new AuditForwarder({
      store, url: config.AUDIT_WEBHOOK_URL, token: config.AUDIT_WEBHOOK_TOKEN, timeoutMs: config.AUDIT_WEBHOOK_TIMEOUT_MS, batchSize: config.AUDIT_WEBHOOK_BATCH_SIZE, logger,
    })
    : null;
  forwarder?.start();
  return {
    log,
    forwarder,
    async close() {
      await log.close().catch((err: unknown) => logger.error('closing the audit log failed', { err }));
      await forwarder?.close().catch((err: unknown) => logger.error('closing the audit forwarder failed', { err }));
    },
  };
}

/**
 * The policy reloader, recording every reload it makes (a file change and SIGHUP by the system,
 * an admin call by the admin), accepted or refused. A subclass, because the file watch inside
 * PolicyReloader calls `this.reload`.
 */
export class AuditedPolicyReloader extends PolicyReloader {
  readonly #audit: AuditLog;

  constructor(options: ConstructorParameters<typeof PolicyReloader>[0] & { audit: AuditLog }) {
    super(options);
    this.#audit = options.audit;
  }

  override async reload(trigger: ReloadTrigger, artefact?: Uint8Array): Promise<ReloadOutcome> {
    const outcome = await super.reload(trigger, artefact);
    this.#audit.record({
      type: 'policy.reloaded',
      actor: trigger === 'admin' ? 'admin' : 'system',
      trigger,
      outcome: outcome.ok ? 'accepted' : 'refused',
      ...(outcome.ok ? { sha256: outcome.sha256, generation: outcome.generation } : { code: 'reload_rejected', error: outcome.error }),
    });
    return outcome;
  }
}

/** Wraps the operator plugins' reload so that each one is recorded, accepted or refused. */
export function auditedOperatorReload(audit: AuditLog, reload: () => Promise<string[]>): (trigger: 'admin' | 'SIGHUP') => Promise<string[]> {
  return async (trigger) => {
    const actor = trigger === 'admin' ? 'admin' : 'system';
    try {
      const operators = await reload();
      audit.record({ type: 'operators.reloaded', actor, trigger, outcome: 'accepted', operators });
      return operators;
    } catch (err) {
      audit.record({ type: 'operators.reloaded', actor, trigger, outcome: 'refused', code: 'reload_rejected', error: err instanceof Error ? err.message : String(err) });
      throw err;
    }
  };
}
