// A loopback TCP proxy in front of a real Redis that makes Redis fail at a chosen moment: at the
// first command a test names (a script by name, a command on a kind of key), Redis is cut off
// (every connection dropped, new ones closed at once) or frozen (nothing goes through either way,
// as under SIGSTOP), until the test restores it. A cut can land before the command reaches Redis
// or just after (the write happens, its answer is lost); a freeze holds the command and delivers it
// when Redis comes back (the write lands after the caller gave up).
// Commands are forwarded whole, one command at a time, so a fault lands exactly between two of them
// even when a client pipelines several in one write.
import { createHash } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { SCRIPTS, type ScriptName } from '../../src/store/redis/scripts.ts';
import { RespCommandParser } from './resp.ts';

export interface SeenCommand {
  /** Which client connection sent it, numbered from 1 in connection order. */
  connection: number;
  /** Upper case. */
  name: string;
  args: string[];
  /** The script's name for EVALSHA/EVAL of one of the store's scripts. */
  script: string | undefined;
  /** The first key it names: a script's first KEYS entry, else the first argument. */
  key: string | undefined;
}

export type FaultKind =
  /**
   * The command does not reach Redis now; every connection drops and new ones are closed until
   * restore(). (A client may send it again once it reconnects: ioredis does, for unanswered commands.)
   */
  | 'cut-before'
  /** The command reaches Redis and runs; its answer is lost: every connection drops, as for cut-before. */
  | 'cut-after'
  /** From this command on nothing reaches Redis and nothing comes back; restore() delivers what was held. */
  | 'freeze';

export type ProxyState = 'up' | 'cut' | 'frozen';

export interface FaultProxy {
  url: string;
  /** What clients sent while recording (see record()). */
  commands: SeenCommand[];
  readonly state: ProxyState;
  /** Starts recording every command from now on (forgetting what was recorded). */
  record(): void;
  /** Arms a fault at the next command `match` accepts; resolves with that command when it fires. */
  arm(kind: FaultKind, match: (command: SeenCommand) => boolean): Promise<SeenCommand>;
  /** Forgets an armed fault that has not fired. */
  disarm(): void;
  /** Cuts Redis off now. */
  cutNow(): void;
  /** Freezes Redis now. */
  freezeNow(): void;
  /** Ends a cut or a freeze: connections are served again, and a freeze's held bytes are delivered in order. */
  restore(): void;
  close(): Promise<void>;
}

/** The store's scripts by sha1, so a test can name a command by the script it runs. */
const SCRIPT_BY_SHA = new Map<string, string>(Object.entries(SCRIPTS).map(([name, def]) => [sha1(def.lua), name]));

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

/** Whether `command` runs the store's script `name`. */
export const runsScript = (name: ScriptName) => (command: SeenCommand) => command.script === name;

interface Connection {
  id: number;
  client: Socket;
  redis: Socket;
  parser: RespCommandParser;
  /** Client bytes not yet sent to Redis while frozen. */
  heldToRedis: Buffer[];
  /** Redis bytes not yet sent to the client while frozen. */
  heldToClient: Buffer[];
}

