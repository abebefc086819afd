// The OpenAPI 3.1 document, generated from the same zod schemas the handlers parse requests with
// (schemas.ts, and the people's and admin API's own) and the answers are built to (responses.ts,
// view-schemas.ts), so the published shapes cannot drift from the enforced ones. Served at
// GET /openapi.json.
//
// Every operation lists its success answer and the statuses it can refuse with; each refusal is
// the one `Error<status>` component, whose `error` enum is the codes src/errors.ts gives that
// status. test/unit/openapi.test.ts validates the document with @readme/openapi-parser;
// test/integration/openapi.routes.test.ts checks that every route the app registers is in it, and
// test/integration/openapi.conformance.test.ts that real answers match it.
import { STATUS_CODES } from 'node:http';
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '../config.ts';
import type { ERROR_STATUS } from '../errors.ts';
import { adminRemovePasskeysBodySchema, approvalsQuerySchema, auditQuerySchema, policyPreviewQuerySchema, policyReloadBodySchema } from './admin.ts';
import { sessionCookieName } from './device/session.ts';
import { CSRF_HEADER, passkeyRemovalBodySchema, personDecisionBodySchema, personGrantBodySchema, personHostBodySchema, personPageQuerySchema } from './people.ts';
import { codesWithStatus, ERROR_HTTP_STATUSES, errorSchemaFor, RESPONSE_SCHEMAS, type ResponseComponent } from './responses.ts';
import * as schemas from './schemas.ts';

/** A request schema as JSON Schema: what a client may send (`io: 'input'`: defaults make fields optional). */
const requestJson = (schema: z.ZodType) => {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
};

const id = z.string().min(1).max(128);

/** A status some error code has: only these have an `Error<status>` component to refer to. */
type ErrorHttpStatus = (typeof ERROR_STATUS)[keyof typeof ERROR_STATUS];

/** Who may call an operation: its security requirement, and the refusals that alone can cause. */
const AUTH = {
  none: { security: [], errors: [] },
  host: { security: [{ hostJwt: [] }], errors: [400, 401, 403, 429, 500, 503] },
  agent: { security: [{ agentJwt: [] }], errors: [400, 401, 403, 429, 500, 503] },
  hostOrAgent: { security: [{ agentJwt: [] }, { hostJwt: [] }], errors: [400, 401, 403, 429, 500, 503] },
  /** Anonymous (spending the caller address's budget), or a host's or an agent's JWT. */
  anyone: { security: [{}, { hostJwt: [] }, { agentJwt: [] }], errors: [400, 401, 403, 429, 500, 503] },
  introspection: { security: [{ introspectionToken: [] }], errors: [400, 401, 429, 500, 503] },
  /** 403 also when the admin API is off (no ADMIN_TOKEN configured). */
  admin: { security: [{ adminToken: [] }], errors: [401, 403, 500, 503] },
  person: { security: [{ session: [] }], errors: [401, 500, 503] },
  /** A POST of the people's API: the session, and its CSRF token repeated in a header. */
  personPost: { security: [{ session: [], csrfToken: [] }], errors: [401, 403, 500, 503] },
  metrics: { security: [{ metricsToken: [] }], errors: [401, 403, 500] },
} as const satisfies Record<string, { security: ReadonlyArray<Record<string, readonly string[]>>; errors: readonly ErrorHttpStatus[] }>;

interface OperationSpec {
  operationId: string;
  summary: string;
  description?: string;
  auth: keyof typeof AUTH;
  /** The success answer's component; `text/plain` for the metrics exposition. */
  ok: ResponseComponent | 'text/plain';
  /** 200 unless it creates something (201) or answers nothing (204). */
  okStatus?: 200 | 201 | 204;
  /** The body is a policy artefact (application/wasm) rather than JSON. */
  wasmBody?: true;
  /** Refusals beyond those of `auth`. */
  errors?: ErrorHttpStatus[];
  /** Answers other than the success and the `Error<status>` refusals, by status. */
  otherResponses?: Record<number, ResponseComponent>;
  body?: z.ZodType;
  query?: z.ZodObject;
}

