// A real OpenID Connect provider (oidc-provider 9) for tests, on a free 127.0.0.1 port, plus a
// headless browser stand-in that signs a person in with fetch and a small cookie jar. The provider
// is configured as a careful production one would be where it matters to the client: PKCE required
// for every client, its own signing key, no consent page (a grant is supplied), and claims for
// profile and email.
import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider, { type Adapter, type AdapterPayload, type Configuration, type KoaContextWithOIDC } from 'oidc-provider';

export interface TestAccount {
  name: string;
  email: string;
}

export interface TestOidcProvider {
  issuer: string;
  /** A confidential client (client_secret_basic). */
  clientId: string;
  clientSecret: string;
  /** A public client (token_endpoint_auth_method none) with the same redirect URIs. */
  publicClientId: string;
  /** While stalled, the provider accepts requests and never answers them, like a provider that hangs. */
  setStalled(stalled: boolean): void;
  close(): Promise<void>;
}

export const DEFAULT_ACCOUNTS: Record<string, TestAccount> = {
  alice: { name: 'Alice Example', email: 'alice@example.test' },
  bob: { name: 'Bob Example', email: 'bob@example.test' },
};

/** Starts a provider. The port is taken before the provider is configured, because the issuer must name it exactly. */
export async function startOidcProvider(options: { redirectUris: string[]; accounts?: Record<string, TestAccount> }): Promise<TestOidcProvider> {
  const accounts = options.accounts ?? DEFAULT_ACCOUNTS;
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clientId = `confidential-${randomUUID()}`;
  const clientSecret = randomBytes(32).toString('base64url');
  const publicClientId = `public-${randomUUID()}`;

  const provider = new Provider(issuer, providerConfiguration({ accounts, clientId, clientSecret, publicClientId, redirectUris: options.redirectUris }));
  const providerCallback = provider.callback();
  let stalled = false;
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    // The held request is answered by nobody; the client's own timeout or close() ends it.
    if (stalled) return;
    if (req.url?.startsWith('/interaction/')) {
      handleInteraction(provider, accounts, req, res).catch((err: unknown) => {
        res.statusCode = 500;
        res.end(`interaction failed: ${err instanceof Error ? err.message : String(err)}`);
      });
      return;
    }
    providerCallback(req, res);
  });

  return {
    issuer,
    clientId,
    clientSecret,
    publicClientId,
    setStalled: (value) => {
      stalled = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function providerConfiguration(input: { accounts: Record<string, TestAccount>; clientId: string; clientSecret: string; publicClientId: string; redirectUris: string[] }): Configuration {
  const common = { redirect_uris: input.redirectUris, grant_types: ['authorization_code'], response_types: ['code' as const] };
  return {
    clients: [
      { client_id: input.clientId, client_secret: input.clientSecret, token_endpoint_auth_method: 'client_secret_basic', ...common },
      { client_id: input.publicClientId, token_endpoint_auth_method: 'none', ...common },
    ],
    // By default only public clients must use PKCE; requiring it of all is what we expect of a provider.
    pkce: { required: () => true },
    // A key of its own, so the provider does not fall back to its published development keys (and warn).
    jwks: { keys: [signingKey()] },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    adapter: adapterFor(new Map()),
    findAccount: (_ctx, sub) => {
      const account = input.accounts[sub];
      if (account === undefined) return undefined;
      return { accountId: sub, claims: () => ({ sub, name: account.name, email: account.email, email_verified: true }) };
    },
    claims: { openid: ['sub'], profile: ['name'], email: ['email', 'email_verified'] },
    // The built-in development login page always adds a consent page; our own interaction is one form.
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    loadExistingGrant,
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
  };
}

/**
 * Supplies a grant that covers everything our client asks for, so the person is never shown a
 * consent page. An existing grant in the session is reused, which is what lets a second sign-in
 * within the same provider session skip the login form.
 */
async function loadExistingGrant(ctx: KoaContextWithOIDC) {
  const { session, client, provider } = ctx.oidc;
  if (session?.accountId === undefined || client === undefined) return undefined;
  const grantId = ctx.oidc.result?.consent?.grantId ?? session.grantIdFor(client.clientId);
  if (grantId !== undefined) {
    const existing = await provider.Grant.find(grantId);
    if (existing !== undefined) return existing;
  }
  const grant = new provider.Grant({ clientId: client.clientId, accountId: session.accountId });
  grant.addOIDCScope('openid profile email');
  await grant.save();
  return grant;
}

/** The login form: GET shows it, POST signs the named account in and hands control back to the provider. */
async function handleInteraction(provider: Provider, accounts: Record<string, TestAccount>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name !== 'login') {
    // With loadExistingGrant in place the provider should only ever ask for a login.
    res.statusCode = 500;
    res.end(`unexpected prompt ${details.prompt.name}`);
    return;
  }
  if (req.method === 'GET') {
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(
      `<!doctype html><title>Sign in</title><form method="post" action="/interaction/${details.uid}/login">` +
        `<label>Account <input name="login" autofocus></label><button type="submit">Sign in</button></form>`,
    );
    return;
  }
  const login = new URLSearchParams(await readBody(req)).get('login') ?? '';
  if (!Object.hasOwn(accounts, login)) {
    res.statusCode = 400;
    res.end('unknown account');
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 16_384) throw new Error('login form body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** RS256 is the algorithm a client expects when it registers none, so the test key is RSA. */
let cachedKey: Record<string, unknown> | undefined;
function signingKey(): Record<string, unknown> {
  cachedKey ??= {
    ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }),
    kid: randomUUID(),
    alg: 'RS256',
    use: 'sig',
  };
  return cachedKey;
}

/**
 * Storage for one provider, kept in a Map shared by its models. The provider's own memory adapter
 * would do, but it warns on every start that it is for development only; this one is as small and
 * stays quiet.
 */
type Store = Map<string, { payload: AdapterPayload; expiresAtMs: number }>;
function adapterFor(store: Store): (model: string) => Adapter {
  return (model) => new MapAdapter(model, store);
}

class MapAdapter implements Adapter {
  private readonly model: string;
  private readonly store: Store;
  constructor(model: string, store: Store) {
    this.model = model;
    this.store = store;
  }
  private key(id: string): string {
    return `${this.model}:${id}`;
  }
  async upsert(id: string, payload: AdapterPayload, expiresIn?: number): Promise<void> {
    this.store.set(this.key(id), { payload, expiresAtMs: expiresIn === undefined ? Infinity : Date.now() + expiresIn * 1000 });
  }
  async find(id: string): Promise<AdapterPayload | undefined> {
    const entry = this.store.get(this.key(id));
    if (entry === undefined) return undefined;
    if (entry.expiresAtMs <= Date.now()) {
      this.store.delete(this.key(id));
      return undefined;
    }
    return entry.payload;
  }
  async findByUid(uid: string): Promise<AdapterPayload | undefined> {
    for (const [key, entry] of this.store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.uid === uid && entry.expiresAtMs > Date.now()) return entry.payload;
    }
    return undefined;
  }
  async findByUserCode(userCode: string): Promise<AdapterPayload | undefined> {
    for (const [key, entry] of this.store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.userCode === userCode && entry.expiresAtMs > Date.now()) return entry.payload;
    }
    return undefined;
  }
  async consume(id: string): Promise<void> {
    const entry = this.store.get(this.key(id));
    if (entry !== undefined) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }
  async destroy(id: string): Promise<void> {
    this.store.delete(this.key(id));
  }
  async revokeByGrantId(grantId: string): Promise<void> {
    for (const [key, entry] of this.store) {
      if (entry.payload.grantId === grantId) this.store.delete(key);
    }
  }
}

