// Redis's replies (RESP2), read incrementally, for the hot path's own connection
// (script-connection.ts): a reply may arrive split across TCP chunks or several in one. Values
// come out as ioredis gives them to the store (bulk strings as UTF-8 strings, integers as numbers,
// nil as null, arrays as arrays, an error reply as a RedisReplyError), so the store decodes a
// reply the same way whichever connection carried it.
//
// Redis is the peer, but what arrives is still bounded: a reply nested deeper, an array longer or
// a string larger than any reply of agentgate's can be is a protocol error, never an allocation.

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
const MAX_ARRAY_LENGTH = 1 << 20;
/** Bytes of one bulk string, and of one reply still being received. */
const MAX_BULK_BYTES = 64 * 1024 * 1024;

const CR = 13;
const INCOMPLETE = Symbol('incomplete');
type Parsed = RespValue | typeof INCOMPLETE;

export class RespReplyReader {
  #buffer: Buffer | null = null;
  #offset = 0;

  /**
   * Reads every reply that `chunk` completes, in order, handing each to `onReply`. Throws
   * RespProtocolError on bytes that are not RESP2; the connection is then unusable.
   */
  push(chunk: Buffer, onReply: (reply: RespValue) => void): void {
    let buffer: Buffer;
    if (this.#buffer === null) {
      buffer = chunk;
    } else {
      buffer = Buffer.concat([this.#buffer, chunk]);
      if (buffer.length > MAX_BULK_BYTES + 1024) throw new RespProtocolError(`a reply of more than ${MAX_BULK_BYTES} bytes`);
    }
    let start = 0;
    for (;;) {
      this.#offset = start;
      const reply = start < buffer.length ? this.#value(buffer, 0) : INCOMPLETE;
      if (reply === INCOMPLETE) break;
      start = this.#offset;
      onReply(reply);
    }
    // What is left is the start of a reply that has not fully arrived.
    this.#buffer = start < buffer.length ? buffer.subarray(start) : null;
  }

  /** Bytes received that are not yet a whole reply. */
  get pendingBytes(): number {
    return this.#buffer?.length ?? 0;
  }

  /** The value at this.#offset, advancing past it; INCOMPLETE when it has not all arrived. */
  #value(buffer: Buffer, depth: number): Parsed {
    const type = buffer[this.#offset];
    const lineEnd = buffer.indexOf(CR, this.#offset + 1);
    if (lineEnd < 0 || lineEnd + 1 >= buffer.length) return INCOMPLETE;
    const lineStart = this.#offset + 1;
    const next = lineEnd + 2;
    switch (type) {
      case 0x2b: // '+' simple string
        this.#offset = next;
        return buffer.toString('utf8', lineStart, lineEnd);
      case 0x2d: // '-' error
        this.#offset = next;
        return new RedisReplyError(buffer.toString('utf8', lineStart, lineEnd));
      case 0x3a: // ':' integer
        this.#offset = next;
        return integer(buffer, lineStart, lineEnd);
      case 0x24: { // '$' bulk string
        const length = integer(buffer, lineStart, lineEnd);
        if (length === -1) {
          this.#offset = next;
          return null;
        }
        if (length < 0 || length > MAX_BULK_BYTES) throw new RespProtocolError(`a bulk string of length ${length}`);
        if (next + length + 2 > buffer.length) return INCOMPLETE;
        this.#offset = next + length + 2;
        return buffer.toString('utf8', next, next + length);
      }
      case 0x2a: { // '*' array
        const length = integer(buffer, lineStart, lineEnd);
        if (length === -1) {
          this.#offset = next;
          return null;
        }
        if (length < 0 || length > MAX_ARRAY_LENGTH) throw new RespProtocolError(`an array of length ${length}`);
        if (depth >= MAX_DEPTH) throw new RespProtocolError(`arrays nested more than ${MAX_DEPTH} deep`);
        this.#offset = next;
        const values: RespValue[] = [];
        for (let i = 0; i < length; i++) {
          if (this.#offset >= buffer.length) return INCOMPLETE;
          const value = this.#value(buffer, depth + 1);
          if (value === INCOMPLETE) return INCOMPLETE;
          values.push(value);
        }
        return values;
      }
      default:
        throw new RespProtocolError(`a reply starting with byte ${String(type)}`);
    }
  }
}

/** A RESP integer line (also the length of a bulk string or array); a malformed one is a protocol error. */
function integer(buffer: Buffer, start: number, end: number): number {
  if (buffer[end + 1] !== 0x0a) throw new RespProtocolError('a line not ended by CRLF');
  const text = buffer.toString('latin1', start, end);
  const value = Number(text);
  if (text.length === 0 || text.length > 20 || !Number.isSafeInteger(value)) throw new RespProtocolError(`the integer ${JSON.stringify(text.slice(0, 24))}`);
  return value;
}

/** A command as RESP2 sends it: an array of bulk strings. */
export function encodeCommand(parts: readonly string[]): string {
  let encoded = `*${parts.length}\r\n`;
  for (const part of parts) encoded += `$${Buffer.byteLength(part)}\r\n${part}\r\n`;
  return encoded;
}
