// Redis's replies (RESP2), read incrementally, for the hot path's own connection
// (script-connection.ts): a reply may arrive split across TCP chunks or several in one. Values
// come out as ioredis gives them to the store (bulk strings as UTF-8 strings, integers as numbers,
// nil as null, arrays as arrays, an error reply as a RedisReplyError), so the store decodes a
// reply the same way whichever connection carried it.
//
// Redis is the peer, but what arrives is still bounded: a reply nested deeper, an array longer, a
// line or a string larger than any reply of agentgate's can be is a protocol error, never an
// allocation; so is an integer this process cannot hold exactly.

/** An error reply (`-ERR ...`, `-NOSCRIPT ...`): the message is Redis's own, code first. */
export class RedisReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplyError';
  }
}

/** A reply that is not RESP2, or larger than any reply the store asks for. */
export class RespProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ParserError';
  }
}

export type RespValue = string | number | null | RedisReplyError | RespValue[];

/** Deeper than any of the store's scripts' replies (three levels), with room to spare. */
const MAX_DEPTH = 8;
/** Elements of one array: a batch's grants are at most a few hundred. */
const MAX_ARRAY_LENGTH = 1 << 16;
/** Bytes of one bulk string, and of one reply still being received: an execute's reply is a few KB. */
const MAX_BULK_BYTES = 16 * 1024 * 1024;
/** Bytes of a status or error line. */
const MAX_LINE_BYTES = 64 * 1024;

const CR = 13;
const LF = 10;
const PLUS = 0x2b;
const MINUS = 0x2d;
const COLON = 0x3a;
const DOLLAR = 0x24;
const STAR = 0x2a;
const ZERO = 0x30;
const INCOMPLETE = Symbol('incomplete');
type Parsed = RespValue | typeof INCOMPLETE;

export class RespReplyReader {
  /** The start of a reply that has not fully arrived, as received. */
  #chunks: Buffer[] = [];
  #pendingBytes = 0;
  /** How many pending bytes a bulk string being received needs, when known; else 0. */
  #needBytes = 0;
  #offset = 0;

