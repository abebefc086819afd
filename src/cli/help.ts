// Help text, generated from the command specs so it cannot drift from what the parser accepts.
import type { CommandSpec, OptionSpec } from './command.ts';
import { GLOBAL_OPTIONS } from './globals.ts';

const EXIT_CODES = `exit codes:
  0  success
  1  the server refused (4xx/5xx): "error: <code>: <message>" on stderr, or its JSON body with --json
  2  usage error: unknown command or option, missing or malformed argument, unusable file; nothing was sent
  3  the server could not be reached or did not answer in time
`;

const optionText = (name: string, spec: OptionSpec) =>
  `--${name}${spec.type === 'string' ? ` ${spec.valueName ?? 'VALUE'}` : ''}${spec.multiple ? ' ...' : ''}`;

/** `hosts add --public-key FILE [--name NAME] ...` */
export function usageLine(command: CommandSpec): string {
  const options = Object.entries(command.options).map(([name, spec]) => (spec.required ? optionText(name, spec) : `[${optionText(name, spec)}]`));
  return ['agentgate', ...command.words, ...options, ...command.args].join(' ');
}

function optionLines(options: Readonly<Record<string, OptionSpec>>): string {
  const rows = Object.entries(options).map(([name, spec]) => [`${spec.short ? `-${spec.short}, ` : ''}${optionText(name, spec)}`, spec.description] as const);
  const width = Math.max(0, ...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`).join('\n');
}

export function commandHelp(command: CommandSpec): string {
  const parts = [`usage: ${usageLine(command)}`, '', command.summary];
  if (command.details) parts.push('', command.details);
  if (Object.keys(command.options).length > 0) parts.push('', 'options:', optionLines(command.options));
  parts.push('', 'global options:', optionLines(GLOBAL_OPTIONS));
  if (command.examples.length > 0) parts.push('', 'examples:', ...command.examples.map((e) => `  ${e}`));
  return `${parts.join('\n')}\n\n${EXIT_CODES}`;
}

function commandList(commands: readonly CommandSpec[]): string {
  const rows = commands.map((c) => [c.words.join(' '), c.summary] as const);
  const width = Math.max(0, ...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`).join('\n');
}

export function groupHelp(group: string, commands: readonly CommandSpec[]): string {
  return `usage: agentgate ${group} <command> [options]\n\ncommands:\n${commandList(commands)}\n\nrun 'agentgate ${group} <command> --help' for a command's options\n`;
}

export function topHelp(commands: readonly CommandSpec[]): string {
  return [
    'usage: agentgate <command> [options]',
    '',
    'Operates an agentgate server: its admin API, and registering and executing as a host or agent.',
    '',
    'commands:',
    commandList(commands),
    '',
    'global options:',
    optionLines(GLOBAL_OPTIONS),
    '',
    "run 'agentgate <command> --help' for a command's options and examples; docs/cli.md has them all",
    '',
    EXIT_CODES,
  ].join('\n');
}
