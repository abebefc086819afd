// Reading the mails a test's SMTP server received: a raw RFC 5322 message's headers (unfolded) and
// its text/plain and text/html parts, decoded. Enough for the mails agentgate sends (one
// multipart/alternative of two parts, base64 or quoted-printable), not a general MIME parser.

/** The raw message's headers (unfolded) and its text/plain and text/html parts, decoded. */
export function parseMail(raw: string): { headers: string; text: string; html: string } {
  const [head = '', ...rest] = raw.split('\r\n\r\n');
  const headers = head.replace(/\r\n[ \t]+/g, ' ');
  const boundary = /boundary="?([^";\r\n]+)"?/i.exec(headers)?.[1];
  const parts = boundary === undefined ? [] : rest.join('\r\n\r\n').split(`--${boundary}`);
  const part = (type: string): string => {
    const found = parts.find((p) => new RegExp(`Content-Type: ${type}`, 'i').test(p)) ?? '';
    const [partHead = '', ...partBody] = found.replace(/^\r\n/, '').split('\r\n\r\n');
    const body = partBody.join('\r\n\r\n');
    if (/Content-Transfer-Encoding: base64/i.test(partHead)) return Buffer.from(body, 'base64').toString('utf8');
    if (/Content-Transfer-Encoding: quoted-printable/i.test(partHead)) return decodeQuotedPrintable(body);
    return body;
  };
  return { headers, text: part('text/plain'), html: part('text/html') };
}

/** RFC 2045 quoted-printable, decoded to UTF-8 text. */
function decodeQuotedPrintable(body: string): string {
  const joined = body.replace(/=\r\n/g, '');
  const bytes: number[] = [];
  for (let i = 0; i < joined.length; i++) {
    if (joined[i] === '=' && /^[0-9A-F]{2}$/i.test(joined.slice(i + 1, i + 3))) {
      bytes.push(parseInt(joined.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(...Buffer.from(joined[i]!, 'utf8'));
  }
  return Buffer.from(bytes).toString('utf8');
}