/**
 * Cookies as a browser keeps them for one host: by name and path, dropped when the server expires
 * them. Reusing a jar across sign-ins keeps the provider's session, as a browser would.
 */
export class CookieJar {
  private readonly cookies = new Map<string, { name: string; value: string; path: string }>();
  /** How many times the login form was submitted with this jar, so a test can tell whether the provider asked again. */
  loginsSubmitted = 0;

  keep(response: Response, requestUrl: URL): void {
    for (const header of response.headers.getSetCookie()) {
      const [pair = '', ...attributes] = header.split(';').map((part) => part.trim());
      const equals = pair.indexOf('=');
      if (equals <= 0) continue;
      const name = pair.slice(0, equals);
      const value = pair.slice(equals + 1);
      let path = requestUrl.pathname.slice(0, requestUrl.pathname.lastIndexOf('/')) || '/';
      let expired = false;
      for (const attribute of attributes) {
        const [key = '', attributeValue = ''] = attribute.split('=', 2);
        const lowered = key.toLowerCase();
        if (lowered === 'path' && attributeValue.startsWith('/')) path = attributeValue;
        if (lowered === 'max-age' && Number(attributeValue) <= 0) expired = true;
        if (lowered === 'expires' && Date.parse(attributeValue) <= Date.now()) expired = true;
      }
      const key = `${name};${path}`;
      if (expired) this.cookies.delete(key);
      else this.cookies.set(key, { name, value, path });
    }
  }

