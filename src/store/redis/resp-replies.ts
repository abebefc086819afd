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
const LF = 10;
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
    const type = buffer[this.#offset];
    const lineEnd = buffer.indexOf(CR, this.#offset + 1);
    if (lineEnd < 0 || lineEnd + 1 >= buffer.length) return INCOMPLETE;
    const lineStart = this.#offset + 1;
    const next = lineEnd + 2;
    switch (type) {
      case 0x2b: // '+' simple string
        lineFeedAfter(buffer, lineEnd);
        this.#offset = next;
        return buffer.toString('utf8', lineStart, lineEnd);
      case 0x2d: // '-' error
        lineFeedAfter(buffer, lineEnd);
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
        if (next + length + 2 > buffer.length) {
          this.#needBytes = next + length + 2;
          return INCOMPLETE;
        }
        if (buffer[next + length] !== CR || buffer[next + length + 1] !== LF) throw new RespProtocolError('a bulk string not ended by CRLF');
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

function lineFeedAfter(buffer: Buffer, carriageReturn: number): void {
  if (buffer[carriageReturn + 1] !== LF) throw new RespProtocolError('a line not ended by CRLF');
}

/** A RESP integer line (also the length of a bulk string or array): digits, perhaps after a minus. */
function integer(buffer: Buffer, start: number, end: number): number {
  lineFeedAfter(buffer, end);
  const text = buffer.toString('latin1', start, end);
  const value = Number(text);
  if (!/^-?\d{1,16}$/.test(text) || !Number.isSafeInteger(value)) throw new RespProtocolError(`the integer ${JSON.stringify(text.slice(0, 24))}`);
  return value;
}

/** A command as RESP2 sends it: an array of bulk strings. */
export function encodeCommand(parts: readonly string[]): string {
  let encoded = `*${parts.length}\r\n`;
  for (const part of parts) encoded += `$${Buffer.byteLength(part)}\r\n${part}\r\n`;
  return encoded;
}
