// Argument parsing with node:util parseArgs: which command the words name, its options (strictly:
// an unknown option is a usage error, never silently ignored) and its positional arguments.
// Global options may come anywhere; a command's options come after its words.
import { parseArgs } from 'node:util';
import type { CommandSpec, OptionValues } from './command.ts';
import { UsageError } from './errors.ts';
import { GLOBAL_OPTIONS } from './globals.ts';
import { commandHelp, groupHelp, topHelp, usageLine } from './help.ts';

/** How many words may name a command (`hosts add`). */
const MAX_COMMAND_WORDS = 2;
/** Arguments beyond this are refused before parsing: no command needs more. */
const MAX_ARGV = 256;

type ParsedCommandLine =
  | { kind: 'help'; text: string }
  | { kind: 'run'; command: CommandSpec; values: OptionValues; args: Record<string, string> };

export function parseCommandLine(argv: readonly string[], commands: readonly CommandSpec[]): ParsedCommandLine {
  if (argv.length > MAX_ARGV) throw new UsageError(`too many arguments (at most ${MAX_ARGV})`);
  const words = commandWords(argv);
  const wantsHelp = argv.some((a) => a === '--help' || a === '-h');
  if (words.length === 0 || words[0] === 'help') {
    if (wantsHelp || words[0] === 'help') return { kind: 'help', text: topHelp(commands) };
    throw new UsageError('no command given', "run 'agentgate --help' for the list of commands");
  }
  const group = commands.filter((c) => c.words[0] === words[0]);
  if (group.length === 0) throw new UsageError(`unknown command ${JSON.stringify(words[0])}`, "run 'agentgate --help' for the list of commands");
  const command = group.find((c) => c.words.length === 1) ?? group.find((c) => c.words[1] === words[1]);
  if (!command) {
    if (words[1] === undefined && wantsHelp) return { kind: 'help', text: groupHelp(words[0]!, group) };
    const what = words[1] === undefined ? `${words[0]} needs a command` : `unknown command ${JSON.stringify(`${words[0]} ${words[1]}`)}`;
    throw new UsageError(what, groupHelp(words[0]!, group));
  }
  const { values, positionals } = parseStrict(argv, command);
  if (values.help === true) return { kind: 'help', text: commandHelp(command) };
  const args = positionals.slice(command.words.length);
  if (args.length < command.args.length) {
    throw new UsageError(`missing ${command.args.slice(args.length).join(' ')}`, `usage: ${usageLine(command)}`);
  }
  if (args.length > command.args.length) {
    throw new UsageError(`unexpected argument ${JSON.stringify(args[command.args.length])}`, `usage: ${usageLine(command)}`);
  }
  for (const [name, spec] of Object.entries(command.options)) {
    if (spec.required && values[name] === undefined) throw new UsageError(`--${name} is required`, `usage: ${usageLine(command)}`);
  }
  return { kind: 'run', command, values, args: Object.fromEntries(command.args.map((name, i) => [name, args[i]!])) };
}

/**
 * The leading words that name the command, skipping options (and the values of the global options
 * that take one), so `--url X hosts show ID` finds `hosts show`.
 */
function commandWords(argv: readonly string[]): string[] {
  const words: string[] = [];
  for (let i = 0; i < argv.length && words.length < MAX_COMMAND_WORDS; i++) {
    const token = argv[i]!;
    if (token === '--') break;
    if (token.startsWith('-')) {
      const name = token.replace(/^--?/, '');
      if (GLOBAL_OPTIONS[name]?.type === 'string') i++;
      continue;
    }
    words.push(token);
  }
  return words;
}

function parseStrict(argv: readonly string[], command: CommandSpec): { values: OptionValues; positionals: string[] } {
  const specs = { ...GLOBAL_OPTIONS, ...command.options };
  const options = Object.fromEntries(Object.entries(specs).map(([name, spec]) => [
    name, { type: spec.type, ...(spec.multiple ? { multiple: true } : {}), ...(spec.short ? { short: spec.short } : {}) },
  ]));
  try {
    const parsed = parseArgs({ args: [...argv], options, strict: true, allowPositionals: true, allowNegative: false });
    return { values: parsed.values as OptionValues, positionals: parsed.positionals };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      // parseArgs's messages carry advice for its own API ("To specify a positional argument..."); the first sentence is the problem.
      const first = (err as Error).message.split(/(?<=\.)\s/)[0]!;
      throw new UsageError(first, `usage: ${usageLine(command)}\nrun 'agentgate ${command.words.join(' ')} --help' for details`);
    }
    throw err;
  }
}
