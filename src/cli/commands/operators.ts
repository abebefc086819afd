// `agentgate operators list|reload`: the constraint operators (DESIGN §6), built-in and plugins.
import { adminCall, printAnswer, type CommandSpec } from '../command.ts';
import { isRecord } from '../http.ts';
import { safe, table } from '../output.ts';

export const operatorsCommands: CommandSpec[] = [
  {
    words: ['operators', 'list'],
    summary: 'List the constraint operators: built-ins and the plugins loaded now',
    args: [],
    options: {},
    admin: true,
    examples: ['agentgate operators list'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'GET', '/admin/operators'), (body) => {
        const operators = Array.isArray(body.operators) ? body.operators.filter(isRecord) : [];
        return table(['name', 'kind', 'source', 'description'], operators.map((o) => [o.name, o.kind, o.source, o.description]));
      });
    },
  },
  {
    words: ['operators', 'reload'],
    summary: 'Re-import the operator plugins; a broken one (422 reload_rejected, exit 1) leaves the previous set serving',
    args: [],
    options: {},
    admin: true,
    examples: ['agentgate operators reload'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'POST', '/admin/operators/reload'), (body) => {
        const names = Array.isArray(body.operators) ? body.operators : [];
        return `${names.length} operators loaded:\n${names.map((n) => `  ${safe(n)}`).join('\n')}\n`;
      });
    },
  },
];
