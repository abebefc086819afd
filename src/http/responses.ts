// The shapes of agentgate's JSON answers, in zod, once, as schemas.ts holds the
// requests'. The records the views answer with are in view-schemas.ts; this module builds every
// route's answer from them, and RESPONSE_SCHEMAS names each for the OpenAPI document
// (src/http/openapi.ts), which publishes it as a component. Answers built outside views.ts whose
// producer has a type of its own are tied to these at compile time at the end of this file, and
// test/integration/openapi.conformance.test.ts checks real answers of every kind against the document.
//
// Objects are closed (zod's output JSON Schema says `additionalProperties: false`): the document
// says exactly what the server sends, so a member added to an answer is added here first. Clients
// should still ignore members they do not know, as the protocol asks of extension members.
import { z } from 'zod';
import { AUDIT_ACTORS, type AuditEvent } from '../audit/events.ts';
import { ERROR_STATUS, type ErrorCode } from '../errors.ts';
import type { LoadedOperator } from '../services/admin.ts';
import type { BatchCallOutcome } from '../services/batch-execute.ts';
import { ENDPOINTS, type discoveryDocument } from './discovery.ts';
import {
  agentStatus, agentViewSchema, approvalViewSchema, deviceApprovalViewSchema, grantViewSchema, hostCreatedViewSchema, hostSetUpViewSchema, hostStatus, hostViewSchema, isoTime, jsonObject, mode,
  seconds, waitingAgentViewSchema,
} from './view-schemas.ts';

// ---- errors --------------------------------------------------------------------------------------

const violationSchema = z.object({
  field: z.string().describe('the argument'),
  constraint: jsonObject.describe('the single failing operator, {operator: operand}'),
  actual: z.unknown().optional().describe('the value supplied; absent when the argument was missing'),
  missing: z.literal(true).optional().describe('the argument was not supplied at all'),
});

/** The members some codes add to `{error, message}` (ApiError's `extra`), by the code that adds them. */
/** A preview of a candidate policy against the recorded decisions (src/policy/preview.ts PreviewReport). */
const flipDirection = z.enum(['allow_to_deny', 'deny_to_allow']);
const policyPreviewSchema = z.object({
  sha256: z.string().describe("the candidate artefact's sha256"),
  evaluated: z.number().int().describe('recorded decisions looked at'),
  decisions: z.number().int().describe('decisions compared (a grants record holds one per requested capability)'),
  unchanged: z.number().int(),
  allow_to_deny: z.number().int(),
  deny_to_allow: z.number().int(),
  other_changes: z.number().int().describe('grants decisions that changed between approval and deny'),
  groups: z.array(z.object({
    direction: flipDirection, capability: z.string(), host_id: z.string(), rule: z.string().describe('the violated constraints (field.op) or the reason that denies'),
    count: z.number().int(), examples: z.array(jsonObject).describe('recorded inputs, redacted'),
  })).describe('the flips grouped, the largest first'),
  errors: z.object({
    count: z.number().int().describe('decisions the candidate could not evaluate: it failed, or the record lacks what a re-run needs'),
    examples: z.array(z.object({ input: jsonObject, error: z.string() })),
  }),
  truncated: z.literal(true).optional().describe('the preview stopped before the records ran out'),
}).describe('What a candidate policy would change among the recorded decisions');

const ERROR_EXTRAS = {
  max_flips_exceeded: {
    preview: policyPreviewSchema.optional().describe('max_flips_exceeded: the preview that refused the reload'),
  },
  constraint_violated: {
    violations: z.array(violationSchema).optional().describe('constraint_violated: every constraint the arguments break'),
  },
  unknown_constraint_operator: {
    unknown_operators: z.array(z.string()).optional().describe('unknown_constraint_operator: the operators named that this server does not know'),
    known_operators: z.array(z.string()).optional().describe('unknown_constraint_operator: every operator this server knows'),
  },
  invalid_capabilities: {
    invalid_capabilities: z.array(z.string()).optional().describe('invalid_capabilities: the capabilities refused'),
  },
  unauthorized: {
    assertion_options: jsonObject.optional()
      .describe('unauthorized, removing a passkey: the WebAuthn options to answer with one of your passkeys (send the answer as `assertion`)'),
  },
} satisfies Partial<Record<ErrorCode, z.ZodRawShape>>;