export async function startFaultProxy(upstreamUrl: string): Promise<FaultProxy> {
  const upstream = new URL(upstreamUrl);
  const connections = new Set<Connection>();
  const commands: SeenCommand[] = [];
  let recording = false;
  let state: ProxyState = 'up';
  let armed: { kind: FaultKind; match: (command: SeenCommand) => boolean; fired: (command: SeenCommand) => void } | null = null;
  let counter = 0;

  const drop = (connection: Connection) => {
    connection.client.destroy();
    connection.redis.destroy();
    connections.delete(connection);
  };

  /** Every connection drops; `except` first sends what it must still deliver to Redis, then closes. */
  const cut = (except?: { connection: Connection; lastBytes: Buffer }) => {
    state = 'cut';
    for (const connection of [...connections]) {
      if (connection === except?.connection) {
        connection.client.destroy();
        // end() flushes before closing, so Redis runs what was sent; its answers go nowhere.
        connection.redis.end(except.lastBytes);
        connections.delete(connection);
      } else {
        drop(connection);
      }
    }
  };

  const server: Server = createServer((client) => {
    client.on('error', () => {});
    if (state === 'cut') {
      client.destroy();
      return;
    }
    const redis = connect({ host: upstream.hostname, port: Number(upstream.port || 6379) });
    redis.on('error', () => {});
    const connection: Connection = { id: ++counter, client, redis, parser: new RespCommandParser(), heldToRedis: [], heldToClient: [] };
    connections.add(connection);

    client.on('data', (chunk: Buffer) => {
      if (state === 'cut') return drop(connection);
      if (state === 'frozen') {
        connection.heldToRedis.push(chunk);
        return;
      }
      const pass: Buffer[] = [];
      const parsed = connection.parser.push(chunk);
      for (let i = 0; i < parsed.length; i++) {
        const { parts, bytes } = parsed[i]!;
        const seen = describe(connection.id, parts);
        if (recording) commands.push(seen);
        const fault = armed && armed.match(seen) ? armed : null;
        if (!fault) {
          pass.push(bytes);
          continue;
        }
        armed = null;
        const rest = parsed.slice(i + 1).map((p) => p.bytes);
        if (fault.kind === 'freeze') {
          if (pass.length > 0) redis.write(Buffer.concat(pass));
          state = 'frozen';
          connection.heldToRedis.push(bytes, ...rest, connection.parser.pending());
          connection.parser.clear();
        } else {
          const delivered = fault.kind === 'cut-after' ? [...pass, bytes] : pass;
          cut({ connection, lastBytes: Buffer.concat(delivered) });
        }
        fault.fired(seen);
        return;
      }
      if (pass.length > 0) redis.write(Buffer.concat(pass));
    });
    redis.on('data', (chunk: Buffer) => {
      if (state === 'frozen') connection.heldToClient.push(chunk);
      else client.write(chunk);
    });
    client.on('close', () => drop(connection));
    redis.on('close', () => {
      // While frozen a connection stays open (nothing answers); otherwise the client sees the close.
      if (state !== 'frozen') drop(connection);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `redis://127.0.0.1:${port}`,
    commands,
    get state() {
      return state;
    },
    record() {
      commands.length = 0;
      recording = true;
    },
    arm(kind, match) {
      if (armed) throw new Error('a fault is armed already');
      return new Promise<SeenCommand>((resolve) => {
        armed = { kind, match, fired: resolve };
      });
    },
    disarm() {
      armed = null;
    },
    cutNow() {
      cut();
    },
    freezeNow() {
      state = 'frozen';
    },
    restore() {
      const wasFrozen = state === 'frozen';
      state = 'up';
      if (!wasFrozen) return;
      for (const connection of connections) {
        if (connection.heldToClient.length > 0) connection.client.write(Buffer.concat(connection.heldToClient.splice(0)));
        const held = Buffer.concat(connection.heldToRedis.splice(0));
        // Held bytes go through the parser again, so a fault armed meanwhile still sees whole commands.
        if (held.length > 0) connection.client.emit('data', held);
      }
    },
    async close() {
      for (const connection of [...connections]) drop(connection);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function describe(connection: number, parts: string[]): SeenCommand {
  const name = parts[0]!.toUpperCase();
  const args = parts.slice(1);
  let script: string | undefined;
  if (name === 'EVALSHA') script = SCRIPT_BY_SHA.get(args[0] ?? '');
  if (name === 'EVAL') script = SCRIPT_BY_SHA.get(sha1(args[0] ?? ''));
  const key = name === 'EVALSHA' || name === 'EVAL' ? (Number(args[1]) > 0 ? args[2] : undefined) : args[0];
  return { connection, name, args, script: script ?? (name === 'EVALSHA' || name === 'EVAL' ? 'unknown-script' : undefined), key };
}
