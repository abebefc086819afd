// People's sessions on the approval page (DESIGN §8). A session is a random id in an HttpOnly,
// SameSite=Lax cookie; the server keeps it under a hash of that id (so a reader of the store cannot
// take a session over), with an idle timeout and an absolute lifetime. It carries the signed-in
// person with the time of the sign-in (approvals need a fresh one), the CSRF token every form
// repeats, a sign-in in progress, and the page's failed code lookups.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { Clock } from '../clock.ts';
import type { Store } from '../store/store.ts';

/** Someone who signed in: issuer-qualified, never identified by email. */
export interface SignedIn {
  personId: string;
  name?: string | undefined;
  email?: string | undefined;
  signedInAtMs: number;
}

/** What an OpenID Connect sign-in keeps between leaving for the provider and coming back. */
export interface PendingSignInState {
  state: string;
  nonce: string;
  codeVerifier: string;
  returnTo: string;
  startedAtMs: number;
}

const sessionSchema = z.object({
  csrfToken: z.string().min(16),
  createdAtMs: z.number(),
  lastSeenAtMs: z.number(),
  person: z.object({ personId: z.string(), name: z.string().optional(), email: z.string().optional(), signedInAtMs: z.number() }).optional(),
  pendingSignIn: z.object({ state: z.string(), nonce: z.string(), codeVerifier: z.string(), returnTo: z.string(), startedAtMs: z.number() }).optional(),
  /** A WebAuthn ceremony in progress: its challenge, what it is for, and until when. */
  passkeyChallenge: z.object({
    purpose: z.enum(['register', 'approve']), challenge: z.string().max(512), approvalId: z.string().max(128).optional(), expiresAtMs: z.number(),
  }).optional(),
  /** When recent code lookups failed (bounded: only the window's ones are kept). */
  failedCodeLookupsAtMs: z.array(z.number()).max(100).default([]),
});

export type SessionData = z.infer<typeof sessionSchema>;

export interface PersonSession {
  /** The cookie's value; never stored. */
  id: string;
  data: SessionData;
  /** True until saved once: a new session costs no storage until it holds something. */
  isNew: boolean;
}

export interface SessionSettings {
  idleSeconds: number;
  maxSeconds: number;
  freshSeconds: number;
}

/** Failed code lookups one session may make per window before it must wait. */
export const MAX_FAILED_CODE_LOOKUPS = 5;
export const FAILED_CODE_LOOKUP_WINDOW_MS = 15 * 60_000;

const keyOf = (id: string) => createHash('sha256').update(`person-session:${id}`).digest('base64url');
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export class Sessions {
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #settings: SessionSettings;

  constructor(store: Store, clock: Clock, settings: SessionSettings) {
    this.#store = store;
    this.#clock = clock;
    this.#settings = settings;
  }

  /** The session the cookie names, or a new one (unsaved) when there is none, or it expired. */
  async load(cookieValue: string | undefined): Promise<PersonSession> {
    const nowMs = this.#clock.nowMs();
    if (cookieValue !== undefined && SESSION_ID.test(cookieValue)) {
      const json = await this.#store.loadSession(keyOf(cookieValue));
      const parsed = json === null ? null : sessionSchema.safeParse(JSON.parse(json));
      if (parsed?.success && nowMs - parsed.data.createdAtMs < this.#settings.maxSeconds * 1000) {
        return { id: cookieValue, data: { ...parsed.data, lastSeenAtMs: nowMs }, isNew: false };
      }
    }
    return this.#fresh(nowMs);
  }

  /** Saves the session for the rest of its idle time (never past its absolute lifetime). */
  async save(session: PersonSession): Promise<void> {
    const nowMs = this.#clock.nowMs();
    const leftMs = Math.min(this.#settings.idleSeconds * 1000, session.data.createdAtMs + this.#settings.maxSeconds * 1000 - nowMs);
    if (leftMs <= 0) return;
    await this.#store.saveSession(keyOf(session.id), JSON.stringify(session.data), leftMs);
    session.isNew = false;
  }

  /**
   * A sign-in starts a new session (a new id and CSRF token), so an id someone planted before the
   * sign-in is worth nothing afterwards (session fixation).
   */
  async signIn(session: PersonSession, person: SignedIn): Promise<PersonSession> {
    await this.destroy(session);
    const next = this.#fresh(this.#clock.nowMs());
    next.data.person = person;
    await this.save(next);
    return next;
  }

  async destroy(session: PersonSession): Promise<void> {
    if (!session.isNew) await this.#store.deleteSession(keyOf(session.id));
  }

  /** Signed in recently enough to decide an approval (SIGN_IN_FRESH_SECONDS). */
  isFresh(session: PersonSession): boolean {
    const person = session.data.person;
    return person !== undefined && this.#clock.nowMs() - person.signedInAtMs <= this.#settings.freshSeconds * 1000;
  }

  /** Whether a form's CSRF token is this session's (constant time). */
  csrfMatches(session: PersonSession, given: unknown): boolean {
    if (typeof given !== 'string') return false;
    const a = Buffer.from(given);
    const b = Buffer.from(session.data.csrfToken);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** Failed lookups within the window, after forgetting older ones. */
  recentFailedLookups(session: PersonSession): number {
    const since = this.#clock.nowMs() - FAILED_CODE_LOOKUP_WINDOW_MS;
    session.data.failedCodeLookupsAtMs = session.data.failedCodeLookupsAtMs.filter((t) => t > since);
    return session.data.failedCodeLookupsAtMs.length;
  }

  recordFailedLookup(session: PersonSession): void {
    this.recentFailedLookups(session);
    session.data.failedCodeLookupsAtMs.push(this.#clock.nowMs());
  }

  #fresh(nowMs: number): PersonSession {
    return {
      id: randomBytes(32).toString('base64url'),
      data: { csrfToken: randomBytes(32).toString('base64url'), createdAtMs: nowMs, lastSeenAtMs: nowMs, failedCodeLookupsAtMs: [] },
      isNew: true,
    };
  }
}