  headerFor(url: URL): string | undefined {
    const matching = [...this.cookies.values()].filter(
      (cookie) => url.pathname === cookie.path || url.pathname.startsWith(cookie.path.endsWith('/') ? cookie.path : `${cookie.path}/`),
    );
    return matching.length > 0 ? matching.map((cookie) => `${cookie.name}=${cookie.value}`).join('; ') : undefined;
  }
}

/** A sign-in is seven or so requests; more than this means the provider is looping. */
const MAX_HEADLESS_STEPS = 15;

/**
 * Plays the browser's part of a sign-in: follows the provider's redirects, submits the login form
 * as `sub` when the provider shows it, and returns the callback URL the provider finally redirects
 * to (a URL off the provider's origin), without requesting it. A reused cookie jar keeps the
 * provider session, so the provider shows the form again only when it decides to (max_age).
 */
export async function signInHeadless(redirectUrl: string | URL, sub: string, options: { cookieJar?: CookieJar } = {}): Promise<URL> {
  const jar = options.cookieJar ?? new CookieJar();
  const providerOrigin = new URL(redirectUrl).origin;
  let url = new URL(redirectUrl);
  let body: string | undefined;
  for (let step = 0; step < MAX_HEADLESS_STEPS; step += 1) {
    const headers: Record<string, string> = {};
    const cookie = jar.headerFor(url);
    if (cookie !== undefined) headers.cookie = cookie;
    if (body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    const response = await fetch(url, { method: body === undefined ? 'GET' : 'POST', headers, body, redirect: 'manual', signal: AbortSignal.timeout(5_000) });
    jar.keep(response, url);
    const text = await response.text();
    const location = response.headers.get('location');
    if (response.status >= 300 && response.status < 400 && location !== null) {
      const next = new URL(location, url);
      if (next.origin !== providerOrigin) return next;
      url = next;
      body = undefined;
      continue;
    }
    const form = /<form method="post" action="([^"]+)"/.exec(text);
    if (response.status === 200 && form?.[1] !== undefined) {
      url = new URL(form[1], url);
      body = new URLSearchParams({ login: sub }).toString();
      jar.loginsSubmitted += 1;
      continue;
    }
    throw new Error(`headless sign-in stopped at ${url.pathname} with status ${response.status}: ${text.slice(0, 300)}`);
  }
  throw new Error(`headless sign-in did not reach the callback within ${MAX_HEADLESS_STEPS} steps`);
}
