// What every command is made of: its words, options and arguments (for parsing and help), and a
// run function over a context that holds the parsed values, the HTTP client and the output.
import { UsageError } from './errors.ts';
import { isRecord, type HttpClient, type JsonAnswer } from './http.ts';
import type { Io } from './output.ts';

export interface OptionSpec {
  type: 'string' | 'boolean';
  /** The option may be given several times (`--capability a --capability b`). */
  multiple?: boolean;
  short?: string;
  /** The value's placeholder in help: FILE, ID, JSON. */
  valueName?: string;
  description: string;
  /** Missing is a usage error (exit 2). */
  required?: boolean;
}

export type OptionValues = Record<string, string | boolean | Array<string | boolean> | undefined>;

/** A parsed, validated invocation: everything a command needs, nothing global. */
export interface CommandContext {
  /** Positional arguments by the names the command declared (`ID`, `CAPABILITY`). */
  args: Record<string, string>;
  values: OptionValues;
  /** --json: the server's JSON (or one JSON object) on stdout, nothing else. */
  json: boolean;
  http: HttpClient;
  /** Present for admin commands (main refuses to run one without it); never printed. */
  adminToken: string | undefined;
  io: Io;
  env: Readonly<Record<string, string | undefined>>;
  /** Where relative file paths are resolved. */
  cwd: string;
  /** Aborted on SIGINT or SIGTERM: a command that runs until stopped (audit tail --follow) ends cleanly. */
  stop: AbortSignal;
}

export interface CommandSpec {
  /** The words naming it: ['hosts', 'add'], or ['keygen']. */
  words: readonly string[];
  summary: string;
  /** A paragraph for `--help`, when the summary is not enough. */
  details?: string;
  /** Required positional arguments, in order, named in capitals. */
  args: readonly string[];
  options: Readonly<Record<string, OptionSpec>>;
  /** Needs the admin token (the admin API). */
  admin: boolean;
  examples: readonly string[];
  run(ctx: CommandContext): Promise<void>;
}

// ---- reading option values -----------------------------------------------------------------------

export function stringOption(values: OptionValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

export function stringList(values: OptionValues, name: string): string[] {
  const value = values[name];
  if (Array.isArray(value)) return value.filter((v): v is string => typeof v === 'string');
  return typeof value === 'string' ? [value] : [];
}

/** A positive whole number within `max`, or undefined when the option was not given. */
export function integerOption(values: OptionValues, name: string, max: number): number | undefined {
  const text = stringOption(values, name);
  if (text === undefined) return undefined;
  if (!/^\d{1,9}$/.test(text) || Number(text) < 1 || Number(text) > max) throw new UsageError(`--${name} must be a whole number from 1 to ${max}`);
  return Number(text);
}

/** A JSON object given on the command line (`--args '{"city":"Oslo"}'`). */
export function jsonObjectOption(values: OptionValues, name: string): Record<string, unknown> | undefined {
  const text = stringOption(values, name);
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`--${name} is not valid JSON (${(err as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new UsageError(`--${name} must be a JSON object`);
  return value as Record<string, unknown>;
}

/**
 * The person the admin acts for: --user-id, else $AGENTGATE_USER_ID. The server has no default
 * identity (docs/stances.md, "Who the admin acts for"), so neither has the tool.
 */
export function userIdOf(ctx: CommandContext): string {
  const userId = stringOption(ctx.values, 'user-id') ?? nonEmpty(ctx.env.AGENTGATE_USER_ID);
  if (userId === undefined) {
    throw new UsageError('--user-id is required: the person the admin acts for, e.g. admin:alice (or set AGENTGATE_USER_ID)');
  }
  return userId;
}

export const nonEmpty = (value: string | undefined): string | undefined => (value === undefined || value === '' ? undefined : value);

// ---- talking to the admin API and printing its answers ---------------------------------------------

/** One admin API call with the admin token. */
export function adminCall(
  ctx: CommandContext, method: 'GET' | 'POST' | 'DELETE', path: string, options: { json?: unknown; wasm?: Uint8Array; query?: Record<string, string | undefined> } = {},
): Promise<JsonAnswer> {
  return ctx.http.send(method, ctx.http.url(path, options.query), {
    token: ctx.adminToken, ...(options.json !== undefined ? { json: options.json } : {}), ...(options.wasm !== undefined ? { wasm: options.wasm } : {}),
  });
}

/** With --json the server's body exactly as sent; otherwise what `human` makes of it. */
export function printAnswer(ctx: CommandContext, answer: JsonAnswer, human: (body: Record<string, unknown>) => string): void {
  if (ctx.json) {
    ctx.io.stdout(answer.text.endsWith('\n') ? answer.text : `${answer.text}\n`);
    return;
  }
  ctx.io.stdout(human(isRecord(answer.body) ? answer.body : {}));
}

/**
 * A command that makes one admin call, with no arguments or options, and prints its answer: the
 * shape of every `status`, `list` and `reload` of the admin API.
 */
export function adminCallCommand(words: readonly [string, string], summary: string, call: { method: 'GET' | 'POST'; path: string }, human: (body: Record<string, unknown>) => string): CommandSpec {
  return {
    words,
    summary,
    args: [],
    options: {},
    admin: true,
    examples: [`agentgate ${words.join(' ')}`],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, call.method, call.path), human);
    },
  };
}

/** A local command's result: one JSON object with --json, else the human text. */
export function printLocal(ctx: CommandContext, json: Record<string, unknown>, human: string): void {
  ctx.io.stdout(ctx.json ? `${JSON.stringify(json)}\n` : human);
}
