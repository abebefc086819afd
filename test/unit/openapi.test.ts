import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { ENDPOINTS } from '../../src/http/discovery.ts';
import { openApiDocument } from '../../src/http/openapi.ts';

describe('the OpenAPI document is generated from the zod schemas', () => {
  const doc = openApiDocument(loadConfig({}));

  it('documents every endpoint that discovery advertises', () => {
    for (const path of Object.values(ENDPOINTS)) expect(doc.paths).toHaveProperty([path]);
  });

  it('carries the enforced bounds of the execute body', () => {
    const schema = (doc.paths['/capability/execute'].post as unknown as { requestBody: { content: { 'application/json': { schema: { properties: Record<string, { maxLength?: number }>; required: string[] } } } } }).requestBody.content['application/json'].schema;
    expect(schema.required).toEqual(['capability']);
    expect(schema.properties.capability?.maxLength).toBe(128);
  });

  it('lists every error code of the closed table', () => {
    expect(doc.components.schemas.Error.properties.error.enum).toContain('constraint_violated');
  });
});
