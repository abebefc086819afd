// The command-line tool's HTTP client: every request has a deadline, answers are read up to a
// size cap, redirects are never followed (a bearer token must not travel to another address), and
// failures become the exit codes of errors.ts.
import { ServerRefused, ServerUnreachable } from './errors.ts';

/** Larger answers are refused: nothing the admin API or a capability answers comes close. */
const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

export interface JsonAnswer {
  status: number;
  /** The body as the server sent it (what --json prints). */
  text: string;
  body: unknown;
}

interface RequestOptions {
  /** Sent as `Authorization: Bearer`; never printed. */
  token?: string | undefined;
  json?: unknown;
  /** A policy artefact, sent as application/wasm (instead of `json`). */
  wasm?: Uint8Array;
}

export class HttpClient {
  readonly baseUrl: URL;
  readonly timeoutMs: number;

  constructor(baseUrl: URL, timeoutMs: number) {
    this.baseUrl = baseUrl;
    this.timeoutMs = timeoutMs;
  }

  /**
   * `path` under the base URL, keeping a base path (an agentgate behind `/auth/` stays there), with
   * the query parameters that have a value.
   */
  url(path: string, query: Record<string, string | undefined> = {}): URL {
    const url = new URL(this.baseUrl.pathname.replace(/\/+$/, '') + path, this.baseUrl.origin);
    for (const [name, value] of Object.entries(query)) if (value !== undefined) url.searchParams.set(name, value);
    return url;
  }

  /** Sends one request and answers its JSON; an error status throws ServerRefused. */
  async send(method: 'GET' | 'POST' | 'DELETE', url: URL, options: RequestOptions = {}): Promise<JsonAnswer> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    if (options.json !== undefined) headers['content-type'] = 'application/json';
    if (options.wasm !== undefined) headers['content-type'] = 'application/wasm';
    const signal = AbortSignal.timeout(this.timeoutMs);
    let status: number;
    let text: string;
    try {
      const res = await fetch(url, {
        method,
        headers,
        redirect: 'manual',
        signal,
        ...(options.json !== undefined ? { body: JSON.stringify(options.json) } : {}),
        ...(options.wasm !== undefined ? { body: options.wasm } : {}),
      });
      status = res.status;
      if (status >= 300 && status < 400) {
        await res.body?.cancel();
        const where = res.headers.get('location') ?? 'elsewhere';
        throw new ServerRefused(status, `http_${status}`, `the server redirects to ${where}; pass that address as --url`, '', null);
      }
      text = await readBounded(res);
    } catch (err) {
      if (err instanceof ServerRefused) throw err;
      throw new ServerUnreachable(unreachableMessage(err, url, this.timeoutMs));
    }
    const body = parseJson(text);
    if (status >= 400) {
      const record = isRecord(body) ? body : null;
      const code = typeof record?.error === 'string' ? record.error : `http_${status}`;
      const message = typeof record?.message === 'string' ? record.message : `the server answered ${status}`;
      throw new ServerRefused(status, code, message, text, record);
    }
    // 204: done, nothing to say (the shadow's removal).
    if (status === 204) return { status, text: '{}', body: {} };
    if (body === undefined) {
      throw new ServerRefused(status, 'invalid_response', `the answer of ${url.pathname} is not JSON; is ${this.baseUrl.origin} an agentgate server?`, text, null);
    }
    return { status, text, body };
  }
}

/** The body, up to MAX_ANSWER_BYTES; a larger one is cut off and refused. */
async function readBounded(res: Response): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  // Bounded: every round adds at least one byte, and the loop stops past the cap.
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_ANSWER_BYTES) {
      await reader.cancel();
      throw new ServerRefused(res.status, 'invalid_response', `the answer is larger than ${MAX_ANSWER_BYTES} bytes`, '', null);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(text: string): unknown {
  if (text.length === 0) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** Why nobody answered, without anything of the request but its address. */
function unreachableMessage(err: unknown, url: URL, timeoutMs: number): string {
  const name = err instanceof Error ? err.name : '';
  if (name === 'TimeoutError' || name === 'AbortError') return `no answer from ${url.origin} within ${timeoutMs} ms`;
  const cause = err instanceof Error ? (err.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  const detail = typeof cause?.code === 'string' ? cause.code : typeof cause?.message === 'string' ? cause.message : String(err);
  return `cannot reach ${url.origin} (${detail})`;
}