  /**
   * Reads every reply that `chunk` completes, in order, handing each to `onReply`. Throws
   * RespProtocolError on bytes that are not RESP2; the connection is then unusable.
   */
  push(chunk: Buffer, onReply: (reply: RespValue) => void): void {
    if (this.#chunks.length > 0) {
      this.#chunks.push(chunk);
      this.#pendingBytes += chunk.length;
      if (this.#pendingBytes > MAX_BULK_BYTES + 1024) throw new RespProtocolError(`a reply of more than ${MAX_BULK_BYTES} bytes`);
      // A bulk string whose length is known is read once all of it is here, not at every chunk.
      if (this.#pendingBytes < this.#needBytes) return;
    }
    const buffer = this.#chunks.length > 0 ? Buffer.concat(this.#chunks, this.#pendingBytes) : chunk;
    let start = 0;
    for (;;) {
      this.#offset = start;
      this.#needBytes = 0;
      const reply = start < buffer.length ? this.#value(buffer, 0) : INCOMPLETE;
      if (reply === INCOMPLETE) break;
      start = this.#offset;
      onReply(reply);
    }
    // What is left is the start of a reply that has not fully arrived.
    if (start < buffer.length) {
      const rest = buffer.subarray(start);
      this.#chunks = [rest];
      this.#pendingBytes = rest.length;
      this.#needBytes -= start;
    } else {
      this.#chunks = [];
      this.#pendingBytes = 0;
    }
  }

  /** Bytes received that are not yet a whole reply. */
  get pendingBytes(): number {
    return this.#pendingBytes;
  }

  /** The value at this.#offset, advancing past it; INCOMPLETE when it has not all arrived. */
  #value(buffer: Buffer, depth: number): Parsed {
    const at = this.#offset;
    const type = buffer[at];
    if (type === PLUS || type === MINUS) {
      const lineEnd = buffer.indexOf(CR, at + 1);
      if (lineEnd < 0 && buffer.length - at > MAX_LINE_BYTES) throw new RespProtocolError(`a line of more than ${MAX_LINE_BYTES} bytes`);
      if (lineEnd < 0 || lineEnd + 1 >= buffer.length) return INCOMPLETE;
      if (buffer[lineEnd + 1] !== LF) throw new RespProtocolError('a line not ended by CRLF');
      this.#offset = lineEnd + 2;
      const text = slices(buffer).utf8Slice(at + 1, lineEnd);
      return type === PLUS ? text : new RedisReplyError(text);
    }
    if (type !== COLON && type !== DOLLAR && type !== STAR) throw new RespProtocolError(`a reply starting with byte ${String(type)}`);
    // The integer, or the length of a bulk string or array, read from the bytes: digits, perhaps
    // after a minus, at most 16 of them (no string is made for it; this runs for every element).
    let i = at + 1;
    const negative = buffer[i] === MINUS;
    if (negative) i += 1;
    const firstDigit = i;
    let magnitude = 0;
    for (;; i++) {
      if (i >= buffer.length) return INCOMPLETE;
      const byte = buffer[i]!;
      if (byte === CR) break;
      const digit = byte - ZERO;
      if (digit < 0 || digit > 9 || i - firstDigit >= 16) throw new RespProtocolError('an integer that is not 1 to 16 decimal digits');
      magnitude = magnitude * 10 + digit;
    }
    if (i === firstDigit) throw new RespProtocolError('an empty integer');
    if (magnitude > Number.MAX_SAFE_INTEGER) throw new RespProtocolError('an integer larger than this process holds exactly');
    if (i + 1 >= buffer.length) return INCOMPLETE;
    if (buffer[i + 1] !== LF) throw new RespProtocolError('a line not ended by CRLF');
    const value = negative ? -magnitude : magnitude;
    const next = i + 2;
    if (type === COLON) {
      this.#offset = next;
      return value;
    }
    // A length is -1 (nil) or a count written without a sign or leading zeros, as Redis writes it.
    if ((negative && magnitude !== 1) || (buffer[firstDigit] === ZERO && i - firstDigit > 1)) throw new RespProtocolError('a length that Redis would not write');
    if (value === -1) {
      this.#offset = next;
      return null;
    }
    if (type === DOLLAR) {
      if (value < 0 || value > MAX_BULK_BYTES) throw new RespProtocolError(`a bulk string of length ${value}`);
      const end = next + value;
      if (end + 2 > buffer.length) {
        this.#needBytes = end + 2;
        return INCOMPLETE;
      }
      if (buffer[end] !== CR || buffer[end + 1] !== LF) throw new RespProtocolError('a bulk string not ended by CRLF');
      this.#offset = end + 2;
      return slices(buffer).utf8Slice(next, end);
    }
    if (value < 0 || value > MAX_ARRAY_LENGTH) throw new RespProtocolError(`an array of length ${value}`);
    if (depth >= MAX_DEPTH) throw new RespProtocolError(`arrays nested more than ${MAX_DEPTH} deep`);
    this.#offset = next;
    const values: RespValue[] = [];
    for (let element = 0; element < value; element++) {
      if (this.#offset >= buffer.length) return INCOMPLETE;
      const item = this.#value(buffer, depth + 1);
      if (item === INCOMPLETE) return INCOMPLETE;
      values.push(item);
    }
    return values;
  }
}

/**
 * Node's Buffer decodes a range with `utf8Slice`, which `toString` calls after checking its
 * arguments; a reply has some forty strings. The typings do not list it, though every Buffer has
 * it. Same result: invalid bytes become U+FFFD. With the integers read from the bytes, reading a
 * reply went from about 12 to 4 µs (bench/RESULTS.md, "The execute script on a connection of its own").
 */
interface BufferSlices {
  utf8Slice(start: number, end: number): string;
}
const slices = (buffer: Buffer): BufferSlices => buffer as unknown as BufferSlices;

/** A command as RESP2 sends it: an array of bulk strings. */
export function encodeCommand(parts: readonly string[]): string {
  let encoded = `*${parts.length}\r\n`;
  for (const part of parts) encoded += `$${Buffer.byteLength(part)}\r\n${part}\r\n`;
  return encoded;
}