const requestIdHeader = { 'X-Request-Id': { $ref: '#/components/headers/RequestId' } };
const jsonContent = (component: ResponseComponent | string) => ({ 'application/json': { schema: { $ref: `#/components/schemas/${component}` } } });

const tagOf = (path: string): string => {
  const first = path.split('/')[1] ?? '';
  if (first === '.well-known') return 'discovery';
  return ['agent', 'host', 'capability', 'admin', 'people'].includes(first) ? first : 'operations';
};

function operation(path: string, spec: OperationSpec) {
  const auth = AUTH[spec.auth];
  const pathParams = [...path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({ name, in: 'path', required: true, schema: requestJson(id) }));
  const query = spec.query ? requestJson(spec.query) : undefined;
  const queryParams = Object.entries((query?.properties ?? {}) as Record<string, object>).map(([name, schema]) => ({
    name, in: 'query', required: ((query?.required ?? []) as string[]).includes(name), schema,
  }));
  const parameters = [...pathParams, ...queryParams];
  const errors = [...new Set([...auth.errors, ...(spec.errors ?? [])])].sort((a, b) => a - b);
  const okStatus = spec.okStatus ?? 200;
  const okContent = spec.ok === 'text/plain' ? { 'text/plain': { schema: { type: 'string' } } } : jsonContent(spec.ok);
  return {
    operationId: spec.operationId,
    summary: spec.summary,
    ...(spec.description ? { description: spec.description } : {}),
    tags: [tagOf(path)],
    security: auth.security,
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(spec.body ? { requestBody: { required: true, content: { 'application/json': { schema: requestJson(spec.body) } } } } : {}),
    ...(spec.wasmBody ? { requestBody: { required: false, content: { 'application/wasm': { schema: { type: 'string', format: 'binary' } } } } } : {}),
    responses: {
      [String(okStatus)]: okStatus === 204
        ? { description: STATUS_CODES[okStatus] ?? 'no content', headers: requestIdHeader }
        : { description: STATUS_CODES[okStatus] ?? 'success', headers: requestIdHeader, content: okContent },
      ...Object.fromEntries(errors.map((status) => [String(status), { $ref: `#/components/responses/Error${status}` }])),
      ...Object.fromEntries(Object.entries(spec.otherResponses ?? {}).map(([status, component]) => [
        status, { description: STATUS_CODES[Number(status)] ?? status, headers: requestIdHeader, content: jsonContent(component) },
      ])),
    },
  };
}

/** Every response schema as a component; references between them stay references. */
function componentSchemas(): Record<string, unknown> {
  const registry = z.registry<{ id: string }>();
  for (const [name, schema] of Object.entries(RESPONSE_SCHEMAS)) registry.add(schema, { id: name });
  for (const status of ERROR_HTTP_STATUSES) registry.add(errorSchemaFor(status), { id: `Error${status}` });
  const { schemas: generated } = z.toJSONSchema(registry, { io: 'output', uri: (name) => `#/components/schemas/${name}` });
  // Each comes out as a document of its own; inside components it is a plain schema.
  return Object.fromEntries(Object.entries(generated).map(([name, { $schema: _dialect, $id: _id, ...schema }]) => [name, schema]));
}

/** One response per error status: its codes, and the headers some of them carry. */
function errorResponses() {
  return Object.fromEntries(ERROR_HTTP_STATUSES.map((status) => [`Error${status}`, {
    description: `${STATUS_CODES[status] ?? status}: ${codesWithStatus(status).join(', ')}`,
    headers: {
      ...requestIdHeader,
      ...(status === 429 ? { 'Retry-After': { description: 'seconds to wait before trying again', schema: { type: 'integer', minimum: 0 } } } : {}),
      ...(status === 401 ? { 'WWW-Authenticate': { description: 'where a challenge applies: how to authenticate', schema: { type: 'string' } } } : {}),
    },
    content: jsonContent(`Error${status}`),
  }]));
}