const ERROR_CODES = Object.keys(ERROR_STATUS) as ErrorCode[];

/** Every status some error code has, ascending (each gets a component of its own). */
export const ERROR_HTTP_STATUSES = [...new Set(Object.values(ERROR_STATUS))].sort((a, b) => a - b);

export const codesWithStatus = (status: number): ErrorCode[] => ERROR_CODES.filter((code) => ERROR_STATUS[code] === status);

/** The error body for `codes`: their extras only, and `request_id` where a 5xx carries it (src/http/errors.ts). */
function errorObject(codes: ErrorCode[], requestId: boolean) {
  const extras = Object.assign({}, ...codes.map((code) => (ERROR_EXTRAS as Partial<Record<ErrorCode, z.ZodRawShape>>)[code] ?? {})) as z.ZodRawShape;
  return z.object({
    error: z.enum(codes as [ErrorCode, ...ErrorCode[]]).describe('the code, from the one table of src/errors.ts; decide on this, never on the message'),
    message: z.string().describe('for people; may change'),
    ...(requestId ? { request_id: z.string().optional().describe("5xx: the request's X-Request-Id, to quote when reporting it") } : {}),
    ...extras,
  });
}

/** Every refusal: `{error, message, ...}` with the status the code has in src/errors.ts. */
const errorSchema = errorObject(ERROR_CODES, true).describe('Every refusal. The HTTP status is the one its code has in src/errors.ts');

/** A refusal with `status`: the same body, its `error` one of the codes with that status. */
export const errorSchemaFor = (status: number) =>
  errorObject(codesWithStatus(status), status >= 500).describe(`A refusal with status ${status}: one of the codes with that status`);

// ---- discovery, health -----------------------------------------------------------------------

const endpointShape = Object.fromEntries(Object.entries(ENDPOINTS).map(([name, path]) => [name, z.literal(path)])) as {
  [K in keyof typeof ENDPOINTS]: z.ZodLiteral<(typeof ENDPOINTS)[K]>;
};

export const discoverySchema = z.object({
  version: z.string(),
  provider_name: z.string(),
  description: z.string(),
  issuer: z.url(),
  default_location: z.url().describe('where capabilities execute unless one names its own location'),
  algorithms: z.array(z.string()),
  modes: z.array(mode),
  approval_methods: z.array(z.string()).describe('device_authorization, and ciba where a notification channel is configured'),
  verification_uri: z.url().describe('extension member: where people approve'),
  endpoints: z.object(endpointShape),
  constraint_operators: z.array(z.string()).describe('extension member: the constraint operators this server knows now'),
}).describe('Protocol §2: the discovery document');

const policyIdentity = { sha256: z.string(), generation: z.number().int(), loaded_at: isoTime };

const healthSchema = z.object({
  status: z.literal('ok'),
  uptime_seconds: seconds('how long the process has run'),
  policy: z.object(policyIdentity).describe('the policy artefact this instance enforces'),
}).describe('Liveness: the process serves HTTP');

const check = { ok: z.boolean(), problem: z.string().optional().describe('what is wrong, when not ok') };
const readinessChecksSchema = z.object({
  store: z.object({ ...check, kind: z.enum(['memory', 'redis']) }),
  policy: z.object({ ...check, sha256: z.string().optional(), generation: z.number().int().optional(), loaded_at: isoTime.optional() }),
  operators: z.object({ ...check, builtin: z.array(z.string()).optional(), plugins: z.array(z.string()).optional() }),
});

const readySchema = z.object({ status: z.literal('ready'), checks: readinessChecksSchema }).describe('Readiness: this instance can do its work');

const notReadySchema = errorObject(['service_unavailable'], true).extend({
  status: z.literal('not_ready'),
  checks: readinessChecksSchema.describe('which part is not ready, and why'),
}).describe('Not ready: the error body of a 503, with the checks that say what is wrong');

// ---- the protocol's other answers --------------------------------------------------------------

