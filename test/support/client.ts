// A small protocol client for integration tests, driving a TestServer over real HTTP.
import { ADMIN_TOKEN, type TestServer } from './server.ts';
import { agentJwt, hostJwt, newEd25519, type JwtOptions, type TestKey } from './keys.ts';

export interface HttpResult {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

export async function http(
  method: string, url: string, options: { token?: string; json?: unknown; body?: string | Uint8Array; headers?: Record<string, string>; signal?: AbortSignal | undefined } = {},
): Promise<HttpResult> {
  const headers: Record<string, string> = { accept: 'application/json', ...(options.headers ?? {}) };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  let body: string | Uint8Array | undefined;
  if (options.json !== undefined) body = JSON.stringify(options.json);
  else if (options.body !== undefined) body = options.body;
  if (body !== undefined) headers['content-type'] ??= 'application/json';
  const timeout = AbortSignal.timeout(10_000);
  const res = await fetch(url, { method, headers, body, signal: options.signal ? AbortSignal.any([options.signal, timeout]) : timeout });
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export interface TestAgent {
  id: string;
  key: TestKey;
  host: TestKey;
  registration: any;
}

/** A protocol client bound to one test server. */
export class Client {
  readonly server: TestServer;
  constructor(server: TestServer) {
    this.server = server;
  }

  get issuer() {
    return this.server.config.issuer;
  }

  get executeUrl() {
    return this.server.config.executeUrl;
  }

  /** Seconds on the server's (manual) clock, for signing after the clock moved. */
  get now() {
    return Math.floor(this.server.clock.nowMs() / 1000);
  }

  url(path: string) {
    return `${this.server.baseUrl}${path}`;
  }

  hostToken(host: TestKey, options: JwtOptions & { agentKey?: TestKey } = {}) {
    return hostJwt(host, this.issuer, { now: this.now, ...options });
  }

  agentToken(agent: TestAgent, options: JwtOptions & { capabilities?: string[]; aud?: string } = {}) {
    return agentJwt(agent, options.aud ?? this.issuer, { now: this.now, ...options });
  }

  admin(method: string, path: string, json?: unknown) {
    return http(method, this.url(path), { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });
  }

  async register(host: TestKey, body: Record<string, unknown>, options: { agentKey?: TestKey; token?: string; raw?: string } = {}) {
    const agentKey = options.agentKey ?? (await newEd25519());
    const token = options.token ?? (await this.hostToken(host, { agentKey }));
    const res = await http('POST', this.url('/agent/register'), {
      token,
      ...(options.raw !== undefined ? { body: options.raw } : { json: { name: 'test-agent', ...body } }),
    });
    const agent: TestAgent | null = res.status === 200 ? { id: res.json.agent_id, key: agentKey, host, registration: res.json } : null;
    return { res, agent };
  }

  /** A host pre-registered and linked by the admin API with these default capabilities. */
  async linkedHost(defaults: string[] = []): Promise<TestKey> {
    const host = await newEd25519();
    const res = await this.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: defaults, user_id: 'user-1' });
    if (res.status !== 201) throw new Error(`admin host creation failed: ${res.status} ${res.text}`);
    return host;
  }

  /**
   * An active delegated agent under a linked host holding `capabilities` (names or {name,
   * constraints}). The host's defaults pre-approve them, except those that need presence, which no
   * default can grant: the admin approves those, an explicit decision recorded in the trail.
   */
  async activeAgent(capabilities: Array<string | { name: string; constraints?: unknown }> = ['echo']): Promise<TestAgent> {
    const names = capabilities.map((c) => (typeof c === 'string' ? c : c.name));
    const presence = new Set(names.filter((name) => this.server.catalog.get(name)?.approval_strength === 'presence'));
    const host = await this.linkedHost(names.filter((name) => !presence.has(name)));
    const { res, agent } = await this.register(host, { mode: 'delegated', capabilities });
    if (agent && res.json.status === 'pending' && presence.size > 0) {
      const approved = await this.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1' });
      if (approved.status !== 200 || approved.json.status !== 'active') throw new Error(`expected the admin to approve: ${approved.status} ${approved.text}`);
      return { ...agent, registration: approved.json };
    }
    if (!agent || res.json.status !== 'active') throw new Error(`expected an active agent: ${res.status} ${res.text}`);
    return agent;
  }

  status(host: TestKey, agentId: string | undefined, token?: Promise<string> | string) {
    return (async () => http('GET', this.url(`/agent/status${agentId === undefined ? '' : `?agent_id=${encodeURIComponent(agentId)}`}`), { token: await (token ?? this.hostToken(host)) }))();
  }

  async hostPost(path: string, host: TestKey, json?: unknown, token?: string) {
    return http('POST', this.url(path), { token: token ?? (await this.hostToken(host)), ...(json === undefined ? {} : { json }) });
  }

  async execute(agent: TestAgent, capability: string, args?: unknown, options: JwtOptions & { capabilities?: string[]; aud?: string; token?: string } = {}) {
    const token = options.token ?? (await this.agentToken(agent, { aud: this.executeUrl, ...options }));
    return http('POST', this.executeUrl, { token, json: args === undefined ? { capability } : { capability, arguments: args } });
  }

  /** POST /capability/batch-execute; the token's audience is the execute location, as for execute. */
  async batchExecute(agent: TestAgent, requests: unknown, options: JwtOptions & { capabilities?: string[]; aud?: string; token?: string } = {}) {
    const token = options.token ?? (await this.agentToken(agent, { aud: this.executeUrl, ...options }));
    return http('POST', this.url('/capability/batch-execute'), { token, json: { requests } });
  }

  async requestCapability(agent: TestAgent, body: unknown, options: JwtOptions = {}) {
    return http('POST', this.url('/agent/request-capability'), { token: await this.agentToken(agent, options), json: body });
  }
}

/** Asserts nothing; returns `status error` for compact expectations. */
export const code = (res: HttpResult) => `${res.status} ${res.json?.error ?? ''}`.trim();
