// Protocol §2: the discovery document, unauthenticated and cacheable for an hour.
import { approvalMethods } from '../services/approvals/ciba.ts';
import { Router } from 'express';
import type { Config } from '../config.ts';
import { spendAddressBudget } from '../services/budgets.ts';
import type { ServiceDeps } from '../services/deps.ts';

export const ENDPOINTS = {
  register: '/agent/register',
  capabilities: '/capability/list',
  describe_capability: '/capability/describe',
  execute: '/capability/execute',
  batch_execute: '/capability/batch-execute',
  request_capability: '/agent/request-capability',
  status: '/agent/status',
  reactivate: '/agent/reactivate',
  revoke: '/agent/revoke',
  revoke_host: '/host/revoke',
  rotate_key: '/agent/rotate-key',
  rotate_host_key: '/host/rotate-key',
  introspect: '/agent/introspect',
  revoke_capability: '/agent/revoke-capability',
  device_code: '/agent/device/code',
} as const;

export function discoveryDocument(config: Config, approvalMethods: string[]) {
  return {
    version: '1.0-draft',
    provider_name: config.PROVIDER_NAME,
    description: config.PROVIDER_DESCRIPTION,
    issuer: config.issuer,
    default_location: config.executeUrl,
    algorithms: config.ALGORITHMS,
    modes: config.MODES,
    // CIBA only where a person can be told (services/approvals/ciba.ts).
    approval_methods: approvalMethods,
    // Where people approve (RFC 8628's verification URI): an extension member, ignored by clients that do not know it.
    verification_uri: `${config.issuer}/device`,
    endpoints: ENDPOINTS,
  };
}

/**
 * Discovery, plus the constraint operators this server knows now (`constraint_operators`: an
 * extension member clients that do not know it ignore). Operators change when plugins are
 * reloaded, so the body is rebuilt when their list does, not on every request.
 */
export function discoveryRouter(deps: Pick<ServiceDeps, 'config' | 'limits' | 'operators' | 'notifier'>): Router {
  const router = Router();
  const { operators } = deps;
  const document = discoveryDocument(deps.config, approvalMethods(deps.notifier));
  let cached = { key: '', body: '' };
  router.get('/.well-known/agent-configuration', async (req, res) => {
    await spendAddressBudget(deps, req.ip);
    const names = operators.names().sort();
    const key = names.join(',');
    if (cached.key !== key || cached.body === '') cached = { key, body: JSON.stringify({ ...document, constraint_operators: names }) };
    // Short-lived: a plugin reload changes the operator list.
    res.set('Cache-Control', 'public, max-age=300').type('application/json').send(cached.body);
  });
  return router;
}