const requestCapabilityResponseSchema = z.object({
  agent_id: z.string(),
  status: z.enum(['active', 'pending']).describe('pending while a person must approve some of the capabilities'),
  agent_capability_grants: z.array(grantViewSchema).describe('the grants this request made'),
  approval: approvalViewSchema.optional(),
});

const deviceCodeResponseSchema = deviceApprovalViewSchema.omit({ method: true }).extend({
  device_code: z.string().describe("the approval's id"),
}).describe('RFC 8628 §3.2: a fresh code for an agent waiting for approval');

const agentRevokedSchema = z.object({ agent_id: z.string(), status: z.literal('revoked') });
const agentKeyRotatedSchema = z.object({ agent_id: z.string(), status: agentStatus });
const capabilitiesRevokedSchema = z.object({
  agent_id: z.string(),
  revoked: z.array(z.string()).describe('the capabilities whose grants were revoked'),
  grant_ids: z.array(z.string()),
});

const introspectionSchema = z.discriminatedUnion('active', [
  z.object({ active: z.literal(false) }),
  z.object({
    active: z.literal(true),
    agent_id: z.string(),
    host_id: z.string(),
    user_id: z.string().optional(),
    agent_capability_grants: z.array(z.object({ capability: z.string(), status: z.enum(['active', 'pending', 'denied', 'revoked']) })),
    mode,
    expires_at: isoTime.optional(),
  }),
]).describe('Protocol §4.12: `{active: false}` for any token that is not a valid agent JWT now');

const hostKeyRotatedSchema = z.object({ host_id: z.string(), status: hostStatus });
const hostRevokedSchema = z.object({ host_id: z.string(), status: hostStatus.describe('revoked'), agents_revoked: z.number().int().min(0) });

const grantStatusForViewer = z.enum(['granted', 'not_granted']).optional().describe("for an agent's JWT only: whether it holds the capability");

const capabilityListSchema = z.object({
  capabilities: z.array(z.object({ name: z.string(), description: z.string(), location: z.url().optional(), grant_status: grantStatusForViewer })),
  next_cursor: z.string().nullable().describe('pass as `cursor` for the next page; null on the last'),
  has_more: z.boolean(),
});

const capabilityDescriptionSchema = z.object({
  name: z.string(),
  description: z.string(),
  location: z.url().optional(),
  input: jsonObject.describe('JSON Schema of the arguments'),
  output: jsonObject.optional().describe('JSON Schema of `data`'),
  grant_status: grantStatusForViewer,
});

const executeResponseSchema = z.object({ data: z.unknown().describe("the capability's answer") });

/** A failed batch call: the error body execute would answer for it alone, plus `code` and `retry_after`. */
const batchCallErrorSchema = errorObject(ERROR_CODES, false).extend({
  code: z.enum(ERROR_CODES as [ErrorCode, ...ErrorCode[]]).describe('the same value as error'),
  retry_after: seconds('when a budget refused the call: when to retry').optional(),
});

const batchResponseSchema = z.object({
  responses: z.array(z.discriminatedUnion('status', [
    z.object({ id: z.string().describe("the request's id, or its index in the batch"), status: z.literal('completed'), data: z.unknown().describe('what execute would answer as data') }),
    z.object({ id: z.string().describe("the request's id, or its index in the batch"), status: z.literal('failed'), error: batchCallErrorSchema }),
  ])).describe('one per request, in request order'),
});

// ---- admin API -----------------------------------------------------------------------------

