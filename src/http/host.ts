// Host resources (protocol §4.9, §4.10).
import { Router } from 'express';
import type { ServiceDeps } from '../services/deps.ts';
import { revokeHostByToken, rotateHostKey } from '../services/hosts.ts';
import { parseWith, tokenOf } from './parse.ts';
import { rotateHostKeyBodySchema } from './schemas.ts';

export function hostRouter(deps: ServiceDeps): Router {
  const router = Router();

  // Protocol §4.9
  router.post('/host/rotate-key', async (req, res) => {
    const body = parseWith(rotateHostKeyBodySchema, req.body, 'body');
    const host = await rotateHostKey(deps, tokenOf(req), body.public_key);
    res.json({ host_id: host.id, status: host.status });
  });

  // Protocol §4.10: no body; the host revokes itself and every agent with it.
  router.post('/host/revoke', async (req, res) => {
    const { host, agentsRevoked } = await revokeHostByToken(deps, tokenOf(req));
    res.json({ host_id: host.id, status: 'revoked', agents_revoked: agentsRevoked });
  });

  return router;
}
