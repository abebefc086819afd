// What readiness means (GET /readyz): this instance can do its work when its store answers, a
// policy is loaded and constraint operators are loaded; when not, each check says what is wrong, in
// words that tell an anonymous caller nothing about the deployment (the store's own error goes to
// the log).
import type { ServiceDeps } from './deps.ts';

interface ReadinessCheck {
  ok: boolean;
  /** What is wrong, in words, when not ok. */
  problem?: string;
  [detail: string]: unknown;
}

/** Each dependency's state; the store is asked within its own deadline (the store guard's). */
export async function readiness(deps: Pick<ServiceDeps, 'store' | 'policy' | 'operators' | 'logger'>): Promise<Record<'store' | 'policy' | 'operators', ReadinessCheck>> {
  let store: ReadinessCheck = { ok: true, kind: deps.store.kind };
  try {
    await deps.store.ping();
  } catch (err) {
    // Anyone may ask /readyz: the store's own error (addresses, versions) goes to the log only.
    deps.logger.warn('readiness: the store cannot be reached', { err });
    store = { ok: false, kind: deps.store.kind, problem: `the ${deps.store.kind} store cannot be reached (the log says why)` };
  }
  const info = deps.policy.info();
  const policy: ReadinessCheck = info.generation > 0 && info.sha256
    ? { ok: true, sha256: info.sha256, generation: info.generation, loaded_at: new Date(info.loadedAtMs).toISOString() }
    : { ok: false, problem: 'no policy is loaded' };
  const names = deps.operators.names();
  const operators: ReadinessCheck = names.length > 0
    ? { ok: true, builtin: names.filter((n) => !deps.operators.isPlugin(n)), plugins: names.filter((n) => deps.operators.isPlugin(n)) }
    : { ok: false, problem: 'no constraint operators are loaded' };
  return { store, policy, operators };
}
