// What Redis clients send, read incrementally: RESP arrays of bulk strings (what ioredis sends),
// possibly split across or packed into TCP chunks. The two test proxies (redis-proxy.ts, which
// counts round trips, and redis-faults.ts, which cuts or freezes Redis) read commands with it.

export interface RespCommand {
  /** The command's strings (each cut to `maxPartBytes`, when given). */
  parts: string[];
  /** The command's exact bytes, to forward or hold. */
  bytes: Buffer;
}

export class RespCommandParser {
  private buffer: Buffer = Buffer.alloc(0);
  readonly #maxPartBytes: number;

  /** `maxPartBytes`: how much of each string to keep (a recorder needs no script bodies). */
  constructor(options: { maxPartBytes?: number } = {}) {
    this.#maxPartBytes = options.maxPartBytes ?? Number.POSITIVE_INFINITY;
  }

  /** Every command the chunk completes, in order. */
  push(chunk: Buffer): RespCommand[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const parsed: RespCommand[] = [];
    for (;;) {
      const command = this.next();
      if (!command) return parsed;
      parsed.push(command);
    }
  }

  /** Bytes of a command not yet complete. */
  pending(): Buffer {
    return this.buffer;
  }

  clear(): void {
    this.buffer = Buffer.alloc(0);
  }

  /** One whole command from the front of the buffer, consumed; null when it is incomplete. */
  private next(): RespCommand | null {
    let offset = 0;
    const line = (): string | null => {
      const end = this.buffer.indexOf('\r\n', offset);
      if (end < 0) return null;
      const text = this.buffer.toString('latin1', offset, end);
      offset = end + 2;
      return text;
    };
    const header = line();
    if (header === null) return null;
    if (!header.startsWith('*')) throw new Error(`the proxy only understands RESP arrays; got ${JSON.stringify(header.slice(0, 40))}`);
    const count = Number(header.slice(1));
    if (!Number.isInteger(count) || count < 1) throw new Error(`the proxy got a malformed RESP array header ${JSON.stringify(header.slice(0, 40))}`);
    const parts: string[] = [];
    for (let i = 0; i < count; i++) {
      const size = line();
      if (size === null) return null;
      const length = Number(size.slice(1));
      if (!size.startsWith('$') || !Number.isInteger(length) || length < 0) throw new Error(`the proxy got a malformed RESP bulk header ${JSON.stringify(size.slice(0, 40))}`);
      if (this.buffer.length < offset + length + 2) return null;
      parts.push(this.buffer.toString('utf8', offset, offset + Math.min(length, this.#maxPartBytes)));
      offset += length + 2;
    }
    const bytes = this.buffer.subarray(0, offset);
    this.buffer = this.buffer.subarray(offset);
    return { parts, bytes };
  }
}
