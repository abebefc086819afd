// The rule that picks how a person is asked (domain/approval-method.ts): CIBA only when a person
// can be told, is known or named, and the caller asks for it; and what a binding message may hold.
import { describe, expect, it } from 'vitest';
import { bindingMessageProblem, cibaAddressee, loginHintKey, MAX_BINDING_MESSAGE_CHARS } from '../../src/domain/approval-method.ts';

const base = { cibaOffered: true, mode: 'delegated' as const, hostPersonId: undefined, hints: {} };

describe('cibaAddressee', () => {
  it('device authorization unless the caller asks for CIBA (preferred_method, or a login_hint with no preference)', () => {
    expect(cibaAddressee({ ...base, hostPersonId: 'p1' })).toBeNull();
    expect(cibaAddressee({ ...base, hostPersonId: 'p1', hints: { preferredMethod: 'device_authorization', loginHint: 'a@b.example' } })).toBeNull();
    expect(cibaAddressee({ ...base, hostPersonId: 'p1', hints: { preferredMethod: 'ciba' } })).toEqual({ kind: 'host', personId: 'p1' });
    expect(cibaAddressee({ ...base, hints: { loginHint: 'a@b.example' } })).toEqual({ kind: 'hint', hintKey: 'a@b.example' });
  });

  it('never CIBA where nobody can be told, or for an agent that acts for nobody', () => {
    const asked = { preferredMethod: 'ciba', loginHint: 'a@b.example' };
    expect(cibaAddressee({ ...base, cibaOffered: false, hints: asked })).toBeNull();
    expect(cibaAddressee({ ...base, mode: 'autonomous', hints: asked })).toBeNull();
  });

  it("a linked host's person is asked whatever the login_hint says: it cannot send a linked host's request to someone else", () => {
    expect(cibaAddressee({ ...base, hostPersonId: 'p1', hints: { preferredMethod: 'ciba', loginHint: 'mallory@evil.example' } })).toEqual({ kind: 'host', personId: 'p1' });
  });

  it('an unlinked host without a login_hint has nobody to tell: device authorization', () => {
    expect(cibaAddressee({ ...base, hints: { preferredMethod: 'ciba' } })).toBeNull();
    expect(cibaAddressee({ ...base, hints: { preferredMethod: 'ciba', loginHint: '   ' } })).toBeNull();
  });
});

describe('loginHintKey', () => {
  it('lower-cases an address and keeps a person id as given, both trimmed', () => {
    expect(loginHintKey('  Ada@Example.ORG ')).toBe('ada@example.org');
    expect(loginHintKey('https://idp.example|Sub-ABC')).toBe('https://idp.example|Sub-ABC');
    expect(loginHintKey('')).toBeNull();
  });
});

describe('bindingMessageProblem', () => {
  it('accepts one line of visible text up to the limit, in any script', () => {
    expect(bindingMessageProblem('Order 4711: transfer 20 EUR')).toBeNull();
    expect(bindingMessageProblem('注文 4711 — Überweisung')).toBeNull();
    expect(bindingMessageProblem('x'.repeat(MAX_BINDING_MESSAGE_CHARS))).toBeNull();
  });

  it.each([
    ['too long', 'x'.repeat(MAX_BINDING_MESSAGE_CHARS + 1)],
    ['blank', '   '],
    ['a line break (a second line could be read as ours)', 'ok\nApproved by your administrator'],
    ['a carriage return', 'ok\rfake'],
    ['a bidirectional override (text that reads backwards)', 'pay \u202Eexe.lmth'],
    ['a zero-width space (two messages that look alike)', 'AB\u200BCD'],
    ['a NUL', 'a\u0000b'],
    ['a line separator', 'a\u2028b'],
    ['a lone surrogate', 'a\uD800b'],
  ])('refuses %s', (_why, message) => {
    expect(bindingMessageProblem(message)).not.toBeNull();
  });
});
