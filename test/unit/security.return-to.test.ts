// A return path after sign-in must never send a person to another site (an open redirect lends
// agentgate's sign-in to a phishing link). The audit found '/.//evil.com' coming back as
// '//evil.com': resolving removed the dot segment and left a path a browser reads as another host.
// people/sign-in/urls.ts decides; http/device/sign-in.ts falls back to the code page. No I/O.
import { describe, expect, it } from 'vitest';
import { safeReturnTo as pageReturnTo } from '../../src/http/device/sign-in.ts';
import { RETURN_TO_MAX_CHARS, safeReturnTo } from '../../src/people/sign-in/urls.ts';

/** Where a browser would go from https://agentgate.example after a redirect to `path`. */
const landsOn = (path: string) => new URL(path, 'https://agentgate.example/signin/callback').host;

describe('safeReturnTo: return paths that could leave our origin become "/"', () => {
  const hostile = [
    '/.//evil.com',
    '/././/evil.com',
    '/a/..//evil.com',
    '/a/../..//evil.com',
    '/%2e//evil.com',
    '/%2E/%2E//evil.com',
    '//evil.com',
    '///evil.com',
    '/\\evil.com',
    '/.\\/evil.com',
    '\\\\evil.com',
    'https://evil.com/',
    'HTTPS://evil.com',
    '//evil.com/device?user_code=ABCD-EFGH',
    'javascript:alert(1)',
    '/\t/evil.com',
    '/\n/evil.com',
    '/\r\n//evil.com',
    ' /device',
    'device',
    '',
    `/${'a'.repeat(RETURN_TO_MAX_CHARS)}`,
  ];
  for (const path of hostile) {
    it(`${JSON.stringify(path)} -> "/"`, () => {
      expect(safeReturnTo(path)).toBe('/');
      expect(pageReturnTo(path)).toBe('/device');
    });
  }

  it('whatever comes back, a browser lands on our own host', () => {
    for (const path of hostile) expect(landsOn(pageReturnTo(path)), path).toBe('agentgate.example');
  });

  it('our own paths come back as they are, dot segments resolved', () => {
    expect(safeReturnTo('/device?user_code=ABCD-EFGH')).toBe('/device?user_code=ABCD-EFGH');
    expect(safeReturnTo('/passkeys/new?return_to=%2Fdevice')).toBe('/passkeys/new?return_to=%2Fdevice');
    expect(safeReturnTo('/./device')).toBe('/device');
    expect(safeReturnTo('/a/../device#top')).toBe('/device#top');
    // A return path that carries another site's address as a query value still lands here.
    expect(safeReturnTo('/device?next=//evil.com')).toBe('/device?next=//evil.com');
    expect(landsOn(safeReturnTo('/device?next=//evil.com'))).toBe('agentgate.example');
    // An encoded slash is not a separator to a browser: odd, but it stays on our host.
    expect(landsOn(safeReturnTo('/.%2f/evil.com'))).toBe('agentgate.example');
  });

  it('the page falls back to the code form, never to "/" or a foreign path, and ignores what is not a string', () => {
    expect(pageReturnTo('/')).toBe('/device');
    expect(pageReturnTo(undefined)).toBe('/device');
    expect(pageReturnTo(['/device', '//evil.com'])).toBe('/device');
    expect(pageReturnTo({ toString: () => '//evil.com' })).toBe('/device');
  });
});
