// `agentgate operators list|reload`: the constraint operators (DESIGN §6), built-in and plugins.
import { adminCallCommand, type CommandSpec } from '../command.ts';
import { isRecord } from '../http.ts';
import { safe, table } from '../output.ts';

export const operatorsCommands: CommandSpec[] = [
  adminCallCommand(['operators', 'list'], 'List the constraint operators: built-ins and the plugins loaded now', { method: 'GET', path: '/admin/operators' }, (body) => {
    const operators = Array.isArray(body.operators) ? body.operators.filter(isRecord) : [];
    return table(['name', 'kind', 'source', 'description'], operators.map((o) => [o.name, o.kind, o.source, o.description]));
  }),
  adminCallCommand(
    ['operators', 'reload'],
    'Re-import the operator plugins; a broken one (422 reload_rejected, exit 1) leaves the previous set serving',
    { method: 'POST', path: '/admin/operators/reload' },
    (body) => {
      const names = Array.isArray(body.operators) ? body.operators : [];
      return `${names.length} operators loaded:\n${names.map((n) => `  ${safe(n)}`).join('\n')}\n`;
    },
  ),
];
