// How a person is asked to approve (protocol §10): RFC 8628 device authorization, where the person
// types a code the agent's host shows them, or CIBA, where the server tells a person it already
// knows and they decide in their inbox. The server chooses; the caller's `preferred_method` is a
// hint. Pure, so the rule is tested without a store (test/unit/approval-method.test.ts).
import type { Mode } from './types.ts';

/** What the caller said about how its person should be asked (register, request-capability, reactivate). */
export interface ApprovalHints {
  preferredMethod?: string | undefined;
  loginHint?: string | undefined;
  bindingMessage?: string | undefined;
}

/**
 * Who CIBA would ask. `host`: the host's linked person, whom a delegated agent of that host acts
 * for (any login_hint is then not looked up: it cannot name anyone else). `hint`: whoever the
 * login_hint names, looked up by `hintKey`; it may name nobody, and the answer must not say so.
 */
export type CibaAddressee = { kind: 'host'; personId: string } | { kind: 'hint'; hintKey: string };

/**
 * CIBA when the server can tell people (a notification channel is configured), the agent acts for
 * a person (delegated), that person can be named (the host is linked, or a login_hint is given),
 * and the caller asks for it: `preferred_method: "ciba"`, or a login_hint with no preference (a
 * caller that names its person expects them to be told). Otherwise device authorization, which
 * needs nobody to be known. docs/stances.md records the rule.
 */
export function cibaAddressee(
  a: { cibaOffered: boolean; mode: Mode; hostPersonId: string | undefined; hints: ApprovalHints },
): CibaAddressee | null {
  if (!a.cibaOffered || a.mode !== 'delegated') return null;
  const { preferredMethod, loginHint } = a.hints;
  const asked = preferredMethod === 'ciba' || (preferredMethod === undefined && loginHint !== undefined);
  if (!asked) return null;
  if (a.hostPersonId !== undefined) return { kind: 'host', personId: a.hostPersonId };
  const hintKey = loginHint === undefined ? null : loginHintKey(loginHint);
  return hintKey === null ? null : { kind: 'hint', hintKey };
}

/**
 * A login_hint as it is looked up: trimmed, and lower-cased when it is an e-mail address (the part
 * before the '@' is case-sensitive in theory, never in practice, and the store saves addresses
 * lower-cased). A person id (`issuer|subject`) is kept as given. Null when nothing is left.
 */
export function loginHintKey(loginHint: string): string | null {
  const trimmed = loginHint.trim();
  if (trimmed === '') return null;
  return looksLikeAddress(trimmed) ? trimmed.toLowerCase() : trimmed;
}

const looksLikeAddress = (value: string) => /^[^\s@|]+@[^\s@|]+$/.test(value);

/** Longest binding message accepted, in characters (what the reference server allows). */
export const MAX_BINDING_MESSAGE_CHARS = 500;

/**
 * Why a binding message cannot be shown as it is, or null when it can. A person compares it, by
 * eye, with what the agent shows them, so it must read the same everywhere: one line of visible
 * text. Control characters (line breaks included), bidirectional and other invisible formatting
 * characters, and lone surrogates could make it read differently on the inbox page, in a mail or
 * in a chat message, so they are refused rather than stripped (a stripped message is no longer the
 * one the agent shows). It is never rendered as markup or a link (the page and the mail escape it).
 */
export function bindingMessageProblem(message: string): string | null {
  if ([...message].length > MAX_BINDING_MESSAGE_CHARS) return `must be at most ${MAX_BINDING_MESSAGE_CHARS} characters`;
  if (message.trim() === '') return 'must not be blank';
  if (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{Co}\p{Cn}]/u.test(message)) {
    return 'must be one line of visible text: control, formatting and unassigned characters are not allowed';
  }
  return null;
}
