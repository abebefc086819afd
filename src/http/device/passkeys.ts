// The page that adds a passkey (DESIGN §8: presence means a person with their authenticator).
// Thin: the rules are in people/passkeys.ts. A person holding passkeys proves one of them in the
// same ceremony; a person adding their first is sent to sign in again at the identity provider
// (credentials entered now, not the provider's session) before the page offers it.
import express, { Router } from 'express';
import { ApiError } from '../../errors.ts';
import type { PersonServiceDeps } from '../../services/deps.ts';
import { passkeyAddition, passkeyRegistrationOptions, registerPasskey } from '../../people/passkeys.ts';
import { redirectTo, signInUrl, type PageWrapper } from './session.ts';
import { addPasskeyPage } from './pages/device-pages.ts';
import { safeReturnTo } from './sign-in.ts';

export function passkeyPagesRouter(deps: PersonServiceDeps, page: PageWrapper): Router {
  const router = Router();
  const { sessions, logger } = deps;
  const forms = express.urlencoded({ extended: false, limit: '32kb', parameterLimit: 64 });

  router.get('/passkeys/new', page.fresh(async (req, _res, session) => {
    if (!deps.passkeys) {
      throw new ApiError('unauthorized', "Passkeys cannot work on this server: its address is an IP address. An administrator sets ISSUER to a host name (e.g. http://localhost:3000).");
    }
    const addition = await passkeyAddition(deps, session);
    if (addition.kind === 'needs_fresh_login') {
      return redirectTo(signInUrl(req.originalUrl, true));
    }
    const { registration, proof } = await passkeyRegistrationOptions(deps, session, addition);
    return addPasskeyPage(registration, proof, session.data.csrfToken, safeReturnTo(req.query.return_to));
  }));

  router.post('/passkeys', forms, page(async (req, _res, session) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (!sessions.csrfMatches(session, body.csrf)) throw new ApiError('unauthorized', 'This form is out of date. Go back, reload the page and try again.');
    if (!sessions.isFresh(session)) throw new ApiError('authentication_required', 'Sign in again to add a passkey.');
    const proof = typeof body.proof === 'string' && body.proof !== '' ? body.proof : undefined;
    const passkey = await registerPasskey(deps, session, typeof body.response === 'string' ? body.response : '', proof);
    logger.info('passkey added', { personId: session.data.person.personId, passkeyId: passkey.id });
    return redirectTo(safeReturnTo(body.return_to));
  }));

  return router;
}
