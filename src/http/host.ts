// Host resources (protocol §4.9, §4.10), and enrolling a host a person set up (docs/approving.md).
import { Router } from 'express';
import type { ServiceDeps } from '../services/deps.ts';
import { enrollHost } from '../services/enrollments.ts';
import { revokeHostByToken, rotateHostKey } from '../services/hosts.ts';
import { parseWith, tokenOf } from './parse.ts';
import { hostEnrollBodySchema, rotateHostKeyBodySchema } from './schemas.ts';
import { hostCreatedView } from './views.ts';

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

  // The enrollment token in the body says which person's host this is; the host JWT (Authorization)
  // proves the caller holds the key it binds. The service spends the address's enrollment budget
  // before it looks anything up (services/enrollments.ts enrollHost).
  router.post('/host/enroll', async (req, res) => {
    const body = parseWith(hostEnrollBodySchema, req.body, 'body');
    const { host } = await enrollHost(deps, { token: body.token, publicKey: body.public_key, hostJwt: tokenOf(req), name: body.name, clientIp: req.ip ?? 'unknown' });
    res.json(hostCreatedView(host));
  });

  return router;
}
