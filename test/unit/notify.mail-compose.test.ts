// What the approval e-mail (src/notify/approval-mail.ts) shows a person, and what a hostile agent
// cannot make it show: no header injection through the subject, no markup through the HTML, no link
// but ours, no secret. Which SMTP failures are retried (src/notify/mail.ts) is checked here too.
import { describe, expect, it } from 'vitest';
import {
  ApprovalMailRefused,
  composeApprovalMail,
  MAX_BINDING_MESSAGE_CHARS,
  MAX_CAPABILITIES_SHOWN,
  type ApprovalMail,
} from '../../src/notify/approval-mail.ts';
import { outcomeOfSmtpError } from '../../src/notify/mail.ts';

const WJ = '\u2060';

function mail(overrides: Partial<ApprovalMail> = {}): ApprovalMail {
  return {
    to: 'alice@example.com',
    personName: 'Alice',
    agentName: 'Report Bot',
    hostName: 'laptop-7',
    capabilities: ['read_reports', 'send_email'],
    bindingMessage: 'Blue tiger 42',
    link: 'https://idp.example.com/inbox/item_0123456789',
    expiresAt: '2030-01-02T03:04:05.000Z',
    ...overrides,
  };
}

const compose = (m: ApprovalMail) => composeApprovalMail(m, 'Agentgate <approvals@example.com>', 'Example IdP');

