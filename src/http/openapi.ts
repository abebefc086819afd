// The OpenAPI document, generated from the same zod schemas the handlers parse with, so the
// published shapes cannot drift from the enforced ones. Served at GET /openapi.json.
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '../config.ts';
import { ERROR_STATUS } from '../errors.ts';
import { SESSION_COOKIE } from './device.ts';
import { CSRF_HEADER, personDecisionBodySchema, personGrantBodySchema } from './people.ts';
import * as schemas from './schemas.ts';

const json = (schema: z.ZodType) => {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
};

const errorBody = {
  type: 'object',
  required: ['error', 'message'],
  properties: {
    error: { type: 'string', enum: Object.keys(ERROR_STATUS) },
    message: { type: 'string' },
    violations: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, constraint: { type: 'object' }, actual: {} } } },
    unknown_operators: { type: 'array', items: { type: 'string' } },
    known_operators: { type: 'array', items: { type: 'string' } },
    invalid_capabilities: { type: 'array', items: { type: 'string' } },
  },
};

/** One item of a batch's answer: `data` when completed, `error` (the error body plus `code`) when failed. */
const batchResponseBody = {
  type: 'object',
  required: ['responses'],
  properties: {
    responses: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'status'],
        properties: {
          id: { type: 'string', description: "the request's id, or its index in the batch as a string" },
          status: { type: 'string', enum: ['completed', 'failed'] },
          data: { description: 'when completed: what execute would answer as data' },
          error: {
            allOf: [{ $ref: '#/components/schemas/Error' }],
            properties: { code: { type: 'string', description: 'the same value as error' }, retry_after: { type: 'integer', description: 'seconds, when a budget refused the call' } },
          },
        },
      },
    },
  },
};

const bearer = [{ bearer: [] }];
/** People's own API: the approval page's session cookie; every POST also repeats its CSRF token. */
const session = [{ session: [] }];
const csrfHeader = { name: CSRF_HEADER, in: 'header', required: true, schema: { type: 'string' }, description: 'the csrf_token of GET /people/me' };
const pathId = (name: string) => ({ name, in: 'path', required: true, schema: { type: 'string', minLength: 1, maxLength: 128 } });
const body = (schema: z.ZodType) => ({ required: true, content: { 'application/json': { schema: json(schema) } } });
const queryParams = (schema: z.ZodObject) =>
  Object.entries(json(schema).properties as Record<string, object>).map(([name, s]) => ({
    name, in: 'query', required: (json(schema).required as string[] | undefined)?.includes(name) ?? false, schema: s,
  }));
const responses = { '200': { description: 'success' }, default: { description: 'error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } };

export function openApiDocument(config: Config) {
  const op = (summary: string, extra: Record<string, unknown> = {}) => ({ summary, security: bearer, responses, ...extra });
  const personGet = (summary: string) => ({ summary, security: session, responses });
  const personPost = (summary: string, ids: string[], extra: Record<string, unknown> = {}) =>
    ({ summary, security: session, responses, parameters: [...ids.map(pathId), csrfHeader], ...extra });
  return {
    openapi: '3.1.0',
    info: { title: 'agentgate', version: '1.0-draft', description: 'Agent Auth Protocol authorization server' },
    servers: [{ url: config.issuer }],
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT (host+jwt or agent+jwt)' },
        session: { type: 'apiKey', in: 'cookie', name: SESSION_COOKIE, description: "the approval page's session (sign in at /signin)" },
      },
      schemas: { Error: errorBody, BatchResponse: batchResponseBody },
    },
    paths: {
      '/.well-known/agent-configuration': { get: { summary: 'Discovery document', responses } },
      '/agent/register': { post: op('Register an agent (host JWT with agent_public_key)', { requestBody: body(schemas.registerBodySchema) }) },
      '/agent/status': { get: op('Full agent view (host JWT)', { parameters: queryParams(schemas.statusQuerySchema) }) },
      '/agent/request-capability': { post: op('Request more capabilities (agent JWT)', { requestBody: body(schemas.requestCapabilityBodySchema) }) },
      '/agent/reactivate': { post: op('Reactivate an expired agent (host JWT)', { requestBody: body(schemas.agentIdBodySchema) }) },
      '/agent/revoke': { post: op('Revoke an agent (host JWT)', { requestBody: body(schemas.agentIdBodySchema) }) },
      '/agent/revoke-capability': { post: op('Revoke grants (agent or host JWT)', { requestBody: body(schemas.revokeCapabilityBodySchema) }) },
      '/agent/device/code': { post: op('A fresh RFC 8628 code for an agent waiting for approval (host JWT)', { requestBody: body(schemas.agentIdBodySchema) }) },
      '/agent/rotate-key': { post: op("Replace an agent's key (host JWT)", { requestBody: body(schemas.rotateAgentKeyBodySchema) }) },
      '/agent/introspect': { post: op('Validate an agent JWT (resource-server bearer token)', { requestBody: body(schemas.introspectBodySchema) }) },
      '/host/rotate-key': { post: op("Replace the host's key (host JWT, current key)", { requestBody: body(schemas.rotateHostKeyBodySchema) }) },
      '/host/revoke': { post: op('Revoke the host and its agents (host JWT)') },
      '/capability/list': { get: op('List capabilities (anonymous, host or agent JWT)', { parameters: queryParams(schemas.listQuerySchema) }) },
      '/capability/describe': { get: op('Describe one capability', { parameters: queryParams(schemas.describeQuerySchema) }) },
      '/capability/execute': { post: op('Execute a capability (agent JWT)', { requestBody: body(schemas.executeBodySchema) }) },
      '/capability/batch-execute': {
        post: op('Execute up to 50 calls under one agent JWT; each item completes or fails on its own', {
          requestBody: body(schemas.batchExecuteBodySchema),
          responses: { ...responses, '200': { description: 'one response per request, in request order', content: { 'application/json': { schema: { $ref: '#/components/schemas/BatchResponse' } } } } },
        }),
      },
      // People's own API (DESIGN §8): only the signed-in person's hosts, agents and approvals; any other id is 404.
      '/people/me': { get: personGet('Who is signed in, and the CSRF token every POST repeats') },
      '/people/me/hosts': { get: personGet('My hosts') },
      '/people/me/agents': { get: personGet('The agents of my hosts, with status and grants') },
      '/people/me/approvals': { get: personGet('Open approvals of my agents: each capability, description, constraints, reason') },
      '/people/me/approvals/{approvalId}': {
        post: personPost('Approve (some or all) or deny one of my open approvals (fresh sign-in)', ['approvalId'], { requestBody: body(personDecisionBodySchema) }),
      },
      '/people/me/agents/{agentId}/grants': {
        post: personPost('Grant a capability to my agent without being asked (fresh sign-in; the policy still decides)', ['agentId'], { requestBody: body(personGrantBodySchema) }),
      },
      '/people/me/agents/{agentId}/revoke': { post: personPost('Revoke my agent and its grants', ['agentId']) },
      '/people/me/agents/{agentId}/grants/{grantId}/revoke': { post: personPost("Revoke one of my agent's grants", ['agentId', 'grantId']) },
      '/people/me/hosts/{hostId}/revoke': { post: personPost('Revoke my host and all its agents', ['hostId']) },
      '/people/me/hosts/{hostId}/unlink': { post: personPost('Stop vouching for my host: it stays active but unlinked, its delegated agents are revoked', ['hostId']) },
    },
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
