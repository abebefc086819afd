// People's sessions on the approval page (DESIGN §8). A session is a random id in an HttpOnly,
// SameSite=Lax cookie; the server keeps it under a hash of that id (so a reader of the store cannot
// take a session over), with an idle timeout and an absolute lifetime. It carries the signed-in
// person with the time of the sign-in (approvals need a fresh one) and of the last time they entered
// their credentials at the identity provider (a first passkey needs that), the CSRF token every
// form repeats, and a WebAuthn ceremony in progress. Only signed-in sessions are stored: before a
// sign-in completes, what the sign-in needs rides in a sealed cookie (people/sealed-cookie.ts), so
// an anonymous visitor costs no storage.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { Clock } from '../common/clock.ts';
import type { PersonRecords, StoreBackend } from '../store/store.ts';
import { CookieSealer } from './sealed-cookie.ts';

/** Sessions are person records; the sign-in cookie's key, when none is configured, is a secret the instances share. */
type SessionStore = PersonRecords & Pick<StoreBackend, 'sharedSecret'>;

/** Someone who signed in: issuer-qualified, never identified by email. */
export interface SignedIn {
  personId: string;
  name?: string | undefined;
  email?: string | undefined;
  signedInAtMs: number;
  /**
   * When the person last entered their credentials at the identity provider within one of our
   * sign-ins (its auth_time fell after the sign-in started, so no single sign-on session answered
   * for them). Absent when the provider answered from its own session.
   */
  freshLoginAtMs?: number | undefined;
}

/** A WebAuthn challenge, what it was issued for (an approval id, or a passkey to remove) and until when. */
const challengeSchema = z.object({ challenge: z.string().max(512), approvalId: z.string().max(1400).optional(), expiresAtMs: z.number() });

const sessionSchema = z.object({
  csrfToken: z.string().min(16),
  createdAtMs: z.number(),
  lastSeenAtMs: z.number(),
  person: z.object({
    personId: z.string(), name: z.string().optional(), email: z.string().optional(), signedInAtMs: z.number(), freshLoginAtMs: z.number().optional(),
  }),
  /**
   * WebAuthn ceremonies in progress, by what they are for: adding a passkey, proving an existing one
   * to add another, approving one approval, or removing one passkey. Each challenge is used once, by
   * its own ceremony only.
   */
  passkeyChallenges: z.object({
    register: challengeSchema.optional(), proof: challengeSchema.optional(), approve: challengeSchema.optional(), remove: challengeSchema.optional(),
  }).default({}),
});

export type SessionData = z.infer<typeof sessionSchema>;
export type PasskeyCeremony = keyof SessionData['passkeyChallenges'];

/** A signed-in person's session, or an anonymous visitor (nothing stored, nothing to keep). */
/** A session with someone signed in. */
export type SignedInSession = PersonSession & { data: SessionData };

export interface PersonSession {
  /** The cookie's value; never stored. */
  id: string;
  /** Absent for an anonymous visitor. */
  data: SessionData | null;
  /** True until saved once. */
  isNew: boolean;
}

interface SessionSettings {
  idleSeconds: number;
  maxSeconds: number;
  freshSeconds: number;
  /** SIGN_IN_COOKIE_KEY, when configured; otherwise a random key kept in the store. */
  cookieKey?: string | undefined;
}

const keyOf = (id: string) => createHash('sha256').update(`person-session:${id}`).digest('base64url');
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export class PersonSessions {
  readonly #store: SessionStore;
  readonly #clock: Clock;
  readonly #settings: SessionSettings;
  #sealer: Promise<CookieSealer> | null = null;

  constructor(store: SessionStore, clock: Clock, settings: SessionSettings) {
    this.#store = store;
    this.#clock = clock;
    this.#settings = settings;
  }

  /** The session the cookie names, or an anonymous visitor when there is none, or it expired. */
  async load(cookieValue: string | undefined): Promise<PersonSession> {
    const nowMs = this.#clock.nowMs();
    if (cookieValue !== undefined && SESSION_ID.test(cookieValue)) {
      const json = await this.#store.loadSession(keyOf(cookieValue));
      const parsed = json === null ? null : sessionSchema.safeParse(JSON.parse(json));
      if (parsed?.success && nowMs - parsed.data.createdAtMs < this.#settings.maxSeconds * 1000) {
        return { id: cookieValue, data: { ...parsed.data, lastSeenAtMs: nowMs }, isNew: false };
      }
    }
    return { id: '', data: null, isNew: true };
  }

  /** Saves a signed-in session for the rest of its idle time (never past its absolute lifetime); an anonymous one is never stored. */
  async save(session: PersonSession): Promise<void> {
    if (session.data === null) return;
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
    const nowMs = this.#clock.nowMs();
    const next: PersonSession = {
      id: randomBytes(32).toString('base64url'),
      data: { csrfToken: randomBytes(32).toString('base64url'), createdAtMs: nowMs, lastSeenAtMs: nowMs, person, passkeyChallenges: {} },
      isNew: true,
    };
    await this.save(next);
    return next;
  }

  async destroy(session: PersonSession): Promise<void> {
    if (!session.isNew) await this.#store.deleteSession(keyOf(session.id));
  }

  /** Signed in recently enough to decide an approval (SIGN_IN_FRESH_SECONDS). */
  isFresh(session: PersonSession): session is SignedInSession {
    const person = session.data?.person;
    return person !== undefined && this.#clock.nowMs() - person.signedInAtMs <= this.#settings.freshSeconds * 1000;
  }

  /** Entered their credentials at the identity provider within the last `withinMs`. */
  loggedInFreshly(session: PersonSession, withinMs: number): boolean {
    const at = session.data?.person.freshLoginAtMs;
    return at !== undefined && this.#clock.nowMs() - at <= withinMs;
  }

  /** Whether a form's CSRF token is this session's (constant time). */
  csrfMatches(session: PersonSession, given: unknown): boolean {
    return session.data !== null && sameSecret(given, session.data.csrfToken);
  }

  /** The key this session's attempt limits count under: a hash of its id, never the id itself. */
  limitKey(session: PersonSession): string {
    return keyOf(session.id);
  }

  /** The sealer of the sign-in cookies: from SIGN_IN_COOKIE_KEY, else a random key every instance shares through the store. */
  sealer(): Promise<CookieSealer> {
    if (this.#sealer === null) {
      const configured = this.#settings.cookieKey;
      const made = configured !== undefined
        ? Promise.resolve(new CookieSealer(Buffer.from(configured, 'utf8')))
        : this.#store.sharedSecret('sign-in-cookie-key').then((secret) => new CookieSealer(Buffer.from(secret, 'base64url')));
      // A store that could not answer is asked again next time, not remembered as a failure.
      this.#sealer = made.catch((err: unknown) => {
        this.#sealer = null;
        throw err;
      });
    }
    return this.#sealer;
  }
}

/** Whether `given` is `expected`, compared in constant time. */
export function sameSecret(given: unknown, expected: string): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