/** Every route, by path and method. Pages for people's browsers and static files are not part of the API. */
function paths(): Record<string, Record<string, OperationSpec>> {
  return {
    '/.well-known/agent-configuration': { get: { operationId: 'getDiscovery', summary: 'Discovery document', auth: 'none', ok: 'Discovery', errors: [429, 500, 503] } },
    '/openapi.json': { get: { operationId: 'getOpenApiDocument', summary: 'This document', auth: 'none', ok: 'OpenApiDocument' } },
    '/healthz': { get: { operationId: 'getHealth', summary: 'Liveness: the process serves HTTP (never fails because the store does)', auth: 'none', ok: 'Health' } },
    '/readyz': {
      get: {
        operationId: 'getReadiness', summary: 'Readiness: store reachable, policy and operators loaded', auth: 'none', ok: 'Ready', otherResponses: { 503: 'NotReady' },
      },
    },
    '/metrics': {
      get: {
        operationId: 'getMetrics', summary: 'Prometheus metrics', auth: 'metrics', ok: 'text/plain',
        description: 'Served on this port only when METRICS_TOKEN is set and METRICS_PORT is not; with METRICS_PORT, on that port instead.',
      },
    },
    '/agent/register': { post: { operationId: 'registerAgent', summary: 'Register an agent (host JWT with agent_public_key)', auth: 'host', ok: 'AgentView', errors: [404, 409], body: schemas.registerBodySchema } },
    '/agent/status': { get: { operationId: 'getAgentStatus', summary: 'Full agent view (host JWT)', auth: 'host', ok: 'AgentView', errors: [404], query: schemas.statusQuerySchema } },
    '/agent/request-capability': {
      post: { operationId: 'requestCapability', summary: 'Request more capabilities (agent JWT)', auth: 'agent', ok: 'RequestCapabilityResponse', errors: [409], body: schemas.requestCapabilityBodySchema },
    },
    '/agent/reactivate': { post: { operationId: 'reactivateAgent', summary: 'Reactivate an expired agent (host JWT)', auth: 'host', ok: 'AgentView', errors: [404, 409], body: schemas.agentIdBodySchema } },
    '/agent/revoke': { post: { operationId: 'revokeAgent', summary: 'Revoke an agent (host JWT)', auth: 'host', ok: 'AgentRevoked', errors: [404, 409], body: schemas.agentIdBodySchema } },
    '/agent/revoke-capability': {
      post: { operationId: 'revokeCapabilities', summary: 'Revoke grants (agent or host JWT)', auth: 'hostOrAgent', ok: 'CapabilitiesRevoked', errors: [404, 409], body: schemas.revokeCapabilityBodySchema },
    },
    '/agent/device/code': {
      post: {
        operationId: 'newDeviceCode', summary: 'A fresh RFC 8628 code for an agent waiting for approval (host JWT)', auth: 'host', ok: 'DeviceCode', errors: [404, 409], body: schemas.agentIdBodySchema,
      },
    },
    '/agent/rotate-key': { post: { operationId: 'rotateAgentKey', summary: "Replace an agent's key (host JWT)", auth: 'host', ok: 'AgentKeyRotated', errors: [404, 409], body: schemas.rotateAgentKeyBodySchema } },
    '/agent/introspect': {
      post: { operationId: 'introspectAgentToken', summary: 'Validate an agent JWT (resource-server bearer token)', auth: 'introspection', ok: 'Introspection', body: schemas.introspectBodySchema },
    },
    '/host/rotate-key': { post: { operationId: 'rotateHostKey', summary: "Replace the host's key (host JWT, current key)", auth: 'host', ok: 'HostKeyRotated', errors: [404, 409], body: schemas.rotateHostKeyBodySchema } },
    '/host/enroll': {
      post: {
        operationId: 'enrollHost', summary: "Bind a host's key with the enrollment token a person was given (the token is the credential)", auth: 'none', ok: 'HostCreated',
        errors: [400, 401, 409, 429, 500, 503], body: schemas.hostEnrollBodySchema,
        description: '401 enrollment_token_invalid (wrong, malformed or forgotten token) or enrollment_token_expired (its hour passed); 400 host_not_pending_enrollment (used already); '
          + '409 host_already_linked or conflict when a host holds the key already (the token is then not spent).',
      },
    },
    '/host/revoke': { post: { operationId: 'revokeHost', summary: 'Revoke the host and its agents (host JWT)', auth: 'host', ok: 'HostRevoked', errors: [404, 409] } },
    '/capability/list': { get: { operationId: 'listCapabilities', summary: 'List capabilities (anonymous, host or agent JWT)', auth: 'anyone', ok: 'CapabilityList', query: schemas.listQuerySchema } },
    '/capability/describe': {
      get: { operationId: 'describeCapability', summary: 'Describe one capability', auth: 'anyone', ok: 'CapabilityDescription', errors: [404], query: schemas.describeQuerySchema },
    },
    '/capability/execute': {
      post: {
        operationId: 'executeCapability', summary: 'Execute a capability (agent JWT)', auth: 'agent', ok: 'ExecuteResponse', errors: [404], body: schemas.executeBodySchema,
        description: 'Refused with 403 constraint_violated (with `violations`) when the arguments break a constraint of the grant, 403 capability_not_granted without a grant, 404 capability_not_found for a capability not offered.',
      },
    },
    '/capability/batch-execute': {
      post: {
        operationId: 'batchExecute', summary: 'Execute up to 50 calls under one agent JWT; each item completes or fails on its own', auth: 'agent', ok: 'BatchResponse', body: schemas.batchExecuteBodySchema,
        description: 'A refusal of the whole batch (a bad token, an inactive agent, a malformed batch, budgets that cannot cover every call) is answered as execute would; a refusal of one call is that item\'s `error`.',
      },
    },
    ...adminPaths(),
    ...peoplePaths(),
  };
}

