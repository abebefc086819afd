// How records look on the wire (protocol §4, §8.3): snake_case fields, ISO 8601 times, and optional
// fields absent (definedOnly) rather than null. Each view's type is what its schema in
// view-schemas.ts infers, so the published shape and what is sent cannot part ways.
import type { Config } from '../config.ts';
import { definedOnly } from '../common/defined-only.ts';
import { effectiveStatus, visibleExpiresAtMs } from '../domain/lifecycle.ts';
import type { AgentSnapshot, ApprovalRecord, GrantRecord, HostRecord } from '../domain/types.ts';
import type { Catalog } from '../catalog/catalog.ts';
import type { UserCodes } from '../services/approvals/user-codes.ts';
import type { WaitingAgent } from '../domain/waiting.ts';
import { ENROLLMENT_TTL_SECONDS, type HostSetup } from '../services/enrollments.ts';
import type {
  ActiveGrantView, AgentView, ApprovalView, DeviceApprovalView, ClosedGrantView, GrantView, HostCreatedView, HostSetUpView, HostView, PendingGrantView, WaitingAgentView,
} from './view-schemas.ts';

function iso(ms: number): string;
function iso(ms: number | undefined | null): string | undefined;
function iso(ms: number | undefined | null): string | undefined {
  return ms === undefined || ms === null ? undefined : new Date(ms).toISOString();
}

/** Protocol §8.3: active grants carry their constraints and the capability's schemas. */
export function grantView(grant: GrantRecord, catalog: Catalog): GrantView {
  // Each branch names its status again: there it is narrowed to the one its schema allows.
  const base = { id: grant.id, capability: grant.capability };
  if (grant.status === 'active') {
    const capability = catalog.get(grant.capability);
    return definedOnly<ActiveGrantView>({
      ...base,
      status: grant.status,
      constraints: grant.constraints,
      granted_by: grant.grantedBy,
      reason: grant.reason,
      expires_at: iso(grant.expiresAtMs),
      description: capability?.description,
      input: capability?.input,
      output: capability?.output,
    });
  }
  if (grant.status === 'pending') return definedOnly<PendingGrantView>({ ...base, status: grant.status, constraints: grant.constraints, reason: grant.reason });
  return definedOnly<ClosedGrantView>({ ...base, status: grant.status, reason: grant.reason, denied_by: grant.deniedBy });
}

/**
 * Protocol §10: the approval object. Device authorization shows the code (derived from the
 * approval id); CIBA shows no code and no link, only what the person will be shown to compare.
 * Whether a CIBA approval found its person is not said: the object is the same either way.
 */
export function approvalView(approval: ApprovalRecord, ctx: ViewContext): ApprovalView {
  const expiresIn = Math.max(0, Math.ceil((approval.expiresAtMs - ctx.nowMs) / 1000));
  if (approval.method === 'ciba') {
    return definedOnly<ApprovalView>({ method: 'ciba', binding_message: approval.bindingMessage, expires_in: expiresIn, interval: approval.intervalSeconds });
  }
  return deviceApprovalView(approval, ctx);
}

/** RFC 8628's fields of an approval: what a device approval shows, and what POST /agent/device/code answers. */
export function deviceApprovalView(approval: ApprovalRecord, ctx: ViewContext): DeviceApprovalView {
  const verificationUri = `${ctx.config.issuer}/device`;
  const userCode = ctx.userCodes.codeFor(approval.id);
  return {
    method: 'device_authorization',
    verification_uri: verificationUri,
    verification_uri_complete: `${verificationUri}?user_code=${encodeURIComponent(userCode)}`,
    user_code: userCode,
    expires_in: Math.max(0, Math.ceil((approval.expiresAtMs - ctx.nowMs) / 1000)),
    interval: approval.intervalSeconds,
  };
}

export interface ViewContext {
  config: Config;
  catalog: Catalog;
  userCodes: UserCodes;
  nowMs: number;
}

/** Protocol §4.5: the full agent view (status, register and reactivate responses use it too). */
export function agentView(snapshot: AgentSnapshot, ctx: ViewContext, grants: GrantRecord[] = snapshot.grants): AgentView {
  const { agent, sessionExpiresAtMs } = snapshot;
  const status = effectiveStatus(agent, sessionExpiresAtMs, ctx.nowMs).status;
  return definedOnly<AgentView>({
    agent_id: agent.id,
    host_id: agent.hostId,
    name: agent.name,
    status,
    mode: agent.mode,
    user_id: agent.userId,
    agent_capability_grants: grants.map((g) => grantView(g, ctx.catalog)),
    created_at: iso(agent.createdAtMs),
    activated_at: iso(agent.activatedAtMs),
    last_used_at: iso(agent.lastUsedAtMs),
    expires_at: status === 'active' ? iso(visibleExpiresAtMs(agent, sessionExpiresAtMs)) : undefined,
    approval: agent.approval && status === 'pending' ? approvalView(agent.approval, ctx) : undefined,
  });
}

export function hostView(host: HostRecord): HostView {
  return definedOnly<HostView>({
    host_id: host.id,
    name: host.name,
    status: host.status,
    user_id: host.userId,
    default_capabilities: host.defaultCapabilities,
    created_at: iso(host.createdAtMs),
    activated_at: iso(host.activatedAtMs),
  });
}

/** A host made for a person, by their API or by an enrollment token (POST /host/enroll). */
export function hostCreatedView(host: HostRecord): HostCreatedView {
  return definedOnly<HostCreatedView>({ host_id: host.id, status: 'active', name: host.name, default_capabilities: host.defaultCapabilities });
}

/** POST /people/me/hosts: the enrollment with its token (in this answer only). */
export function hostSetupView(setup: HostSetup): HostSetUpView {
  const { enrollment } = setup;
  return definedOnly<HostSetUpView>({
    enrollment_id: enrollment.id,
    status: 'pending_enrollment',
    enrollment_token: setup.token,
    expires_in: ENROLLMENT_TTL_SECONDS,
    name: enrollment.name,
    default_capabilities: enrollment.defaultCapabilities,
    key_thumbprint: enrollment.keyThumbprint,
  });
}

/**
 * An agent waiting for a person (GET /admin/approvals). The user code and link only while the
 * approval is open: a lapsed code decides nothing. `expires_at` is the approval's, open or lapsed.
 */
export function waitingAgentView(item: WaitingAgent, ctx: ViewContext): WaitingAgentView {
  const { agent } = item.snapshot;
  // The admin sees a code only for a device approval: a CIBA one's code is never shown to anyone.
  const open = item.openApproval && item.openApproval.method !== 'ciba' ? deviceApprovalView(item.openApproval, ctx) : undefined;
  return definedOnly<WaitingAgentView>({
    agent_id: agent.id,
    host_id: agent.hostId,
    name: agent.name,
    mode: agent.mode,
    status: agent.status,
    registration: item.registration,
    approval_id: item.approval?.id,
    expires_at: iso(item.approval?.expiresAtMs),
    user_code: open?.user_code,
    verification_uri_complete: open?.verification_uri_complete,
    capabilities: item.requested.map((g) => definedOnly<WaitingAgentView['capabilities'][number]>({ grant_id: g.id, capability: g.capability, constraints: g.constraints, reason: g.reason })),
  });
}
