// The e-mail that tells a person an approval waits for them: a pure function from what we know of
// the request to the message's parts, so what a person reads can be checked without a mail server.
// src/notify/mail.ts sends what this composes.
//
// Most of what the mail shows comes from an agent or its host (the agent's name, the host's name,
// the capabilities asked for, the binding message), and an agent may be hostile, so:
//
// - Every such value is stripped of control and bidirectional-formatting characters and cut to a
//   length, in the subject and in both bodies. In the subject this is what stops header injection:
//   an agent named "x\r\nBcc: someone" would otherwise end the Subject line and start a header.
// - In the HTML part every such value is escaped, so markup in it is shown, never rendered.
// - None of it is ever a link. The only link is `link`, which we build. So that a mail client does
//   not turn "pay at evil.example" into a link of its own, a WORD JOINER (U+2060, invisible and
//   zero width) is put after every '.', ':', '/' and '@' of those values, in both parts: the text
//   reads the same but no longer looks like a URL or an address to a linkifier. The binding message
//   is set apart in a bordered block of its own, with the words to compare it against.
//
// The mail carries no secret: no user code, no token, nothing that grants anything to whoever reads
// it. The composer takes only the fields of ApprovalMail and nothing else reaches the message. A
// caller must put nothing secret in `link` either: the inbox URL with the item's opaque id is all it
// may hold, because mail is stored and forwarded in clear in many places. The person signs in to
// act on the item; the link only saves them finding it.

import { MAX_BINDING_MESSAGE_CHARS } from '../domain/approval-method.ts';

export interface ApprovalMail {
  /** One address, the person's. */
  to: string;
  personName?: string;
  agentName: string;
  hostName?: string;
  capabilities: string[];
  /** The agent's words to the person, which the person compares with what the agent showed them. */
  bindingMessage?: string;
  /** An https: or http: URL into the person's inbox; see the module header on what it may hold. */
  link: string;
  /** When the request expires, as an ISO time. */
  expiresAt: string;
}

export interface ComposedMail {
  from: string;
  to: string;
  subject: string;
  text: string;
  html: string;
}

/** Longest agent or host name shown; the rest is cut with an ellipsis. */
export const MAX_NAME_CHARS = 100;
/** Longest binding message shown: the longest the API accepts (domain/approval-method.ts). */
export { MAX_BINDING_MESSAGE_CHARS };
/** Longest capability name shown. */
export const MAX_CAPABILITY_CHARS = 100;
/** Capabilities listed at most; the mail says how many more there are. */
export const MAX_CAPABILITIES_SHOWN = 20;
/** Longest link accepted; an inbox URL with an id is far shorter. */
export const MAX_LINK_CHARS = 2048;
/** Longest address accepted (RFC 5321's limit on a path). */
const MAX_ADDRESS_CHARS = 254;

/** A refusal to compose: the mail would be unsafe or malformed. MailSender drops and counts it. */
export class ApprovalMailRefused extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = 'ApprovalMailRefused';
  }
}

/**
 * Control characters (C0, DEL, C1), the line and paragraph separators, and the bidirectional
 * embeddings, overrides and isolates (which can make "gro.live" read as "evil.org").
 */
const UNSAFE_CHARS = /[\p{Cc}\u2028\u2029\u202A-\u202E\u2066-\u2069]/gu;
const WORD_JOINER = '\u2060';
const LINKIFIER_TRIGGERS = /[.:/@]/g;
/**
 * One address: no spaces, commas, angle brackets, quotes or parentheses, so nodemailer's address
 * parser cannot read it as a list or a display name with another address inside.
 */
