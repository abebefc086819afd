// The account page (DESIGN §8): a signed-in person sees their agents, hosts and passkeys and takes
// back what they approved, in a browser, over the same use cases as the people's JSON API
// (services/person-account.ts, people/passkeys.ts), so the page cannot decide differently from it.
// Thin, like every handler: read the form, call one service, redirect back (303) or render a page
// from http/device/pages/people-pages.ts. The page wrapper (http/device/session.ts) brings the session, the
// security headers and the refusal pages; the rules on top are the people's API's:
// - every form carries the session's CSRF token (checked first, so a forged form changes nothing);
// - revoking an agent, a grant or a host takes power away and needs no fresh sign-in;
// - unlinking a host and removing a passkey need a fresh one (SIGN_IN_FRESH_SECONDS), and a person
//   without it is sent to sign in before anything changes;
// - removing a passkey also needs a user-verified assertion of one of the person's passkeys, for a
//   challenge issued for that passkey's removal: the session alone cannot empty a person's passkeys;
// - setting up a host gives it default capabilities in the person's name, so it needs a fresh
//   sign-in too; the answer is a page with the enrollment token, shown that once (the host is made
//   when its machine binds its key with the token: services/enrollments.ts says why).
// Another person's ids answer exactly as unknown ones (404), as the services decide.
import express, { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { ApiError, isApiError } from '../../errors.ts';
import type { PersonServiceDeps } from '../../services/deps.ts';
import { listPasskeys, removePasskey } from '../../people/passkeys.ts';
import { setUpHostAsPerson } from '../../services/enrollments.ts';
import { myAgents, myHosts, revokeMyAgent, revokeMyGrant, revokeMyHost, unlinkMyHost } from '../../services/person-account.ts';
import type { PersonSession, SignedIn } from '../../people/sessions.ts';
import { pageSecurityHeaders, redirectTo, signInUrl, type PageWrapper } from './session.ts';
import { ACCOUNT_PATH } from './pages/device-pages.ts';
import { accountPage, enrollmentTokenPage, NOTICES, removePasskeyPage, type Notice } from './pages/people-pages.ts';

/**
 * Agents on one page: a page a person reads and scrolls, each agent with its grants and forms.
 * Fewer than the API's 200 (MAX_AGENTS_PER_PAGE), read the same bounded way, with a link to the next.
 */
const AGENTS_PER_PAGE = 50;

/** Where a machine that asks for `/` is sent: the protocol's discovery document (protocol §3). */
const DISCOVERY_PATH = '/.well-known/agent-configuration';

const id = z.string().min(1).max(128);
/** Passkey ids are the authenticator's credential ids, longer than ours (the people's API allows 1400). */
const passkeyId = z.string().min(1).max(1400);
const cursor = z.string().min(3).max(257);

const OUT_OF_DATE = 'This form is out of date. Go back, reload the page and try again.';

/** The set-up form's fields, bounded as the people's API bounds them (http/people.ts personHostBodySchema). */
const hostName = z.string().trim().min(1).max(200);
const defaultNames = z.string().max(13_000).transform((text) => text.split(/[\s,]+/).filter((name) => name !== '')).pipe(z.array(z.string().max(128)).max(100));
/** A JWK is a few hundred characters; the form allows some room for whitespace around it. */
const publicKeyText = z.string().max(16_000);

export function accountPagesRouter(deps: PersonServiceDeps, page: PageWrapper): Router {
  const router = Router();
  const { sessions } = deps;
  // An assertion is a few hundred bytes of JSON; passkey ids are at most 1400 characters.
  const forms = express.urlencoded({ extended: false, limit: '32kb', parameterLimit: 16 });

  // `/` names no document of its own: a browser is sent to the person's page (which sends them to
  // sign in first when needed), anything else to the discovery document. 303 See Other says exactly
  // that — the answer is another resource, fetched with GET — while a 307 would claim `/` itself had
  // moved, and a permanent 301/308 would be remembered by clients although the answer depends on
  // the Accept header (hence Vary: Accept). On a tie (`*/*`, or no Accept) the machine's answer wins.
  router.get('/', pageSecurityHeaders(), (req: Request, res: Response) => {
    res.vary('Accept');
    const wanted = req.accepts(['application/json', 'text/html']);
    res.redirect(303, wanted === 'text/html' ? ACCOUNT_PATH : DISCOVERY_PATH);
  });

  router.get(ACCOUNT_PATH, page(async (req, _res, session) => {
    if (!session.data) return redirectTo(signInUrl(req.originalUrl));
    const person = session.data.person;
    const from = req.query.cursor === undefined ? null : cursor.safeParse(req.query.cursor);
    if (from && !from.success) throw new ApiError('invalid_request', 'That page of agents does not exist. Start from the first page.');
    const [agents, hosts, passkeys] = await Promise.all([
      myAgents(deps, person.personId, from?.data ?? null, AGENTS_PER_PAGE),
      myHosts(deps, person.personId),
      deps.passkeys ? listPasskeys(deps, person.personId) : Promise.resolve(null),
    ]);
    const notice = typeof req.query.done === 'string' && Object.hasOwn(NOTICES, req.query.done) ? NOTICES[req.query.done as Notice] : undefined;
    return accountPage({
      personId: person.personId,
      csrfToken: session.data.csrfToken,
      nowMs: deps.clock.nowMs(),
      agents: agents.items,
      nextAgentsUrl: agents.nextCursor === null ? null : `${ACCOUNT_PATH}?cursor=${encodeURIComponent(agents.nextCursor)}`,
      laterPage: from !== null,
      hosts,
      passkeys,
      known: [deps.config.PROVIDER_NAME, ...hosts.flatMap((h) => (h.name ? [h.name] : []))],
      defaultable: deps.catalog.list().filter((c) => c.approval_strength !== 'presence').map((c) => c.name),
      plugins: (name) => deps.operators.get(name),
      describe: (capability) => deps.catalog.get(capability)?.description,
      notice,
    });
  }));

  /**
   * A form of this page, from the signed-in person who was shown it: the session's CSRF token first
   * (a refusal links back here), then the id fields, each answered as not found when it cannot be an id.
   */
  const formOf = (req: Request, res: Response, session: PersonSession) => {
    page.backTo(res, ACCOUNT_PATH);
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (!sessions.csrfMatches(session, body.csrf)) throw new ApiError('unauthorized', OUT_OF_DATE);
    const person: SignedIn = session.data!.person;
    const field = (name: string, schema: z.ZodString, notFound: () => ApiError): string => {
      const parsed = schema.safeParse(body[name]);
      if (!parsed.success) throw notFound();
      return parsed.data;
    };
    return { body, person, field };
  };
  const noAgent = () => new ApiError('agent_not_found', 'You have no agent with this id.');
  const noHost = () => new ApiError('host_not_found', 'You have no host with this id.');
  const noGrant = () => new ApiError('not_found', 'This agent of yours has no grant with this id.');
  const noPasskey = () => new ApiError('not_found', 'You have no passkey with this id.');
  const done = (notice: Notice) => redirectTo(`${ACCOUNT_PATH}?done=${notice}`);

  // Revocations only take power away: the CSRF token is enough, as in the people's API.
  type FormField = ReturnType<typeof formOf>['field'];
  const revocations: [path: string, revoke: (personId: string, field: FormField) => Promise<unknown>, notice: Notice][] = [
    ['agents/revoke', (personId, field) => revokeMyAgent(deps, personId, field('agent_id', id, noAgent), 'account_page'), 'agent_revoked'],
    ['grants/revoke', (personId, field) => revokeMyGrant(deps, personId, field('agent_id', id, noAgent), field('grant_id', id, noGrant), 'account_page'), 'grant_revoked'],
    ['hosts/revoke', (personId, field) => revokeMyHost(deps, personId, field('host_id', id, noHost), 'account_page'), 'host_revoked'],
  ];
  for (const [path, revoke, notice] of revocations) {
    router.post(`${ACCOUNT_PATH}/${path}`, forms, page(async (req, res, session) => {
      const { person, field } = formOf(req, res, session);
      await revoke(person.personId, field);
      return done(notice);
    }));
  }

  // Unlinking withdraws the trust an approval gave (services/hosts.ts withdrawHostTrust): like a
  // decision, it needs a recent sign-in, as the people's API asks.
  router.post(`${ACCOUNT_PATH}/hosts/unlink`, forms, page(async (req, res, session) => {
    const { person, field } = formOf(req, res, session);
    const hostId = field('host_id', id, noHost);
    if (!sessions.isFresh(session)) return redirectTo(signInUrl(ACCOUNT_PATH));
    await unlinkMyHost(deps, person.personId, hostId, 'account_page');
    return done('host_unlinked');
  }));

  // Setting up a host (services/enrollments.ts): like unlinking, it needs a recent sign-in, checked
  // before anything is made. With a key the host is made and the person comes back to the list;
  // without one this answer is the only place the enrollment token is ever shown.
  router.post(`${ACCOUNT_PATH}/hosts/new`, forms, page(async (req, res, session) => {
    const { body } = formOf(req, res, session);
    const name = hostName.safeParse(body.name);
    if (!name.success) throw new ApiError('invalid_request', 'Give the host a name, at most 200 characters.');
    const defaults = defaultNames.safeParse(body.default_capabilities ?? '');
    if (!defaults.success) throw new ApiError('invalid_request', 'Name at most 100 default capabilities, each as the catalog spells it.');
    const keyText = publicKeyText.safeParse(body.public_key ?? '');
    if (!keyText.success) throw new ApiError('invalid_request', 'The public key must be a JWK, written as JSON.');
    let publicKey: unknown;
    if (keyText.data.trim() !== '') {
      try {
        publicKey = JSON.parse(keyText.data);
      } catch {
        throw new ApiError('invalid_request', 'The public key must be a JWK, written as JSON.');
      }
    }
    if (!sessions.isFresh(session)) return redirectTo(signInUrl(ACCOUNT_PATH));
    const setup = await setUpHostAsPerson(deps, session, { name: name.data, defaultCapabilities: defaults.data, ...(publicKey === undefined ? {} : { publicKey }) }, 'account_page');
    return enrollmentTokenPage(setup.enrollment, setup.token, deps.config.issuer);
  }));

  // The removal's first step: the service refuses without an assertion and issues the challenge to
  // answer (in the session, bound to this passkey), which this page hands the browser.
  router.get(`${ACCOUNT_PATH}/passkeys/remove`, page(async (req, res, session) => {
    // A return path is at most 512 characters (http/device/sign-in.ts); a longer passkey id starts over from the list.
    if (!sessions.isFresh(session)) return redirectTo(signInUrl(req.originalUrl.length <= 512 ? req.originalUrl : ACCOUNT_PATH));
    page.backTo(res, ACCOUNT_PATH);
    const parsed = passkeyId.safeParse(req.query.passkey_id);
    if (!parsed.success) throw noPasskey();
    const passkeys = await listPasskeys(deps, session.data.person.personId);
    const passkey = passkeys.find((p) => p.id === parsed.data);
    if (!passkey) throw noPasskey();
    try {
      await removePasskey(deps, session, passkey.id, undefined);
    } catch (err) {
      const options = isApiError(err) ? err.extra?.assertion_options : undefined;
      if (options === undefined) throw err;
      return removePasskeyPage(passkey, passkeys.length - 1, options, session.data.csrfToken);
    }
    // removePasskey without an assertion never removes; reaching here would be a bug in it.
    throw new Error('removePasskey answered a call without an assertion');
  }));

  router.post(`${ACCOUNT_PATH}/passkeys/remove`, forms, page(async (req, res, session) => {
    const { body, field } = formOf(req, res, session);
    const removing = field('passkey_id', passkeyId, noPasskey);
    if (!sessions.isFresh(session)) return redirectTo(signInUrl(ACCOUNT_PATH));
    const assertion = typeof body.assertion === 'string' && body.assertion !== '' ? body.assertion : undefined;
    // Without an answer the service would issue a new challenge; on a page that is the GET's job.
    if (assertion === undefined) throw new ApiError('unauthorized', 'Removing a passkey needs one of your passkeys: use Remove on your agents page, and confirm with your device.');
    await removePasskey(deps, session, removing, assertion, 'account_page');
    return done('passkey_removed');
  }));

  return router;
}
