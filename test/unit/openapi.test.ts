// The OpenAPI document (src/http/openapi.ts): a valid OpenAPI 3.1 document by a maintained validator
// (@readme/openapi-parser, the same check CI runs with `npm test`), generated from the zod schemas,
// with every operation's answers and refusals, and the security of every route. That every route the
// app serves is in it, and that real answers match it, is tested against a real server in
// test/integration/openapi.routes.test.ts and test/integration/openapi.conformance.test.ts.
import { compileErrors, validate } from '@readme/openapi-parser';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { ERROR_STATUS } from '../../src/errors.ts';
import { ENDPOINTS } from '../../src/http/discovery.ts';
import { openApiDocument } from '../../src/http/openapi.ts';

interface Schema {
  $ref?: string;
  type?: string;
  enum?: string[];
  required?: string[];
  properties?: Record<string, Schema & { maxLength?: number }>;
}
interface Response {
  $ref?: string;
  content?: Record<string, { schema: Schema }>;
}
interface Operation {
  operationId: string;
  security: Array<Record<string, string[]>>;
  requestBody?: { content: Record<string, { schema: Schema }> };
  responses: Record<string, Response>;
}
interface Document {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; responses: Record<string, Response>; securitySchemes: Record<string, unknown> };
}

const generated = openApiDocument(loadConfig({}));
const doc = generated as unknown as Document;
const operations = Object.entries(doc.paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, op]) => ({ path, method, op })));

describe('the OpenAPI document', () => {
  it('is a valid OpenAPI 3.1 document, without warnings, for @readme/openapi-parser', async () => {
    // The validator resolves references in place, so it gets a copy.
    const result = await validate(structuredClone(generated) as Parameters<typeof validate>[0]);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
    expect(result.warnings).toEqual([]);
    expect(result.specification).toBe('OpenAPI');
    expect(generated.openapi).toBe('3.1.0');
  });

  it('is checked by a validator with teeth: a copy missing a path parameter, or with a bad reference, is refused', async () => {
    const missingParameter = structuredClone(generated) as unknown as Document;
    delete (missingParameter.paths['/admin/hosts/{hostId}']!.get as Partial<Operation> & { parameters?: unknown }).parameters;
    expect((await validate(missingParameter as unknown as Parameters<typeof validate>[0])).valid).toBe(false);
    const badReference = structuredClone(generated) as unknown as Document;
    badReference.paths['/agent/register']!.post!.responses['200']!.content!['application/json']!.schema = { $ref: '#/components/schemas/NoSuchThing' };
    expect((await validate(badReference as unknown as Parameters<typeof validate>[0])).valid).toBe(false);
  });

  it('documents every endpoint that discovery advertises', () => {
    for (const path of Object.values(ENDPOINTS)) expect(doc.paths).toHaveProperty([path]);
  });

  it('carries the enforced bounds of the execute body (generated from the request schema)', () => {
    const schema = doc.paths['/capability/execute']!.post!.requestBody!.content['application/json']!.schema;
    expect(schema.required).toEqual(['capability']);
    expect(schema.properties?.capability?.maxLength).toBe(128);
  });

  it('lists every error code of the closed table, and each status only its own codes', () => {
    expect(doc.components.schemas.Error!.properties!.error!.enum!.sort()).toEqual(Object.keys(ERROR_STATUS).sort());
    for (const status of new Set(Object.values(ERROR_STATUS))) {
      const codes = Object.entries(ERROR_STATUS).filter(([, s]) => s === status).map(([code]) => code);
      expect(doc.components.schemas[`Error${status}`]!.properties!.error!.enum!.sort(), String(status)).toEqual(codes.sort());
      expect(doc.components.responses[`Error${status}`]!.content!['application/json']!.schema.$ref).toBe(`#/components/schemas/Error${status}`);
    }
  });

  it('gives every operation its success answer with a schema, and only refusals that exist', () => {
    for (const { path, method, op } of operations) {
      const where = `${method.toUpperCase()} ${path}`;
      const success = Object.keys(op.responses).filter((status) => status.startsWith('2'));
      expect(success, where).toHaveLength(1);
      // 204 answers nothing, so it has no content to describe.
      if (success[0] === '204') {
        expect(op.responses['204']!.content, where).toBeUndefined();
        continue;
      }
      const content = op.responses[success[0]!]!.content!;
      expect(Object.keys(content), where).toHaveLength(1);
      if (path !== '/metrics') expect(content['application/json']!.schema.$ref, where).toMatch(/^#\/components\/schemas\/\w+$/);
      for (const [status, response] of Object.entries(op.responses)) {
        if (Number(status) < 400) continue;
        // Refusals are the shared components, except /readyz's 503, which says what is not ready.
        if (response.$ref) expect(Object.values(ERROR_STATUS), `${where} ${status}`).toContain(Number(status));
        else expect(`${where} ${status}`).toBe('GET /readyz 503');
      }
    }
  });

  it('describes the answers the protocol names (spot checks of the generated schemas)', () => {
    const { schemas } = doc.components;
    expect(schemas.AgentView!.required).toEqual(expect.arrayContaining(['agent_id', 'host_id', 'status', 'agent_capability_grants']));
    expect(schemas.AgentView!.properties!.agent_capability_grants).toEqual({ type: 'array', items: { $ref: '#/components/schemas/Grant' } });
    expect(schemas.BatchResponse!.properties!.responses!.type).toBe('array');
    expect(schemas.NotReady!.properties!.error!.enum).toEqual(['service_unavailable']);
    expect(doc.paths['/readyz']!.get!.responses['503']!.content!['application/json']!.schema.$ref).toBe('#/components/schemas/NotReady');
    expect(doc.paths['/capability/execute']!.post!.responses).toHaveProperty('403');
    expect(doc.paths['/admin/hosts']!.post!.responses).toHaveProperty('201');
    expect(doc.paths['/admin/audit']!.get).toMatchObject({ operationId: 'adminReadAudit' });
  });

  it('names who may call each operation: host, agent, admin, introspection, session with CSRF, metrics', () => {
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(['adminToken', 'agentJwt', 'csrfToken', 'hostJwt', 'introspectionToken', 'metricsToken', 'session']);
    const security = (path: string, method: string) => doc.paths[path]![method]!.security;
    expect(security('/agent/register', 'post')).toEqual([{ hostJwt: [] }]);
    expect(security('/capability/execute', 'post')).toEqual([{ agentJwt: [] }]);
    expect(security('/capability/list', 'get')).toContainEqual({});
    expect(security('/agent/introspect', 'post')).toEqual([{ introspectionToken: [] }]);
    expect(security('/metrics', 'get')).toEqual([{ metricsToken: [] }]);
    expect(security('/healthz', 'get')).toEqual([]);
    for (const { path, method, op } of operations) {
      if (path.startsWith('/admin/')) expect(op.security, path).toEqual([{ adminToken: [] }]);
      if (path.startsWith('/people/')) expect(op.security, path).toEqual(method === 'get' ? [{ session: [] }] : [{ session: [], csrfToken: [] }]);
    }
  });
});
