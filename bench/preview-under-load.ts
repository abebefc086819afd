// A preview of recorded decisions run while execute is under load (bench/run.ts, the `preview`
// scenario): one POST /admin/policy/preview, timed from the bench, and the execute latencies of the
// same window split into the requests that completed while the preview ran and those that did not.
// The split is what says whether the preview adds latency to execute: the window's own p99 mixes
// both, and the preview may take only part of the window.
import type { EventEmitter } from 'node:events';

/** What one preview answered, and how long it took from the bench's side. */
export interface PreviewOutcome {
  /** The decisions asked for (`?decisions=`). */
  requested: number;
  /** HTTP status; 0 when no answer came (the reason is in `message`). */
  status: number;
  /** Wall time from sending the request to reading the whole answer. */
  seconds: number;
  /** When the preview was sent, counted from the start of the window. */
  startedAfterSeconds: number;
  /** Whether the answer came before the window ended, so the whole preview ran under load. */
  withinWindow: boolean;
  evaluated: number | null;
  decisions: number | null;
  unchanged: number | null;
  allowToDeny: number | null;
  denyToAllow: number | null;
  /** Decisions the candidate could not evaluate (the preview's errors.count). */
  errors: number | null;
  truncated: boolean;
  /** The error's message when the status is not 200. */
  message?: string;
}

/** Latency of the execute requests that completed in a span of the window. */
export interface LatencyOf {
  requests: number;
  latencyMsP50: number | null;
  latencyMsP99: number | null;
}

/** Every response of a window: when it completed (performance.now() ms) and its latency (ms). */
export class ResponseLog {
  readonly completedAtMs: number[] = [];
  readonly latencyMs: number[] = [];

  /**
   * Listens to an autocannon instance. autocannon 8 emits (client, statusCode, resBytes,
   * responseTime) there, one argument more than @types/autocannon declares.
   */
  listenTo(instance: EventEmitter): void {
    instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTimeMs: number) => {
      this.completedAtMs.push(performance.now());
      this.latencyMs.push(responseTimeMs);
    });
  }

  /** The requests that completed between `fromMs` and `toMs`, and those that completed outside it. */
  split(fromMs: number, toMs: number): { during: LatencyOf; outside: LatencyOf } {
    const during: number[] = [];
    const outside: number[] = [];
    for (let i = 0; i < this.latencyMs.length; i++) {
      const at = this.completedAtMs[i]!;
      (at >= fromMs && at <= toMs ? during : outside).push(this.latencyMs[i]!);
    }
    return { during: latencyOf(during), outside: latencyOf(outside) };
  }
}

function latencyOf(latencies: number[]): LatencyOf {
  const sorted = [...latencies].sort((a, b) => a - b);
  // Nearest rank: the smallest latency at or above which the share p of the requests lies.
  const rank = (p: number) => (sorted.length === 0 ? null : Math.round(sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]! * 100) / 100);
  return { requests: sorted.length, latencyMsP50: rank(0.5), latencyMsP99: rank(0.99) };
}

/**
 * Sends one preview of `artefact` against the newest `decisions` records and times it. Never
 * throws: a failed preview is reported with its status (0 when nothing answered) and message, so
 * the window it ran in is still measured.
 */
export async function timedPreview(base: string, adminToken: string, artefact: Uint8Array, decisions: number, timeoutMs: number): Promise<{ outcome: Omit<PreviewOutcome, 'startedAfterSeconds' | 'withinWindow'>; startedAtMs: number; endedAtMs: number }> {
  const startedAtMs = performance.now();
  const empty = { requested: decisions, evaluated: null, decisions: null, unchanged: null, allowToDeny: null, denyToAllow: null, errors: null, truncated: false };
  try {
    const res = await fetch(`${base}/admin/policy/preview?decisions=${decisions}`, {
      method: 'POST', headers: { 'content-type': 'application/wasm', authorization: `Bearer ${adminToken}` }, body: artefact, signal: AbortSignal.timeout(timeoutMs),
    });
    const json = await res.json() as Record<string, any>;
    const endedAtMs = performance.now();
    const seconds = Math.round(endedAtMs - startedAtMs) / 1000;
    if (res.status !== 200) return { outcome: { ...empty, status: res.status, seconds, message: String(json.message ?? json.error) }, startedAtMs, endedAtMs };
    return {
      outcome: {
        requested: decisions, status: 200, seconds, evaluated: json.evaluated, decisions: json.decisions, unchanged: json.unchanged,
        allowToDeny: json.allow_to_deny, denyToAllow: json.deny_to_allow, errors: json.errors.count, truncated: json.truncated === true,
      },
      startedAtMs,
      endedAtMs,
    };
  } catch (err) {
    const endedAtMs = performance.now();
    return { outcome: { ...empty, status: 0, seconds: Math.round(endedAtMs - startedAtMs) / 1000, message: err instanceof Error ? err.message : String(err) }, startedAtMs, endedAtMs };
  }
}
