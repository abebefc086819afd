// A loopback TCP proxy in front of a real Redis that records what clients send: every command
// (parsed from RESP) and every round trip. A round trip starts when a client sends after Redis
// has answered (or on its first send): commands a client pipelines go out before any answer
// comes back and so share one round trip, while a command sent after waiting for an answer starts
// a new one. Tests use it to count what a request costs in Redis, measured on the wire.
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { RespCommandParser } from './resp.ts';

export interface ProxiedCommand {
  /** Which client connection sent it, numbered from 1 in connection order. */
  connection: number;
  /** Which round trip of that connection it belongs to, numbered from 1. */
  roundTrip: number;
  /** The command name, upper case, and its arguments (each cut to its first 200 bytes). */
  name: string;
  args: string[];
  /** The first key it names: a script's first KEYS entry, else the first argument. */
  key: string | undefined;
}

export interface RedisProxy {
  url: string;
  commands: ProxiedCommand[];
  /** Round trips per connection so far. */
  roundTrips(): Map<number, number>;
  /**
   * Round trips the clients made one after another, over all connections: one starts when a client
   * sends while no connection waits for Redis. Commands on two connections sent before either is
   * answered share one; a command sent after waiting for another connection's answer starts the next.
   * Exact for the two connections a request uses (the command connection and execute's own); with
   * more, a connection that sends again while another still waits is not counted.
   */
  waits(): number;
  /** Forgets what was recorded so far (connections stay open). */
  reset(): void;
  close(): Promise<void>;
}

const MAX_RECORDED_ARG_BYTES = 200;

/** Lets anything sent after a response (fire-and-forget work) reach the proxy before a test looks. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

/**
 * What one call sent to Redis through `proxy`: its commands, and the round trips per connection.
 * Whatever earlier calls sent after their responses is let through and forgotten first.
 */
export async function measureWire<T>(proxy: RedisProxy, call: () => Promise<T>): Promise<{ res: T; commands: ProxiedCommand[]; roundTrips: number[]; waits: number }> {
  await settle();
  proxy.reset();
  const res = await call();
  await settle();
  return { res, commands: [...proxy.commands], roundTrips: [...proxy.roundTrips().values()], waits: proxy.waits() };
}

export async function startRedisProxy(upstreamUrl: string): Promise<RedisProxy> {
  const upstream = new URL(upstreamUrl);
  const commands: ProxiedCommand[] = [];
  const roundTripCounts = new Map<number, number>();
  const sockets = new Set<Socket>();
  let connections = 0;
  /** Connections that sent and have not yet been answered. */
  const waiting = new Set<number>();
  let waits = 0;

  const server: Server = createServer((client) => {
    const connection = ++connections;
    const redis = connect({ host: upstream.hostname, port: Number(upstream.port || 6379) });
    sockets.add(client).add(redis);
    const parser = new RespCommandParser({ maxPartBytes: MAX_RECORDED_ARG_BYTES });
    // True when the last thing on this connection was Redis answering (or nothing yet).
    let awaitingClient = true;
    client.on('data', (chunk: Buffer) => {
      if (awaitingClient) roundTripCounts.set(connection, (roundTripCounts.get(connection) ?? 0) + 1);
      awaitingClient = false;
      if (waiting.size === 0) waits += 1;
      waiting.add(connection);
      const roundTrip = roundTripCounts.get(connection)!;
      for (const { parts: [name, ...args] } of parser.push(chunk)) {
        const upper = name!.toUpperCase();
        commands.push({ connection, roundTrip, name: upper, args, key: upper === 'EVALSHA' || upper === 'EVAL' ? args[2] : args[0] });
      }
      redis.write(chunk);
    });
    redis.on('data', (chunk: Buffer) => {
      awaitingClient = true;
      waiting.delete(connection);
      client.write(chunk);
    });
    const end = () => {
      waiting.delete(connection);
      client.destroy();
      redis.destroy();
      sockets.delete(client);
      sockets.delete(redis);
    };
    client.on('close', end).on('error', end);
    redis.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    commands,
    roundTrips: () => new Map(roundTripCounts),
    waits: () => waits,
    reset() {
      commands.length = 0;
      roundTripCounts.clear();
      waits = 0;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Every key a script call (EVAL or EVALSHA: script, numkeys, keys…, args…) names. */
export function scriptKeys(command: ProxiedCommand): string[] {
  return command.args.slice(2, 2 + Number(command.args[1]));
}

/**
 * How many arguments of an execute script call come before its variable parts, as
 * src/store/redis/scripts.ts EXECUTE_ROUND_TRIP lays them out: key version, jti ttl, now, session
 * deadline, counter count c, event count e, the audit stream's max length and field name, record
 * count d, the decision stream's max length and field name; then c pairs, the e events, the d
 * records, and the capability names.
 */
const EXECUTE_FIXED_ARGS = 11;

/** The arguments (ARGV) of an execute script call, after its keys. */
export function executeScriptArgs(command: ProxiedCommand): string[] {
  return command.args.slice(2 + Number(command.args[1]));
}

/** The audit events an execute script call appends (each event's JSON cut to its first 200 bytes). */
export function executeScriptEvents(command: ProxiedCommand): string[] {
  const argv = executeScriptArgs(command);
  const from = EXECUTE_FIXED_ARGS + 2 * Number(argv[4]);
  return argv.slice(from, from + Number(argv[5]));
}

/** The decision records an execute script call appends (each record's JSON cut to its first 200 bytes). */
export function executeScriptDecisions(command: ProxiedCommand): string[] {
  const argv = executeScriptArgs(command);
  const from = EXECUTE_FIXED_ARGS + 2 * Number(argv[4]) + Number(argv[5]);
  return argv.slice(from, from + Number(argv[8]));
}
