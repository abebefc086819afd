// Changing the policy with its effect known first: a preview of a candidate artefact against the
// recorded decisions (decision-log.ts), a reload refused when its preview flips more than the caller
// allows, and a shadow policy that sees every live decision without deciding any. The candidates run
// in a worker thread (policy/candidates.ts), so none of this adds work to a request's thread beyond
// handing the shadow its observations.
import { ApiError } from '../errors.ts';
import type { PreviewReport } from '../policy/preview.ts';
import { PolicyLoadError } from '../policy/engine.ts';
import { DecisionSourceError, type ShadowDisagreement, type ShadowTally } from '../policy/candidates.ts';
import type { Redaction } from '../policy/redaction.ts';
import type { ReloadOutcome } from '../policy/reloader.ts';
import { decisionPages } from '../store/decision-pages.ts';
import type { DecisionRecords } from '../store/store.ts';
import type { PolicyRollout, ServiceDepsOver } from './deps.ts';

type RolloutDeps = ServiceDepsOver<DecisionRecords>;

/** How a reload bounds what it may change: a number of flipped decisions, or a share of those compared. */
export type MaxFlips = { count: number } | { share: number };

export type CandidatePreview = PreviewReport & { sha256: string };

function requireRollout(deps: RolloutDeps): PolicyRollout {
  if (!deps.rollout) throw new ApiError('not_found', 'this instance cannot run candidate policies');
  return deps.rollout;
}

/**
 * Previews `artefact` (else the artefact file as it is on disk now, what a reload would load)
 * against the newest `limit` recorded decisions. This instance's queued records are written first,
 * so decisions it just made are in the preview. Where the store says how, the preview's own process
 * reads the records (store.ts, decisionStreamAddress); otherwise this process reads them page by page.
 */
export async function previewCandidate(deps: RolloutDeps, artefact: Uint8Array | null, limit: number): Promise<CandidatePreview> {
  const { candidates } = requireRollout(deps);
  const bytes = artefact ?? await readArtefactOnDisk(deps);
  await deps.decisions.flush();
  const stream = deps.store.decisionStreamAddress();
  try {
    return await candidates.preview(bytes, stream === null ? decisionPages(deps.store, limit) : { stream, limit });
  } catch (err) {
    if (err instanceof PolicyLoadError) throw new ApiError('invalid_request', `the candidate is not a policy artefact agentgate can load: ${err.message}`);
    if (err instanceof DecisionSourceError) {
      // As for any store call that fails (store/guard.ts): the cause to the log, not to the caller.
      deps.logger.error('storage unavailable; the preview could not read the recorded decisions', { err });
      throw new ApiError('service_unavailable', 'the store cannot be reached; retry later');
    }
    throw err;
  }
}

async function readArtefactOnDisk(deps: RolloutDeps): Promise<Uint8Array> {
  if (!deps.readPolicyArtefact) throw new ApiError('not_found', 'this instance cannot read its policy artefact');
  try {
    return await deps.readPolicyArtefact();
  } catch (err) {
    throw new ApiError('reload_rejected', `the policy artefact cannot be read: ${(err as Error).message}`);
  }
}

/** The decisions a preview says a reload would change: flips both ways, and those the candidate could not evaluate. */
export function changedDecisions(preview: PreviewReport): number {
  return preview.allow_to_deny + preview.deny_to_allow + preview.errors.count;
}

/** Whether a preview stays within `max`: a count, or a share of the decisions compared (an empty log is 0 of 0). */
export function withinMaxFlips(preview: PreviewReport, max: MaxFlips): boolean {
  const changed = changedDecisions(preview);
  if ('count' in max) return changed <= max.count;
  const compared = preview.decisions + preview.errors.count;
  return compared === 0 || changed / compared <= max.share;
}

/**
 * Reloads the policy. With `maxFlips`, the artefact on disk is read once, previewed against the
 * newest `limit` recorded decisions, and loaded (those same bytes) only when the preview stays
 * within the bound; otherwise 409 max_flips_exceeded with the preview, and the live policy stays.
 */
