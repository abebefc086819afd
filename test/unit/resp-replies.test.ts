// The hot path's RESP2 reply reader and command encoder (src/store/redis/resp-replies.ts): every
// reply comes out whole and in order however TCP cuts it, and bytes that are not a reply Redis
// could send for agentgate are refused before anything is allocated for them.
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { encodeCommand, RedisReplyError, RespProtocolError, RespReplyReader, type RespValue } from '../../src/store/redis/resp-replies.ts';
import { scriptConnectionAddress } from '../../src/store/redis/script-connection.ts';
import { RespCommandParser } from '../support/resp.ts';

/** RESP2 as Redis writes it, independently of the reader. */
function encodeReply(value: RespValue): string {
  if (value === null) return '$-1\r\n';
  if (typeof value === 'number') return `:${value}\r\n`;
  if (typeof value === 'string') return `$${Buffer.byteLength(value)}\r\n${value}\r\n`;
  if (value instanceof RedisReplyError) return `-${value.message}\r\n`;
  return `*${value.length}\r\n${value.map(encodeReply).join('')}`;
}

/** What the reader hands out, in a form toEqual compares (an error by its class and message). */
const plain = (value: RespValue): unknown =>
  value instanceof RedisReplyError ? { error: value.message } : Array.isArray(value) ? value.map(plain) : value;

const errorMessage = fc.stringMatching(/^[A-Z]{3,10} [ -~]{0,40}$/).map((text) => new RedisReplyError(text));
const leaf: fc.Arbitrary<RespValue> = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 60 }).filter((text) => Buffer.from(text, 'utf8').toString('utf8') === text),
  fc.constantFrom('', '\r\n', '$3\r\nabc', '*1'),
  fc.integer({ min: -(2 ** 40), max: 2 ** 40 }),
  fc.constant(null),
  errorMessage,
);
const reply: fc.Arbitrary<RespValue> = fc.letrec<{ value: RespValue }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.array(tie('value'), { maxLength: 6 })),
})).value;

/** Feeds `bytes` to a reader cut at `cuts`, collecting every reply. */
function readInChunks(bytes: Buffer, cuts: number[]): RespValue[] {
  const reader = new RespReplyReader();
  const replies: RespValue[] = [];
  let start = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    reader.push(bytes.subarray(start, cut), (value) => replies.push(value));
    start = cut;
  }
  reader.push(bytes.subarray(start), (value) => replies.push(value));
  expect(reader.pendingBytes).toBe(0);
  return replies;
}

