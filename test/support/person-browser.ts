// A person's browser for page tests that need no real browser: fetch with a cookie jar, redirects
// not followed unless asked, and helpers to read a page's CSRF token and sign in.
import { expect } from 'vitest';

/** A person's browser: a cookie jar, no redirects followed unless asked. */
export class PersonBrowser {
  readonly #base: string;
  /** The cookies this browser holds, by name. */
  readonly jar = new Map<string, string>();
  constructor(base: string) {
    this.#base = base;
  }

  /** The Cookie header this browser sends. */
  get cookie(): string {
    return [...this.jar].map(([name, value]) => `${name}=${value}`).join('; ');
  }

  /** Replaces the jar with one cookie header's worth (e.g. another browser's, or an attacker's). */
  set cookie(header: string) {
    this.jar.clear();
    for (const part of header.split(';')) {
      const [name, ...rest] = part.trim().split('=');
      if (name) this.jar.set(name, rest.join('='));
    }
  }

  async request(method: string, path: string, form?: Record<string, string | string[]>) {
    const headers: Record<string, string> = {};
    if (this.jar.size > 0) headers.cookie = this.cookie;
    let body: string | undefined;
    if (form) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(form)) for (const item of ([] as string[]).concat(v)) params.append(k, item);
      body = params.toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    const res = await fetch(new URL(path, this.#base), { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(10_000) });
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';');
      const [name, ...rest] = pair!.trim().split('=');
      const value = rest.join('=');
      const expired = value === '' || attributes.some((a) => /^\s*expires=Thu, 01 Jan 1970/i.test(a) || /^\s*max-age=0\s*$/i.test(a));
      if (expired) this.jar.delete(name!);
      else this.jar.set(name!, value);
    }
    return { status: res.status, headers: res.headers, text: await res.text() };
  }

  /** The CSRF token of the page's form posting to `action` (default: the first form with one). */
  csrfOf(text: string, action?: string): string {
    const scope = action === undefined ? text : text.slice(Math.max(0, text.indexOf(`action="${action}"`)));
    const match = /name="csrf" value="([^"]+)"/.exec(scope);
    if (!match || (action !== undefined && !text.includes(`action="${action}"`))) throw new Error(`no CSRF token on the page:\n${text}`);
    return match[1]!;
  }

  /** Signs in through the dev form and lands on `returnTo`. */
  async signIn(name: string, returnTo = '/device') {
    const form = await this.request('GET', `/signin?return_to=${encodeURIComponent(returnTo)}`);
    const posted = await this.request('POST', '/signin/dev', { name, csrf: this.csrfOf(form.text, '/signin/dev'), return_to: returnTo });
    expect(posted.status).toBe(303);
    return this.request('GET', posted.headers.get('location')!);
  }
}