const SINGLE_ADDRESS = /^[^\s@,;:<>"'()[\]\\]+@[^\s@,;:<>"'()[\]\\]+$/;

/** The message for `mail`; throws ApprovalMailRefused when it must not be sent. */
export function composeApprovalMail(mail: ApprovalMail, from: string, providerName: string): ComposedMail {
  const link = safeLink(mail.link);
  const to = singleAddress(mail.to);
  const expires = Date.parse(mail.expiresAt);
  if (typeof mail.expiresAt !== 'string' || Number.isNaN(expires)) throw new ApprovalMailRefused('expiresAt is not an ISO time');
  const expiresAt = new Date(expires).toISOString();

  const provider = plain(providerName, MAX_NAME_CHARS);
  const agent = plain(mail.agentName, MAX_NAME_CHARS);
  const host = mail.hostName === undefined ? undefined : plain(mail.hostName, MAX_NAME_CHARS);
  const person = mail.personName === undefined ? undefined : plain(mail.personName, MAX_NAME_CHARS);
  const binding = mail.bindingMessage === undefined ? undefined : plain(mail.bindingMessage, MAX_BINDING_MESSAGE_CHARS);
  const capabilities = Array.isArray(mail.capabilities) ? mail.capabilities : [];
  // Bounded: only the first MAX_CAPABILITIES_SHOWN are even looked at.
  const shown = capabilities.slice(0, MAX_CAPABILITIES_SHOWN).map((c) => plain(c, MAX_CAPABILITY_CHARS));
  const more = capabilities.length - shown.length;

  // The subject is a header: nothing in it may be a line break (plain() saw to that).
  const subject = `${provider}: ${agent} asks for your approval`;
  const requester = host === undefined ? defang(agent) : `${defang(agent)} (on ${defang(host)})`;

  const text = [
    person === undefined ? 'Hello,' : `Hello ${person},`,
    '',
    `${requester} asks for your approval at ${provider}.`,
    '',
    ...(binding === undefined
      ? []
      : ['The agent says it shows you this message; approve only if it matches what you see there:', '', `    ${defang(binding)}`, '']),
    'It asks for:',
    ...shown.map((c) => `  - ${defang(c)}`),
    ...(more > 0 ? [`  and ${more} more`] : []),
    '',
    `The request expires at ${expiresAt}. To review it, sign in and open:`,
    link,
    '',
    'If you did not expect this, you can ignore this mail or decline the request.',
    '',
  ].join('\n');

  const html = [
    '<!doctype html><html><body style="font-family:sans-serif">',
    `<p>${person === undefined ? 'Hello,' : `Hello ${escapeHtml(person)},`}</p>`,
    `<p><strong>${escapeHtml(requester)}</strong> asks for your approval at ${escapeHtml(provider)}.</p>`,
    binding === undefined
      ? ''
      : '<p>The agent says it shows you this message; approve only if it matches what you see there:</p>' +
        `<div style="border:2px solid #444;padding:12px;font-size:1.2em;white-space:pre-wrap">${escapeHtml(defang(binding))}</div>`,
    '<p>It asks for:</p><ul>',
    ...shown.map((c) => `<li>${escapeHtml(defang(c))}</li>`),
    more > 0 ? `<li>and ${more} more</li>` : '',
    '</ul>',
    `<p>The request expires at ${escapeHtml(expiresAt)}.</p>`,
    `<p><a href="${escapeHtml(link)}">Review the request</a></p>`,
    '<p>If you did not expect this, you can ignore this mail or decline the request.</p>',
    '</body></html>',
  ].join('\n');

  return { from, to, subject, text, html };
}

/** `value` as one safe line: unsafe characters become spaces, runs of space one, cut to `maxChars`. */
export function plain(value: unknown, maxChars: number): string {
  // Cut before the replacements so a megabyte name costs no more than a short one.
  const raw = typeof value === 'string' ? value.slice(0, maxChars * 2) : '';
  const line = raw.replace(UNSAFE_CHARS, ' ').replace(/\s+/g, ' ').trim();
  if (line.length === 0) return '(unnamed)';
  return line.length > maxChars ? `${line.slice(0, maxChars - 1)}…` : line;
}

/** `value` with a WORD JOINER after each character a linkifier keys on; see the module header. */
export function defang(value: string): string {
  return value.replace(LINKIFIER_TRIGGERS, (c) => `${c}${WORD_JOINER}`);
}

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function safeLink(value: unknown): string {
  if (typeof value !== 'string' || value.length > MAX_LINK_CHARS) throw new ApprovalMailRefused('the link is missing or too long');
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ApprovalMailRefused('the link is not a URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ApprovalMailRefused('the link must be https: or http:');
  // Credentials in a link would be a secret in the mail, which it must never carry.
  if (url.username !== '' || url.password !== '') throw new ApprovalMailRefused('the link must not carry credentials');
  return url.href;
}

function singleAddress(value: unknown): string {
  if (typeof value !== 'string' || value.length > MAX_ADDRESS_CHARS || !SINGLE_ADDRESS.test(value)) {
    throw new ApprovalMailRefused('the recipient is not a single plain address');
  }
  return value;
}
