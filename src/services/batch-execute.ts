// POST /capability/batch-execute (protocol §3.2, a reference-server extension): up to 50 calls
// under one agent JWT. Authentication (DESIGN §2 steps 2–6: one signature check, one Redis round
// trip, the agent's and host's budgets spent one point per call) is done once for the batch and
// refuses it whole; then every call goes through execute's own steps 7–9 and succeeds or fails on
// its own. Nothing here decides what execute does not: see execute.ts.
import { BATCH_ITEM_CONCURRENCY, batchCallId, forEachBounded } from '../domain/batch.ts';
import { ApiError, isApiError, type ErrorCode } from '../errors.ts';
import type { ServiceDepsOver } from './deps.ts';
import { recordRefusedWhole, type AuditedCaller } from './execute-audit.ts';
import { auditedCall, authenticateCalls, type AuthenticatedCalls } from './execute.ts';
import type { AgentRecords, StoreBackend } from '../store/store.ts';

/** What batch execute may touch of the store: the roles below, no others. */
type ExecuteDeps = ServiceDepsOver<AgentRecords & Pick<StoreBackend, 'publishAgentInvalidation'>>;

/** One call as the body carries it (zod has bounded it). */
interface BatchCallRequest {
  id?: string | undefined;
  capability: string;
  arguments?: Record<string, unknown> | undefined;
}

/**
 * A failed call's error: the usual `{error, message, ...extra}` body, plus `code` with the same
 * value (the reference server's and SDK's name for it) and, for a refusal that names one,
 * `retry_after` in seconds (a response has one Retry-After header, a batch many items).
 */
interface BatchCallError {
  code: ErrorCode;
  error: ErrorCode;
  message: string;
  [extra: string]: unknown;
}

export type BatchCallOutcome =
  | { id: string; status: 'completed'; data: unknown }
  | { id: string; status: 'failed'; error: BatchCallError };

/**
 * Runs a batch: the outcomes come in request order, one per call. `requestId` names the request in
 * the message of a call that failed on a bug, as the error handler does for a whole request.
 */
export async function executeBatch(
  deps: ExecuteDeps, token: string | null, requests: readonly BatchCallRequest[], requestId?: string,
): Promise<BatchCallOutcome[]> {
  const callCapabilities = requests.map((request) => request.capability);
  const caller: AuditedCaller = {};
  let authenticated: AuthenticatedCalls;
  try {
    authenticated = await authenticateCalls(deps, token, [...new Set(callCapabilities)], callCapabilities, 'batch', caller);
  } catch (err) {
    // Refused whole: one event for the batch (each item's own event comes only once it is judged).
    recordRefusedWhole(deps, caller, err, { request_id: requestId, batch: true, calls: requests.length });
    throw err;
  }
  const outcomes = new Array<BatchCallOutcome>(requests.length);
  await forEachBounded(requests.length, BATCH_ITEM_CONCURRENCY, async (index) => {
    const request = requests[index]!;
    const id = batchCallId(request.id, index);
    const call = { capability: request.capability, arguments: request.arguments ?? {} };
    try {
      const context = { request_id: requestId, batch: true, call_id: id };
      const data = await auditedCall(deps, authenticated, call, authenticated.capabilityPoints[index] ?? null, context);
      outcomes[index] = { id, status: 'completed', data };
    } catch (err) {
      outcomes[index] = { id, status: 'failed', error: callError(deps, err, request.capability, authenticated.agent.id, requestId) };
    }
  });
  return outcomes;
}

/** A call's refusal as its item shows it; anything but an ApiError is a bug, logged and answered 500. */
function callError(deps: ExecuteDeps, err: unknown, capability: string, agentId: string, requestId: string | undefined): BatchCallError {
  let refusal: ApiError;
  if (isApiError(err)) {
    refusal = err;
  } else {
    deps.logger.error('unhandled error in a batch call', { requestId, capability, agentId, err });
    refusal = new ApiError('internal_error', `internal error (request id ${requestId ?? 'unknown'})`);
  }
  const retryAfter = refusal.headers?.['Retry-After'];
  return {
    code: refusal.code,
    error: refusal.code,
    message: refusal.message,
    ...refusal.extra,
    ...(retryAfter === undefined ? {} : { retry_after: Number(retryAfter) }),
  };
}
