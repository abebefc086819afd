// People's own API (DESIGN §8): JSON over the approval page's session, for a
// person's own hosts, agents and approvals. Thin, like every handler: parse with zod, call one
// service in services/person-account.ts, shape the answer with http/views.ts.
//
// Authentication is the page's session cookie (HttpOnly, SameSite=Lax). A cookie is sent by the
// browser whoever made the request, so every POST must also repeat the session's CSRF token in the
// X-CSRF-Token header (GET /people/me gives it out): a page on another origin can neither read the
// token nor set that header without a CORS preflight, which this server never allows.
import { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { definedOnly } from '../common/defined-only.ts';
import type { Constraints } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import { listPasskeys, removePasskey } from '../people/passkeys.ts';
import type { PersonSession, SignedIn } from '../people/sessions.ts';
import type { PersonServiceDeps } from '../services/deps.ts';
import { setUpHostAsPerson } from '../services/enrollments.ts';
import * as people from '../services/person-account.ts';
import { readCookie, secureCookies, sessionCookieName } from './device/session.ts';
import { parseWith } from './parse.ts';
import { constraintsSchema } from './schemas.ts';
import { agentView, grantView, hostSetupView, hostView, type ViewContext } from './views.ts';

export const CSRF_HEADER = 'X-CSRF-Token';

const id = z.string().min(1).max(128);
const capabilityName = z.string().min(1).max(128);

/** `POST /people/me/approvals/:approvalId` */
export const personDecisionBodySchema = z.object({
  verdict: z.enum(['approve', 'deny']),
  capabilities: z.array(capabilityName).max(100).optional().describe("approve only these (the approval's others are denied); all when absent"),
});

/** `GET /people/me/agents` and `/people/me/approvals`: one bounded page of agents at a time. */
export const personPageQuerySchema = z.object({
  cursor: z.string().min(3).max(257).optional().describe('the next_cursor of the previous page'),
}).strict();

/** `POST /people/me/passkeys/:passkeyId/remove` */
export const passkeyRemovalBodySchema = z.object({
  assertion: z.record(z.string(), z.unknown()).optional()
    .describe('a WebAuthn assertion (as @simplewebauthn/browser answers) of one of my passkeys, for the assertion_options the call without it answered'),
}).strict();

/** `POST /people/me/hosts`: a host I set up, with its key now or an enrollment token for it to bind one. */
export const personHostBodySchema = z.object({
  name: z.string().min(1).max(200).regex(/\S/, 'must not be blank'),
  default_capabilities: z.array(capabilityName).max(100).default([]).describe('what agents it starts for me get without asking (never a presence capability)'),
  public_key: z.record(z.string(), z.unknown()).optional().describe("the host's public JWK; without it the answer holds an enrollment token for the host to bind its key with POST /host/enroll"),
});

/** `POST /people/me/agents/:agentId/grants` */
export const personGrantBodySchema = z.object({
  capability: capabilityName,
  constraints: constraintsSchema.optional(),
});

const iso = (ms: number) => new Date(ms).toISOString();

/** A path parameter that is an id; anything longer than an id can be is not one of yours either. */
const idParam = (value: string | undefined, notFound: () => ApiError): string => {
  const parsed = id.safeParse(value);
  if (!parsed.success) throw notFound();
  return parsed.data;
};

interface Signed {
  session: PersonSession;
  person: SignedIn;
}

export function peopleApiRouter(deps: PersonServiceDeps): Router {
  const router = Router();
  const { sessions } = deps;
  const view = (): ViewContext => ({ config: deps.config, catalog: deps.catalog, userCodes: deps.userCodes, nowMs: deps.clock.nowMs() });
  const signed = (res: Response) => res.locals.people as Signed;
  const cookieName = sessionCookieName(secureCookies(deps.config));

  // Every answer is about one person: never cached. The session must be signed in (401); a POST
  // must carry the session's CSRF token (403). Using the API keeps the session alive, as the page does.
  router.use('/people', async (req: Request, res: Response, next: NextFunction) => {
    res.set('Cache-Control', 'no-store');
    const session = await sessions.load(readCookie(req, cookieName));
    const person = people.signedInPerson(session);
    if (req.method !== 'GET' && req.method !== 'HEAD' && !sessions.csrfMatches(session, req.get(CSRF_HEADER))) {
      throw new ApiError('unauthorized', `${CSRF_HEADER} must repeat the csrf_token of GET /people/me`);
    }
    await sessions.save(session);
    res.locals.people = { session, person } satisfies Signed;
    next();
  });

  router.get('/people/me', (_req, res) => {
    const { session, person } = signed(res);
    res.json(definedOnly({
      person_id: person.personId,
      name: person.name,
      email: person.email,
      csrf_token: session.data!.csrfToken,
      signed_in_at: iso(person.signedInAtMs),
    }));
  });

  router.get('/people/me/hosts', async (_req, res) => {
    const hosts = await people.myHosts(deps, signed(res).person.personId);
    res.json({ hosts: hosts.map(hostView) });
  });

  // A host I set up: with its key it is made now, active and linked to me; without one the answer
  // holds an enrollment token, shown this once (services/enrollments.ts).
  router.post('/people/me/hosts', async (req, res) => {
    const body = parseWith(personHostBodySchema, req.body, 'body');
    const setup = await setUpHostAsPerson(deps, signed(res).session, { name: body.name, defaultCapabilities: body.default_capabilities, publicKey: body.public_key }, 'people_api');
    res.status(201).json(hostSetupView(setup));
  });

  router.get('/people/me/agents', async (req, res) => {
    const { cursor } = parseWith(personPageQuerySchema, req.query, 'query');
    const page = await people.myAgents(deps, signed(res).person.personId, cursor ?? null);
    const ctx = view();
    res.json({ agents: page.items.map(({ snapshot }) => agentView(snapshot, ctx)), next_cursor: page.nextCursor });
  });

  router.get('/people/me/approvals', async (req, res) => {
    const { cursor } = parseWith(personPageQuerySchema, req.query, 'query');
    const page = await people.myApprovals(deps, signed(res).person.personId, cursor ?? null);
    res.json({ approvals: page.items.map(approvalForPersonView), next_cursor: page.nextCursor });
  });

  // CIBA approvals sent to me (services/approvals/ciba.ts), latest deadline first; decided with POST /people/me/approvals/:approvalId.
  router.get('/people/me/inbox', async (_req, res) => {
    const items = await people.myInbox(deps, signed(res).person.personId);
    res.json({ approvals: items.map(approvalForPersonView) });
  });

  // Every passkey added or removed is in the audit trail; here the person sees and removes them.
  router.get('/people/me/passkeys', async (_req, res) => {
    const passkeys = await listPasskeys(deps, signed(res).person.personId);
    res.json({
      passkeys: passkeys.map((p) => definedOnly({
        passkey_id: p.id, created_at: iso(p.createdAtMs), last_used_at: p.lastUsedAtMs === undefined ? undefined : iso(p.lastUsedAtMs), transports: p.transports,
      })),
    });
  });

  // Removing takes a fresh sign-in and one of the person's passkeys (people/passkeys.ts says why):
  // the first call answers 403 with `assertion_options`, the second carries the `assertion`.
  router.post('/people/me/passkeys/:passkeyId/remove', async (req, res) => {
    const passkeyId = z.string().min(1).max(1400).safeParse(req.params.passkeyId);
    if (!passkeyId.success) throw new ApiError('not_found', 'you have no passkey with this id');
    const { session } = signed(res);
    people.decidingPerson(deps, session);
    const body = parseWith(passkeyRemovalBodySchema, req.body ?? {}, 'body');
    try {
      await removePasskey(deps, session, passkeyId.data, body.assertion === undefined ? undefined : JSON.stringify(body.assertion));
    } finally {
      // The challenge issued, or the one used up, is the session's to keep.
      await sessions.save(session);
    }
    res.json({ passkey_id: passkeyId.data, removed: true });
  });

  router.post('/people/me/approvals/:approvalId', async (req, res) => {
    const approvalId = idParam(req.params.approvalId, () => new ApiError('not_found', 'you have no open approval with this id'));
    const body = parseWith(personDecisionBodySchema, req.body, 'body');
    const snapshot = await people.decideMyApproval(deps, signed(res).session, approvalId, body);
    deps.logger.info('approval decided through the people API', {
      agentId: snapshot.agent.id, approvalId, verdict: body.verdict, personId: signed(res).person.personId,
    });
    res.json(agentView(snapshot, view()));
  });

  router.post('/people/me/agents/:agentId/grants', async (req, res) => {
    const agentId = idParam(req.params.agentId, () => new ApiError('agent_not_found', 'you have no agent with this id'));
    const body = parseWith(personGrantBodySchema, req.body, 'body');
    const { snapshot, grant } = await people.grantToMyAgent(deps, signed(res).session, agentId, {
      capability: body.capability, constraints: body.constraints as Constraints | undefined,
    });
    res.status(201).json({ agent_id: snapshot.agent.id, grant: grantView(grant, deps.catalog) });
  });

  router.post('/people/me/agents/:agentId/revoke', async (req, res) => {
    const agentId = idParam(req.params.agentId, () => new ApiError('agent_not_found', 'you have no agent with this id'));
    res.json(agentView(await people.revokeMyAgent(deps, signed(res).person.personId, agentId), view()));
  });

  router.post('/people/me/agents/:agentId/grants/:grantId/revoke', async (req, res) => {
    const agentId = idParam(req.params.agentId, () => new ApiError('agent_not_found', 'you have no agent with this id'));
    const grantId = idParam(req.params.grantId, () => new ApiError('not_found', 'this agent of yours has no grant with this id'));
    const { snapshot, grant } = await people.revokeMyGrant(deps, signed(res).person.personId, agentId, grantId);
    res.json({ agent_id: snapshot.agent.id, grant: grantView(grant, deps.catalog) });
  });

  router.post('/people/me/hosts/:hostId/revoke', async (req, res) => {
    const hostId = idParam(req.params.hostId, () => new ApiError('host_not_found', 'you have no host with this id'));
    const { host, agentsRevoked } = await people.revokeMyHost(deps, signed(res).person.personId, hostId);
    res.json({ host_id: host.id, status: host.status, agents_revoked: agentsRevoked });
  });

  // The host is pending again, its defaults cleared, its agents revoked (services/hosts.ts withdrawHostTrust says why).
  router.post('/people/me/hosts/:hostId/unlink', async (req, res) => {
    const hostId = idParam(req.params.hostId, () => new ApiError('host_not_found', 'you have no host with this id'));
    const { host, agentsRevoked } = await people.unlinkMyHost(deps, signed(res).person.personId, hostId);
    res.json({ host_id: host.id, status: host.status, linked: host.userId !== undefined, agents_revoked: agentsRevoked });
  });

  return router;
}

/** An open approval as the API shows it (snake_case, ISO times, every grant with its id). */
function approvalForPersonView(approval: people.MyApproval) {
  const { agent, host } = approval;
  return {
    approval_id: approval.approvalId,
    method: approval.method,
    ...(approval.bindingMessage === undefined ? {} : { binding_message: approval.bindingMessage }),
    expires_at: iso(approval.expiresAtMs),
    registration: approval.registration,
    agent: definedOnly({ agent_id: agent.id, name: agent.name, mode: agent.mode, status: agent.status, reason: agent.reason }),
    host: definedOnly({ host_id: host.id, name: host.name, linked: host.linked }),
    capabilities: approval.requested.map((r) => definedOnly({
      grant_id: r.grantId,
      capability: r.capability,
      description: r.description,
      approval_strength: r.approvalStrength,
      constraints: r.constraints,
      reason: r.reason,
    })),
  };
}