const adminApprovalsSchema = z.object({
  approvals: z.array(waitingAgentViewSchema).describe('oldest registration first'),
  truncated: z.boolean().describe('more agents wait than were listed'),
});
const policyInfoSchema = z.object(policyIdentity).describe('The active policy artefact');
const policyReloadedSchema = z.object({
  sha256: z.string(), generation: z.number().int(),
  preview: policyPreviewSchema.optional().describe('with max_flips: the preview the reload passed'),
});
const shadowLoadedSchema = z.object({ sha256: z.string().describe("the shadow artefact's sha256") });
const shadowStatusSchema = z.object({
  sha256: z.string(), loaded_at: isoTime,
  observed: z.number().int().describe('live decisions offered to the shadow'),
  evaluated: z.number().int(), agreed: z.number().int(), disagreed: z.number().int(),
  dropped: z.number().int().describe('observations dropped because the shadow fell behind (never a delay to a request)'),
  errors: z.number().int().describe('decisions the shadow could not evaluate'),
  queued: z.number().int().describe('observations waiting for the shadow now'),
  running: z.number().int().describe('observations the shadow is evaluating now'),
  by_capability: z.record(z.string(), z.object({ allow_to_deny: z.number().int(), deny_to_allow: z.number().int(), other: z.number().int() })),
  disagreements: z.array(z.object({
    entrypoint: z.string(), direction: z.enum(['allow_to_deny', 'deny_to_allow', 'other']), capability: z.string(), host_id: z.string(), rule: z.string(),
    input: jsonObject.describe('the decision\'s input, redacted'),
  })).describe("this instance's newest disagreements, newest first"),
}).describe("This instance's shadow policy and its tally");
const operatorsSchema = z.object({
  operators: z.array(z.object({
    name: z.string(),
    kind: z.enum(['built-in', 'plugin']),
    description: z.string(),
    source: z.string().describe("the plugin's file name, or built-in"),
  })),
});
const operatorsReloadedSchema = z.object({ operators: z.array(z.string()).describe('every operator known after the reload') });
const capabilityRemovalSchema = z.object({ name: z.string(), removed: z.boolean() });

/** An audit event (src/audit/events.ts): a few named members, and small flat details. */
const auditEventSchema = z.object({
  id: z.string().describe('also its position in the trail'),
  at: isoTime,
  type: z.string().describe('`<subject>.<what happened>`, e.g. execute.allowed'),
  actor: z.enum(AUDIT_ACTORS),
  agent_id: z.string().optional(),
  host_id: z.string().optional(),
  person_id: z.string().optional(),
  capability: z.string().optional(),
  outcome: z.string().optional(),
  code: z.string().optional(),
}).catchall(z.union([z.string(), z.number(), z.boolean(), z.array(z.string())]));

const auditPageSchema = z.object({
  events: z.array(auditEventSchema),
  next_cursor: z.string().nullable().describe('pass as `cursor` for the next page; null on the last'),
});

// ---- people's API ----------------------------------------------------------------------------

const personSchema = z.object({
  person_id: z.string(),
  name: z.string().optional(),
  email: z.string().optional(),
  csrf_token: z.string().describe('repeat it in X-CSRF-Token on every POST'),
  signed_in_at: isoTime,
});
const personHostsSchema = z.object({ hosts: z.array(hostViewSchema) });
const nextCursor = z.string().nullable().describe('pass it as ?cursor= for the next page; null when this page read the last agent');
const personAgentsSchema = z.object({ agents: z.array(agentViewSchema), next_cursor: nextCursor });
const personApprovalSchema = z.object({
  approval_id: z.string(),
  method: z.enum(['device_authorization', 'ciba']).describe('ciba: sent to me, and in my inbox'),
  binding_message: z.string().optional().describe('ciba: what the agent says it shows; compare before approving'),
  expires_at: isoTime,
  registration: z.boolean(),
  agent: z.object({ agent_id: z.string(), name: z.string(), mode, status: agentStatus, reason: z.string().optional() }),
  host: z.object({ host_id: z.string(), name: z.string().optional(), linked: z.boolean().describe('false: approving links the host to me') }),
  capabilities: z.array(z.object({
    grant_id: z.string(),
    capability: z.string(),
    description: z.string(),
    approval_strength: z.enum(['sign_in', 'presence']).describe('presence: only on the approval page, with a passkey'),
    constraints: jsonObject.optional(),
    reason: z.string().optional(),
  })),
});
const personApprovalsSchema = z.object({ next_cursor: nextCursor, approvals: z.array(personApprovalSchema) });
const personInboxSchema = z.object({ approvals: z.array(personApprovalSchema).describe('CIBA approvals sent to me, latest deadline first') });
const personGrantSchema = z.object({ agent_id: z.string(), grant: grantViewSchema });
const hostUnlinkedSchema = hostRevokedSchema.extend({ linked: z.boolean() });
const personPasskeysSchema = z.object({
  passkeys: z.array(z.object({
    passkey_id: z.string().describe('the credential id (base64url)'),
    created_at: isoTime,
    last_used_at: isoTime.optional(),
    transports: z.array(z.string()).optional(),
  })),
});
const passkeyRemovedSchema = z.object({ passkey_id: z.string(), removed: z.literal(true) });
const passkeysRemovedSchema = z.object({ user_id: z.string(), passkeys_removed: z.number().int().min(0) });

