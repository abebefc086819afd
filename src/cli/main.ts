// The command-line tool's entry (bin/agentgate.ts runs it): parse, run one command, and turn the
// outcome into an exit code and the matching output (docs/cli.md). runCli takes its inputs and
// writes through `io`, so it can be driven without a process.
import { parseCommandLine } from './args.ts';
import { COMMANDS } from './commands/index.ts';
import { EXIT, ServerRefused, ServerUnreachable, UsageError } from './errors.ts';
import { globalSettings } from './globals.ts';
import { HttpClient } from './http.ts';
import { refusalLines, safe, type Io } from './output.ts';

/** Not one of the documented outcomes: a bug in the tool (sysexits' EX_SOFTWARE). */
const EXIT_INTERNAL = 70;

interface CliInput {
  argv: readonly string[];
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  io: Io;
  stop: AbortSignal;
}

async function runCli(input: CliInput): Promise<number> {
  const { argv, io } = input;
  // Known before parsing, so even a usage error answers in JSON when JSON was asked for.
  const json = argv.slice(0, argv.includes('--') ? argv.indexOf('--') : argv.length).includes('--json');
  try {
    const parsed = parseCommandLine(argv, COMMANDS);
    if (parsed.kind === 'help') {
      io.stdout(parsed.text);
      return EXIT.ok;
    }
    const settings = globalSettings(parsed.values, input.env);
    if (parsed.command.admin && settings.adminToken === undefined) {
      throw new UsageError('this command needs the admin token: set AGENTGATE_ADMIN_TOKEN (or pass --admin-token)');
    }
    await parsed.command.run({
      args: parsed.args,
      values: parsed.values,
      json,
      http: new HttpClient(settings.baseUrl, settings.timeoutMs),
      adminToken: settings.adminToken,
      io,
      env: input.env,
      cwd: input.cwd,
      stop: input.stop,
    });
    return EXIT.ok;
  } catch (err) {
    return report(err, io, json);
  }
}

/** Each failure's exit code and output: JSON on stdout with --json, a human line on stderr otherwise. */
function report(err: unknown, io: Io, json: boolean): number {
  if (err instanceof ServerRefused) {
    if (json) io.stdout(err.body !== null ? `${err.bodyText.trimEnd()}\n` : `${JSON.stringify({ error: err.code, message: err.message })}\n`);
    else io.stderr(refusalLines(err.code, err.message, err.body));
    return EXIT.refused;
  }
  if (err instanceof UsageError) {
    if (json) io.stdout(`${JSON.stringify({ error: 'usage_error', message: err.message })}\n`);
    else io.stderr(`error: ${safe(err.message)}\n${err.help ? `${err.help.trimEnd()}\n` : ''}`);
    return EXIT.usage;
  }
  if (err instanceof ServerUnreachable) {
    if (json) io.stdout(`${JSON.stringify({ error: 'unreachable', message: err.message })}\n`);
    else io.stderr(`error: unreachable: ${safe(err.message)}\n`);
    return EXIT.unreachable;
  }
  const message = err instanceof Error ? err.message : String(err);
  if (json) io.stdout(`${JSON.stringify({ error: 'internal_error', message })}\n`);
  else io.stderr(`error: internal: ${safe(message)} (this is a bug in agentgate's CLI)\n`);
  return EXIT_INTERNAL;
}

/** Runs the tool in this process: real argv, environment, streams and signals. */
export async function main(): Promise<void> {
  const stopper = new AbortController();
  const stop = () => stopper.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const code = await runCli({
    argv: process.argv.slice(2),
    env: process.env,
    cwd: process.cwd(),
    io: { stdout: (text) => process.stdout.write(text), stderr: (text) => process.stderr.write(text) },
    stop: stopper.signal,
  });
  process.off('SIGINT', stop);
  process.off('SIGTERM', stop);
  // exitCode rather than exit(): stdout is flushed before the process ends, even into a pipe.
  process.exitCode = code;
}
