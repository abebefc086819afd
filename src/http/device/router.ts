// The people-facing pages (protocol §10, DESIGN §8), assembled: their security headers, their static
// files (a stylesheet and the pages' only scripts, the two files of the WebAuthn ceremonies; no
// script is inline), and one router each for sign-in (sign-in.ts), the approval page (approval.ts),
// the inbox of CIBA requests (inbox.ts), adding a passkey (passkeys.ts) and the account page
// (account.ts). Their templates are in pages/.
// Nothing in the protocol path uses these.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Router } from 'express';
import type { OidcSignIn } from '../../people/sign-in/oidc.ts';
import type { PersonServiceDeps } from '../../services/deps.ts';
import { accountPagesRouter } from './account.ts';
import { approvalPagesRouter } from './approval.ts';
import { inboxPagesRouter } from './inbox.ts';
import { STYLESHEET } from './pages/device-pages.ts';
import { passkeyPagesRouter } from './passkeys.ts';
import { pageSecurityHeaders, pageWrapper, PAGE_PATHS } from './session.ts';
import { signInRouter } from './sign-in.ts';

interface DevicePageDeps extends PersonServiceDeps {
  /** People sign in through this OpenID Connect provider; absent: not configured. */
  oidc?: OidcSignIn | undefined;
}

/** The pages' only scripts, read once: ours, and @simplewebauthn/browser's UMD bundle. */
const PASSKEYS_CLIENT = readFileSync(new URL('./pages/passkeys-client.js', import.meta.url), 'utf8');
// The package exports no path to its browser bundle, so it is found beside the package's entry.
const WEBAUTHN_BROWSER = readFileSync(
  join(dirname(dirname(createRequire(import.meta.url).resolve('@simplewebauthn/browser'))), 'dist', 'bundle', 'index.umd.min.js'),
  'utf8',
);

export function devicePagesRouter(deps: DevicePageDeps): Router {
  const router = Router();
  const page = pageWrapper(deps);

  router.use(PAGE_PATHS, pageSecurityHeaders());
  router.get('/static/agentgate.css', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/css').send(STYLESHEET);
  });
  router.get('/favicon.ico', (_req, res) => {
    res.status(204).end();
  });
  router.get('/static/passkeys.js', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/javascript').send(PASSKEYS_CLIENT);
  });
  router.get('/static/simplewebauthn-browser.js', (_req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').type('text/javascript').send(WEBAUTHN_BROWSER);
  });
  router.use(signInRouter(deps, page));
  router.use(passkeyPagesRouter(deps, page));
  router.use(accountPagesRouter(deps, page));
  router.use(approvalPagesRouter(deps, page));
  router.use(inboxPagesRouter(deps, page));

  return router;
}