/** The admin API (DESIGN §8), under the admin token. */
function adminPaths(): Record<string, Record<string, OperationSpec>> {
  const admin = (operationId: string, summary: string, ok: ResponseComponent, more: Partial<OperationSpec> = {}): OperationSpec => ({ operationId, summary, auth: 'admin', ok, ...more });
  const capabilityNotFound: Partial<OperationSpec> = { errors: [404] };
  /** A change to a record: 404 when there is none, 409 when concurrent writers kept it from winning. */
  const recordChange: Partial<OperationSpec> = { errors: [404, 409] };
  return {
    '/admin/hosts': {
      post: admin('adminCreateHost', 'Pre-register a host linked to a person, with default capabilities', 'HostView', { okStatus: 201, errors: [400, 409], body: schemas.adminCreateHostBodySchema }),
    },
    '/admin/hosts/{hostId}': { get: admin('adminGetHost', 'A host', 'HostView', { errors: [404] }) },
    '/admin/hosts/{hostId}/revoke': { post: admin('adminRevokeHost', 'Revoke a host and its agents', 'HostRevoked', recordChange) },
    '/admin/hosts/{hostId}/unlink': {
      post: admin('adminUnlinkHost', "Withdraw a host's link: it is pending again, its defaults cleared, its live agents revoked", 'HostUnlinked', recordChange),
    },
    '/admin/agents/{agentId}': { get: admin('adminGetAgent', 'The full agent view', 'AgentView', { errors: [404] }) },
    '/admin/agents/{agentId}/approve': {
      post: admin('adminApproveAgent', "Approve what the agent's open approval waits on", 'AgentView', { errors: [400, 404, 409], body: schemas.adminApproveBodySchema }),
    },
    '/admin/agents/{agentId}/deny': { post: admin('adminDenyAgent', "Deny the agent's open approval", 'AgentView', { errors: [400, 404, 409], body: schemas.adminDenyBodySchema }) },
    '/admin/agents/{agentId}/revoke': { post: admin('adminRevokeAgent', 'Revoke the agent and every grant it holds (idempotent)', 'AgentView', { errors: [400, 404, 409] }) },
    '/admin/agents/{agentId}/expire': { post: admin('adminExpireAgent', "End the agent's session now", 'AgentView', recordChange) },
    '/admin/agents/{agentId}/exceed-absolute-lifetime': {
      post: admin('adminExceedAbsoluteLifetime', 'Test hook: end the absolute lifetime now (403 unless INSECURE_TEST_HOOKS)', 'AgentView', recordChange),
    },
    '/admin/passkeys/remove': {
      post: admin('adminRemovePasskeys', "Remove a person's passkeys (one, or all): the way back for a lost authenticator", 'PasskeysRemoved', { errors: [400, 404], body: adminRemovePasskeysBodySchema }),
    },
    '/admin/approvals': { get: admin('adminListApprovals', 'Agents waiting for a person, oldest first', 'AdminApprovals', { errors: [400], query: approvalsQuerySchema }) },
    '/admin/policy': { get: admin('adminGetPolicy', 'The active policy artefact', 'PolicyInfo') },
    '/admin/policy/reload': {
      post: admin('adminReloadPolicy', 'Reload the policy artefact; a refused one keeps the old (422); with max_flips, one whose preview changes more recorded decisions is refused (409)', 'PolicyReloaded', {
        errors: [400, 404, 409, 422], body: policyReloadBodySchema,
      }),
    },
    '/admin/policy/preview': {
      post: admin('adminPreviewPolicy', 'What a candidate artefact (body, application/wasm; none: the file on disk) would change among the recorded decisions', 'PolicyPreview', {
        errors: [400, 404, 422], query: policyPreviewQuerySchema, wasmBody: true,
      }),
    },
    '/admin/policy/shadow': {
      post: admin('adminLoadShadowPolicy', "Load a shadow policy (body, application/wasm): it sees every live decision on this instance and decides none", 'ShadowLoaded', { errors: [400, 404], wasmBody: true }),
      get: admin('adminShadowPolicy', "This instance's shadow policy and its tally", 'ShadowStatus', { errors: [404] }),
      delete: admin('adminRemoveShadowPolicy', 'Remove the shadow policy', 'ShadowLoaded', { okStatus: 204, errors: [404] }),
    },
    '/admin/policy/shadow/promote': {
      post: admin('adminPromoteShadowPolicy', 'Make the shadow the live policy (golden decisions checked first; a refused one keeps the old, 422)', 'PolicyReloaded', { errors: [404, 422] }),
    },
    '/admin/operators': { get: admin('adminListOperators', 'The constraint operators: built-ins and plugins', 'Operators') },
    '/admin/operators/reload': { post: admin('adminReloadOperators', 'Re-import the operator plugins; a broken one keeps the old set (422)', 'OperatorsReloaded', { errors: [404, 422] }) },
    '/admin/capabilities/{name}/remove': { post: admin('adminRemoveCapability', "Take a capability out of this instance's catalog", 'CapabilityRemoval', capabilityNotFound) },
    '/admin/capabilities/{name}/restore': { post: admin('adminRestoreCapability', "Put a capability back into this instance's catalog", 'CapabilityRemoval', capabilityNotFound) },
    '/admin/audit': {
      get: admin('adminReadAudit', 'The audit trail, newest first, filtered; next_cursor goes on with older events', 'AuditPage', { errors: [400], query: auditQuerySchema }),
    },
  };
}