describe('RespReplyReader', () => {
  it('reads every reply whole and in order, however the bytes are cut into chunks', () => {
    fc.assert(
      fc.property(fc.array(reply, { minLength: 1, maxLength: 5 }), fc.array(fc.nat(), { maxLength: 12 }), (replies, rawCuts) => {
        const bytes = Buffer.from(replies.map(encodeReply).join(''), 'utf8');
        const cuts = rawCuts.map((cut) => (bytes.length === 0 ? 0 : cut % bytes.length));
        expect(readInChunks(bytes, cuts).map(plain)).toEqual(replies.map(plain));
      }),
      { numRuns: 400 },
    );
  });

  it('reads a reply delivered one byte at a time', () => {
    const value: RespValue = ['ok', [1, 0], ['é€😀', null, -5], new RedisReplyError('ERR inside an array')];
    const bytes = Buffer.from(encodeReply(value), 'utf8');
    const cuts = Array.from({ length: bytes.length - 1 }, (_, i) => i + 1);
    expect(readInChunks(bytes, cuts).map(plain)).toEqual([plain(value)]);
  });

  it('a header announcing a large array or string waits for its bytes without allocating for them', () => {
    const reader = new RespReplyReader();
    const replies: RespValue[] = [];
    reader.push(Buffer.from('*65536\r\n$10\r\nabc'), (value) => replies.push(value));
    expect(replies).toEqual([]);
    expect(reader.pendingBytes).toBe(16);
  });

  it('reads nil arrays, negative integers and an empty string as ioredis does', () => {
    const replies: RespValue[] = [];
    new RespReplyReader().push(Buffer.from('*-1\r\n:-42\r\n$0\r\n\r\n*0\r\n'), (value) => replies.push(value));
    expect(replies).toEqual([null, -42, '', []]);
  });

  it.each([
    ['an unknown type byte', '!oops\r\n'],
    ['a negative length other than -1', '$-2\r\n'],
    ['an array longer than any reply of agentgate', `*${2 ** 16 + 1}\r\n`],
    ['a bulk string larger than 16 MiB', `$${16 * 1024 * 1024 + 1}\r\n`],
    ['a status line of more than 64 KiB without its end', `+${'x'.repeat(64 * 1024 + 1)}`],
    ['a length of minus zero', '$-0\r\n\r\n'],
    ['an array length of minus zero', '*-0\r\n'],
    ['a length with leading zeros', '$003\r\nabc\r\n'],
    ['a negative length other than -1 for an array', '*-2\r\n'],
    ['an integer past 2^53, which a number cannot hold exactly', ':9007199254740993\r\n'],
    ['an integer of 17 digits', ':12345678901234567\r\n'],
    ['a length that is not a number', '$abc\r\n'],
    ['a length in hexadecimal', '$0x3\r\nabc\r\n'],
    ['a length in exponent form', '$1e1\r\n'],
    ['a length with a plus sign', '$+3\r\nabc\r\n'],
    ['a length with a space', '$ 3\r\nabc\r\n'],
    ['an empty integer', ':\r\n'],
    ['a bulk string not ended by CRLF', '$3\r\nabcXY'],
    ['a simple string ended by CR alone', '+OK\rX'],
    ['a line ended by CR alone', ':12\rX'],
    ['arrays nested nine deep', `${'*1\r\n'.repeat(9)}:1\r\n`],
  ])('refuses %s as a protocol error', (_what, bytes) => {
    const reader = new RespReplyReader();
    expect(() => reader.push(Buffer.from(bytes, 'latin1'), () => undefined)).toThrow(RespProtocolError);
  });
});

describe('encodeCommand', () => {
  it('writes a command Redis reads back part for part, multi-byte text included', () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: 'grapheme', maxLength: 30 }), { minLength: 1, maxLength: 8 }), (parts) => {
        const [command] = new RespCommandParser().push(Buffer.from(encodeCommand(parts), 'utf8'));
        expect(command?.parts).toEqual(parts);
      }),
    );
  });
});

describe('scriptConnectionAddress', () => {
  /** The options ioredis parses from a URL for the command connection, as the store hands them over. */
  const parsedBy = (url: string) => new Redis(url, { lazyConnect: true }).options;

  it('takes host, port, family, credentials and database from what ioredis parsed for the command connection', () => {
    expect(scriptConnectionAddress(parsedBy('redis://agentgate:p%40ss@redis.internal:6390/3'))).toEqual({
      host: 'redis.internal', port: 6390, family: 0, username: 'agentgate', password: 'p@ss', db: 3, tls: null,
    });
    expect(scriptConnectionAddress(parsedBy('redis://127.0.0.1:6379?family=6&db=2'))).toMatchObject({ host: '127.0.0.1', family: 6, db: 2 });
    // A path two parsers read differently: ioredis reads /0x1 as database 0, and so does this connection.
    expect(scriptConnectionAddress(parsedBy('redis://127.0.0.1/0x1'))).toMatchObject({ db: 0 });
  });

  it('uses TLS exactly when the command connection does, with the same options', () => {
    expect(scriptConnectionAddress(parsedBy('rediss://redis.internal'))?.tls).toBeTruthy();
    expect(scriptConnectionAddress(new Redis('redis://redis.internal', { lazyConnect: true, tls: { ca: 'PEM' } }).options)?.tls).toEqual({ ca: 'PEM' });
    expect(scriptConnectionAddress(parsedBy('redis://redis.internal'))?.tls).toBeNull();
  });

  it('leaves a Unix socket, and a database that is not a number, to ioredis (no connection of its own)', () => {
    expect(scriptConnectionAddress(new Redis({ path: '/var/run/redis.sock', lazyConnect: true }).options)).toBeNull();
    expect(scriptConnectionAddress(parsedBy('redis://127.0.0.1/x'))).toBeNull();
  });
});