export async function guardedReload(deps: RolloutDeps, maxFlips: MaxFlips | undefined, limit: number): Promise<ReloadOutcome & { preview?: CandidatePreview }> {
  if (!deps.reloadPolicy) throw new ApiError('not_found', 'this instance cannot reload its policy');
  if (maxFlips === undefined) return deps.reloadPolicy();
  const bytes = await readArtefactOnDisk(deps);
  const preview = await previewCandidate(deps, bytes, limit);
  if (!withinMaxFlips(preview, maxFlips)) {
    const bound = 'count' in maxFlips ? `${maxFlips.count}` : `${maxFlips.share * 100}% of ${preview.decisions + preview.errors.count}`;
    throw new ApiError('max_flips_exceeded', `the new artefact would change ${changedDecisions(preview)} recorded decisions, more than max_flips (${bound}); the live policy stays`, { preview });
  }
  const outcome = await deps.reloadPolicy(bytes);
  return outcome.ok ? { ...outcome, preview } : outcome;
}

/** The newest disagreements a shadow had, redacted, per instance. */
export const KEPT_DISAGREEMENTS = 100;

/**
 * What this instance keeps of its shadow's disagreements: the newest KEPT_DISAGREEMENTS, redacted
 * as the decision log redacts, since they hold the decisions' inputs.
 */
export class ShadowDisagreements {
  readonly #redaction: Redaction;
  #kept: ShadowDisagreement[] = [];

  constructor(redaction: Redaction) {
    this.#redaction = redaction;
  }

  add(disagreement: ShadowDisagreement): void {
    this.#kept.push({ ...disagreement, input: this.#redaction.apply(disagreement.input) as Record<string, unknown> });
    if (this.#kept.length > KEPT_DISAGREEMENTS) this.#kept.shift();
  }

  clear(): void {
    this.#kept = [];
  }

  newestFirst(): ShadowDisagreement[] {
    return [...this.#kept].reverse();
  }
}

/** Loads `artefact` as this instance's shadow, replacing any; its tally starts from zero. */
export async function loadShadow(deps: RolloutDeps, artefact: Uint8Array): Promise<{ sha256: string }> {
  const { candidates, disagreements: kept } = requireRollout(deps);
  try {
    const loaded = await candidates.loadShadow(artefact);
    kept.clear();
    return loaded;
  } catch (err) {
    if (err instanceof PolicyLoadError) throw new ApiError('invalid_request', `the shadow is not a policy artefact agentgate can load: ${err.message}`);
    throw err;
  }
}

export function shadowStatus(deps: RolloutDeps): ShadowTally & { disagreements: ShadowDisagreement[] } {
  const { candidates, disagreements: kept } = requireRollout(deps);
  const tally = candidates.tally();
  if (tally === null) throw new ApiError('no_shadow_policy', 'no shadow policy is loaded on this instance');
  return { ...tally, disagreements: kept.newestFirst() };
}

/**
 * Makes the shadow the live policy: its bytes are reloaded as any artefact is (golden decisions
 * checked first; a refusal changes nothing and the shadow stays). Then the shadow is cleared.
 */
export async function promoteShadow(deps: RolloutDeps): Promise<ReloadOutcome> {
  const { candidates, disagreements: kept } = requireRollout(deps);
  if (!deps.reloadPolicy) throw new ApiError('not_found', 'this instance cannot reload its policy');
  const bytes = candidates.shadowArtefact();
  if (bytes === null) throw new ApiError('no_shadow_policy', 'no shadow policy is loaded on this instance');
  const outcome = await deps.reloadPolicy(bytes);
  if (outcome.ok) {
    candidates.clearShadow();
    kept.clear();
  }
  return outcome;
}

export function clearShadow(deps: RolloutDeps): void {
  const { candidates, disagreements: kept } = requireRollout(deps);
  if (candidates.tally() === null) throw new ApiError('no_shadow_policy', 'no shadow policy is loaded on this instance');
  candidates.clearShadow();
  kept.clear();
}