/** People's own API (DESIGN §8): only the signed-in person's hosts, agents and approvals; any other id is 404. */
function peoplePaths(): Record<string, Record<string, OperationSpec>> {
  const get = (operationId: string, summary: string, ok: ResponseComponent, more: Partial<OperationSpec> = {}): OperationSpec => ({ operationId, summary, auth: 'person', ok, ...more });
  const page = { errors: [400] as ErrorHttpStatus[], query: personPageQuerySchema };
  const post = (operationId: string, summary: string, ok: ResponseComponent, more: Partial<OperationSpec> = {}): OperationSpec =>
    ({ operationId, summary, auth: 'personPost', ok, errors: [404, 409], ...more });
  return {
    '/people/me': { get: get('getMe', 'Who is signed in, and the CSRF token every POST repeats', 'Person') },
    '/people/me/hosts': {
      get: get('listMyHosts', 'My hosts', 'PersonHosts'),
      post: post('createMyHost', 'Set up a host (fresh sign-in): with public_key it is made active and linked to me; without, the answer holds an enrollment token for POST /host/enroll', 'HostSetUp', {
        okStatus: 201, errors: [400, 409, 429], body: personHostBodySchema,
      }),
    },
    '/people/me/agents': { get: get('listMyAgents', 'The agents of my hosts, with status and grants, a bounded page at a time', 'PersonAgents', page) },
    '/people/me/approvals': {
      get: get('listMyApprovals', 'Open approvals among a page of my agents: each capability, description, constraints, reason', 'PersonApprovals', page),
    },
    '/people/me/inbox': { get: get('listMyInbox', 'CIBA approvals sent to me (my inbox), latest deadline first; decide them with decideMyApproval', 'PersonInbox') },
    '/people/me/passkeys': { get: get('listMyPasskeys', 'My passkeys (what approving a presence capability takes)', 'PersonPasskeys') },
    '/people/me/passkeys/{passkeyId}/remove': {
      post: post('removeMyPasskey', 'Remove one of my passkeys (fresh sign-in, and an assertion of one of my passkeys: without `assertion`, 403 answers `assertion_options`)', 'PasskeyRemoved', {
        errors: [400, 404], body: passkeyRemovalBodySchema,
      }),
    },
    '/people/me/approvals/{approvalId}': {
      post: post('decideMyApproval', 'Approve (some or all) or deny one of my open approvals (fresh sign-in)', 'AgentView', { errors: [400, 404, 409], body: personDecisionBodySchema }),
    },
    '/people/me/agents/{agentId}/grants': {
      post: post('grantToMyAgent', 'Grant a capability to my agent without being asked (fresh sign-in; the policy still decides)', 'PersonGrant', {
        okStatus: 201, errors: [400, 404, 409], body: personGrantBodySchema,
      }),
    },
    '/people/me/agents/{agentId}/revoke': { post: post('revokeMyAgent', 'Revoke my agent and its grants', 'AgentView') },
    '/people/me/agents/{agentId}/grants/{grantId}/revoke': { post: post('revokeMyGrant', "Revoke one of my agent's grants", 'PersonGrant') },
    '/people/me/hosts/{hostId}/revoke': { post: post('revokeMyHost', 'Revoke my host and all its agents', 'HostRevoked') },
    '/people/me/hosts/{hostId}/unlink': {
      post: post('unlinkMyHost', 'Stop vouching for my host: it is pending again (nothing more without a new approval), its defaults are cleared and its agents revoked', 'HostUnlinked'),
    },
  };
}

