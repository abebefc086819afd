// RFC 8628 device-authorization approval objects (protocol §10), created when consent is needed.
import type { Config } from '../config.ts';
import type { ApprovalRecord } from '../domain/types.ts';
import { newApprovalId, newUserCode } from './ids.ts';

export function newApproval(grantIds: string[], nowMs: number, config: Config): ApprovalRecord {
  return {
    id: newApprovalId(),
    userCode: newUserCode(),
    grantIds,
    createdAtMs: nowMs,
    expiresAtMs: nowMs + config.APPROVAL_EXPIRES_IN_SECONDS * 1000,
    intervalSeconds: config.APPROVAL_INTERVAL_SECONDS,
  };
}

/** Keeps an open approval (adding grant ids) or opens a new one when none is open. */
export function extendApproval(current: ApprovalRecord | undefined, grantIds: string[], nowMs: number, config: Config): ApprovalRecord {
  if (current && current.expiresAtMs > nowMs) {
    return { ...current, grantIds: [...new Set([...current.grantIds, ...grantIds])] };
  }
  return newApproval(grantIds, nowMs, config);
}
