// Every route the real app registers is in the OpenAPI document, and nothing the document lists is
// missing from the app. The routes are read from the Express app itself (its
// router's layers, recursively), so a route added later without documenting it fails here; only the
// pages people's browsers load, and static files, are left out, each named below with the reason.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openApiDocument } from '../../src/http/openapi.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

/** Not part of the API: HTML pages and their form posts, for a person in a browser, and static files. */
const NOT_IN_THE_API: Record<string, string> = {
  'GET /device': 'the approval page (HTML): verification_uri',
  'POST /device/decision': "the approval page's form",
  'GET /inbox': "the person's inbox of CIBA requests (HTML)",
  'GET /inbox/{approvalId}': 'one inbox item: the approval page of a CIBA request (HTML), where a notice links',
  'POST /inbox/decision': "an inbox item's form",
  'GET /passkeys/new': 'the page that adds a passkey (HTML)',
  'POST /passkeys': "that page's form",
  'GET /signin': 'the sign-in page (HTML)',
  'GET /signin/start': 'a redirect to the OpenID Connect provider',
  'GET /signin/callback': "the OpenID Connect provider's redirect back",
  'POST /signin/dev': "the development sign-in page's form",
  'POST /signout': "the pages' sign-out form",
  'GET /static/agentgate.css': "a static file of the pages",
  'GET /static/passkeys.js': 'a static file of the pages',
  'GET /static/simplewebauthn-browser.js': 'a static file of the pages',
  'GET /favicon.ico': 'a static file of the pages',
  'GET /': 'a redirect: a browser to the account page, anything else to /.well-known/agent-configuration (which is documented)',
  'GET /account': "the account page (HTML): a person's agents, hosts and passkeys",
  'POST /account/agents/revoke': "the account page's form",
  'POST /account/grants/revoke': "the account page's form",
  'POST /account/hosts/revoke': "the account page's form",
  'POST /account/hosts/unlink': "the account page's form",
  'POST /account/hosts/new': "the account page's form that sets up a host (without a key, its answer is the page that shows the enrollment token)",
  'GET /account/passkeys/remove': 'the page that removes a passkey (HTML)',
  'POST /account/passkeys/remove': "that page's form",
};

interface Layer {
  route?: { path: string | string[]; methods: Record<string, boolean | undefined> };
  handle?: { stack?: Layer[] };
  /** Express 5 (router 2): true for a router added with app.use(router), at the root. */
  slash?: boolean;
  rawPath?: unknown;
}

/** `METHOD /path` of every route in `stack` and the routers under it, `:param` written `{param}`. */
function registeredRoutes(stack: Layer[], mount = ''): string[] {
  return stack.flatMap((layer) => {
    if (layer.route) {
      const paths = ([] as string[]).concat(layer.route.path);
      const methods = Object.entries(layer.route.methods).filter(([, on]) => on).map(([method]) => method);
      if (methods.includes('_all')) throw new Error(`${paths.join(', ')}: a route for every method cannot be documented; name its methods`);
      return paths.flatMap((path) => methods.map((method) => `${method.toUpperCase()} ${mount}${openApiPath(path)}`));
    }
    if (!layer.handle?.stack) return [];
    // A router added under a path prefixes its routes with it (app.use('/x', router)).
    if (!layer.slash && typeof layer.rawPath !== 'string') throw new Error(`a router mounted at ${String(layer.rawPath)} cannot be read`);
    return registeredRoutes(layer.handle.stack, layer.slash ? mount : `${mount}${layer.rawPath as string}`);
  });
}

function openApiPath(expressPath: string): string {
  const converted = expressPath.replace(/:(\w+)/g, '{$1}');
  if (/[*?()]|\{(?!\w+\})/.test(converted)) throw new Error(`${expressPath}: only :param path syntax can be compared with the document`);
  return converted;
}

describe('every route of the app is in the OpenAPI document', () => {
  let server: TestServer;
  let registered: Set<string>;
  let documented: Set<string>;

  beforeAll(async () => {
    // With METRICS_TOKEN (and no METRICS_PORT), /metrics is served on the main port: one route more.
    server = await startTestServer({ env: { METRICS_TOKEN: 'metrics-token-0123456789' } });
    registered = new Set(registeredRoutes((server.app.app as unknown as { router: { stack: Layer[] } }).router.stack));
    const doc = openApiDocument(server.config);
    documented = new Set(Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`)));
  });
  afterAll(() => server.close());

  it('reads the routes of the real app (a sanity check of the walk itself)', () => {
    expect(registered.size).toBeGreaterThan(50);
    for (const route of ['POST /capability/execute', 'GET /admin/agents/{agentId}', 'POST /people/me/agents/{agentId}/grants/{grantId}/revoke', 'GET /metrics', 'GET /admin/audit', 'GET /device']) {
      expect(registered).toContain(route);
    }
  });

  it('documents every registered route, except pages and static files', () => {
    const undocumented = [...registered].filter((route) => !documented.has(route) && !(route in NOT_IN_THE_API));
    expect(undocumented, 'add these to src/http/openapi.ts (or, for a page or static file, to NOT_IN_THE_API with a reason)').toEqual([]);
  });

  it('lists no route the app does not serve, and leaves out only pages that exist', () => {
    const unserved = [...documented].filter((route) => !registered.has(route));
    expect(unserved, 'the document lists routes the app does not serve').toEqual([]);
    expect(Object.keys(NOT_IN_THE_API).filter((route) => !registered.has(route)), 'NOT_IN_THE_API names routes that no longer exist').toEqual([]);
    expect(Object.keys(NOT_IN_THE_API).filter((route) => documented.has(route)), 'NOT_IN_THE_API names documented routes').toEqual([]);
  });
});