export function openApiDocument(config: Config) {
  return {
    openapi: '3.1.0',
    info: {
      title: 'agentgate',
      version: '1.0-draft',
      description: 'Agent Auth Protocol authorization server. Every refusal is `{error, message, ...}` with the status its code has; '
        + 'a 5xx also carries `request_id`. Before any route, the HTTP layer itself may answer 400 (not HTTP/1.1), 408 (request_timeout), '
        + '413 (chunk_extensions_too_large) or 431 (request_header_fields_too_large) with the same body.',
    },
    servers: [{ url: config.issuer }],
    tags: ['discovery', 'agent', 'host', 'capability', 'admin', 'people', 'operations'].map((name) => ({ name })),
    components: {
      securitySchemes: {
        hostJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A host+jwt, signed with the host key (protocol §5)' },
        agentJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An agent+jwt, signed with the agent key (protocol §5)' },
        introspectionToken: { type: 'http', scheme: 'bearer', description: "A resource server's INTROSPECTION_TOKEN (the ADMIN_TOKEN is accepted too)" },
        adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN; without one configured, the admin API answers 403' },
        session: {
          type: 'apiKey', in: 'cookie', name: sessionCookieName(config.issuer.startsWith('https://')),
          description: "The approval page's session (sign in at /signin); named with the __Host- prefix on https",
        },
        csrfToken: { type: 'apiKey', in: 'header', name: CSRF_HEADER, description: 'The csrf_token of GET /people/me, repeated on every POST of the people\'s API' },
        metricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN' },
      },
      headers: {
        RequestId: { description: "This request's id, quoted in 5xx bodies and in every log line about it", schema: { type: 'string' } },
      },
      schemas: componentSchemas(),
      responses: errorResponses(),
    },
    paths: Object.fromEntries(Object.entries(paths()).map(([path, methods]) => [
      path, Object.fromEntries(Object.entries(methods).map(([method, spec]) => [method, operation(path, spec)])),
    ])),
  };
}

export function openApiRouter(config: Config): Router {
  const router = Router();
  const document = JSON.stringify(openApiDocument(config));
  router.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(document);
  });
  return router;
}