/**
 * Every answer, by the component name the OpenAPI document gives it, and the parts answers share
 * (a part named here is a reference wherever it is used). The per-status error bodies (`Error400`,
 * ...) are added by openapi.ts from ERROR_HTTP_STATUSES.
 */
export const RESPONSE_SCHEMAS = {
  Timestamp: isoTime,
  Error: errorSchema,
  NotReady: notReadySchema,
  Discovery: discoverySchema,
  Health: healthSchema,
  Ready: readySchema,
  OpenApiDocument: jsonObject.describe('This document (OpenAPI 3.1)'),
  Approval: approvalViewSchema,
  Grant: grantViewSchema,
  AgentView: agentViewSchema,
  HostView: hostViewSchema,
  HostCreated: hostCreatedViewSchema,
  HostSetUp: hostSetUpViewSchema,
  WaitingAgent: waitingAgentViewSchema,
  RequestCapabilityResponse: requestCapabilityResponseSchema,
  DeviceCode: deviceCodeResponseSchema,
  AgentRevoked: agentRevokedSchema,
  AgentKeyRotated: agentKeyRotatedSchema,
  CapabilitiesRevoked: capabilitiesRevokedSchema,
  Introspection: introspectionSchema,
  HostKeyRotated: hostKeyRotatedSchema,
  HostRevoked: hostRevokedSchema,
  CapabilityList: capabilityListSchema,
  CapabilityDescription: capabilityDescriptionSchema,
  ExecuteResponse: executeResponseSchema,
  BatchResponse: batchResponseSchema,
  AdminApprovals: adminApprovalsSchema,
  PolicyInfo: policyInfoSchema,
  PolicyReloaded: policyReloadedSchema,
  PolicyPreview: policyPreviewSchema,
  ShadowLoaded: shadowLoadedSchema,
  ShadowStatus: shadowStatusSchema,
  Operators: operatorsSchema,
  OperatorsReloaded: operatorsReloadedSchema,
  CapabilityRemoval: capabilityRemovalSchema,
  AuditEvent: auditEventSchema,
  AuditPage: auditPageSchema,
  Person: personSchema,
  PersonHosts: personHostsSchema,
  PersonAgents: personAgentsSchema,
  PersonApprovals: personApprovalsSchema,
  PersonInbox: personInboxSchema,
  PersonGrant: personGrantSchema,
  HostUnlinked: hostUnlinkedSchema,
  PersonPasskeys: personPasskeysSchema,
  PasskeyRemoved: passkeyRemovedSchema,
  PasskeysRemoved: passkeysRemovedSchema,
} as const;

export type ResponseComponent = keyof typeof RESPONSE_SCHEMAS;

// ---- answers built outside views.ts, tied to these at compile time -------------------------------

/** True when `Actual` fits `Published` and has no top-level member `Published` does not name. */
type Fits<Actual, Published> = [Actual] extends [Published] ? ([Exclude<keyof Actual, keyof Published>] extends [never] ? true : false) : false;
type Holds<T extends true> = T;
/** JSON has no read-only arrays: a producer's `readonly string[]` is sent as any other array. */
type Sent<V> = V extends readonly (infer U)[] ? U[] : V;
type AsSent<T> = { [K in keyof T]: Sent<T[K]> };

/** Fails to compile when a producer's type and the published shape part ways. */
export type ProducersFitTheirSchemas = [
  Holds<Fits<ReturnType<typeof discoveryDocument> & { constraint_operators: string[] }, z.infer<typeof discoverySchema>>>,
  Holds<Fits<LoadedOperator, z.infer<typeof operatorsSchema>['operators'][number]>>,
  Holds<Fits<BatchCallOutcome, z.infer<typeof batchResponseSchema>['responses'][number]>>,
  Holds<Fits<AsSent<AuditEvent>, z.infer<typeof auditEventSchema>>>,
];