describe('composeApprovalMail', () => {
  it('names the agent in the subject and shows the binding message, the capabilities and the link in both parts', () => {
    const out = compose(mail());
    expect(out.subject).toBe('Example IdP: Report Bot asks for your approval');
    expect(out.to).toBe('alice@example.com');
    expect(out.from).toBe('Agentgate <approvals@example.com>');
    for (const part of [out.text, out.html]) {
      expect(part).toContain('Blue tiger 42');
      expect(part).toContain('read_reports');
      expect(part).toContain('laptop-7');
      expect(part).toContain('https://idp.example.com/inbox/item_0123456789');
      expect(part).toContain('2030-01-02T03:04:05.000Z');
    }
  });

  it('header injection through the agent name is stopped: CR, LF and other controls never reach the subject', () => {
    const out = compose(mail({ agentName: 'Bot\r\nBcc: victim@example.org\r\n\r\nbody', hostName: 'h\nX-Evil: 1' }));
    expect(out.subject).not.toMatch(/[\r\n\u0000-\u001f\u007f]/);
    expect(out.subject).toBe('Example IdP: Bot Bcc: victim@example.org body asks for your approval');
    expect(out.text).not.toMatch(/^Bcc:/m);
    expect(out.text).not.toMatch(/^X-Evil:/m);
  });

  it('a bidirectional override in a name cannot reorder what the person reads', () => {
    const out = compose(mail({ agentName: 'safe\u202Egro.live' }));
    expect(out.subject).not.toContain('\u202E');
    expect(out.html).not.toContain('\u202E');
  });

  it('HTML injection through the binding message, agent, host and capabilities is escaped, never rendered', () => {
    const out = compose(
      mail({
        agentName: '<img src=x onerror=alert(1)>',
        hostName: '"><script>alert(2)</script>',
        capabilities: ['<b>all</b>'],
        bindingMessage: '<a href="https://evil.example">click</a> & \'quote\'',
      }),
    );
    expect(out.html).not.toMatch(/<img|<script|<b>|<a href="https:\/\/evil/);
    expect(out.html).toContain('&#60;img src=x onerror=alert(1)&#62;');
    expect(out.html).toContain('&#60;a href=&#34;https:' + WJ + '/' + WJ + '/' + WJ + 'evil.' + WJ + 'example&#34;&#62;click&#60;/' + WJ + 'a&#62; &#38; &#39;quote&#39;');
    // The only anchor in the mail is ours.
    expect(out.html.match(/<a /g)).toHaveLength(1);
    expect(out.html).toContain('<a href="https://idp.example.com/inbox/item_0123456789">');
  });

  it('a URL in the binding message is broken up with word joiners so a mail client does not make it a link', () => {
    const out = compose(mail({ bindingMessage: 'pay at https://evil.example/x or bob@evil.example' }));
    const defanged = `pay at https:${WJ}/${WJ}/${WJ}evil.${WJ}example/${WJ}x or bob@${WJ}evil.${WJ}example`;
    expect(out.text).toContain(defanged);
    expect(out.html).toContain(defanged);
    expect(out.text).not.toContain('https://evil.example');
    expect(out.html).not.toContain('https://evil.example');
  });

  it('a link that is not http(s) is refused, so a javascript: or data: URL never becomes the button', () => {
    for (const link of ['javascript:alert(1)', 'data:text/html,<b>x</b>', 'file:///etc/passwd', 'ftp://example.com/', 'not a url', '']) {
      expect(() => compose(mail({ link }))).toThrow(ApprovalMailRefused);
    }
    expect(compose(mail({ link: 'http://localhost:3000/inbox/x' })).text).toContain('http://localhost:3000/inbox/x');
  });

  it('a link carrying credentials is refused, as the mail must carry no secret', () => {
    expect(() => compose(mail({ link: 'https://user:secret@idp.example.com/inbox/x' }))).toThrow(ApprovalMailRefused);
  });

  it('a recipient list or a display name smuggled into `to` is refused, so the mail goes to one person only', () => {
    for (const to of ['a@example.com, b@example.com', 'A <a@example.com>', 'a@example.com\r\nBcc: b@example.com', 'no-at-sign', 'a@b;c@d']) {
      expect(() => compose(mail({ to }))).toThrow(ApprovalMailRefused);
    }
  });

  it('an expiry that is not a time is refused', () => {
    expect(() => compose(mail({ expiresAt: 'tomorrow' }))).toThrow(ApprovalMailRefused);
  });

  it('long input is cut: a huge binding message and a thousand capabilities make a mail of bounded size', () => {
    const out = compose(mail({ bindingMessage: 'x'.repeat(1_000_000), capabilities: Array.from({ length: 1000 }, (_, i) => `cap_${i}`) }));
    expect(out.text).toContain(`${'x'.repeat(MAX_BINDING_MESSAGE_CHARS - 1)}…`);
    expect(out.text).not.toContain('x'.repeat(MAX_BINDING_MESSAGE_CHARS));
    expect(out.text).toContain(`cap_${MAX_CAPABILITIES_SHOWN - 1}`);
    expect(out.text).not.toContain(`cap_${MAX_CAPABILITIES_SHOWN}\n`);
    expect(out.text).toContain(`and ${1000 - MAX_CAPABILITIES_SHOWN} more`);
    expect(out.html.length).toBeLessThan(10_000);
  });

  it('the mail holds only the fields given: extra properties such as a user code never reach it', () => {
    const withSecret = { ...mail(), userCode: 'WDJB-MJHT', token: 'eyJhbGciOi.secret' } as ApprovalMail;
    const out = compose(withSecret);
    for (const part of [out.subject, out.text, out.html]) {
      expect(part).not.toContain('WDJB-MJHT');
      expect(part).not.toContain('eyJhbGciOi');
    }
  });

  it('optional fields may be left out', () => {
    const out = compose(mail({ personName: undefined, hostName: undefined, bindingMessage: undefined }));
    expect(out.text.startsWith('Hello,\n')).toBe(true);
    expect(out.text).not.toContain('The agent says');
  });
});

describe('outcomeOfSmtpError', () => {
  it('4xx replies and 503 are retried; other 5xx are refused', () => {
    for (const responseCode of [421, 450, 451, 452, 454, 503]) expect(outcomeOfSmtpError({ code: 'EENVELOPE', responseCode })).toBe('retry');
    for (const responseCode of [500, 535, 550, 552, 554]) expect(outcomeOfSmtpError({ code: 'EMESSAGE', responseCode })).toBe('refused');
  });

  it('connection-level failures are retried; configuration failures are not', () => {
    for (const code of ['ECONNECTION', 'ESOCKET', 'ETIMEDOUT', 'EDNS', 'EABORT']) expect(outcomeOfSmtpError({ code })).toBe('retry');
    for (const code of ['ENOAUTH', 'ECONFIG', 'EENVELOPE', undefined]) expect(outcomeOfSmtpError({ code })).toBe('refused');
    expect(outcomeOfSmtpError('a string')).toBe('refused');
  });
});
