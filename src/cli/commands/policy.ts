// `agentgate policy reload|status`: the active Rego policy artefact (DESIGN §5).
import { adminCall, printAnswer, type CommandSpec } from '../command.ts';
import { keyValues } from '../output.ts';

export const policyCommands: CommandSpec[] = [
  {
    words: ['policy', 'status'],
    summary: "The active policy artefact: its sha256, generation and load time",
    args: [],
    options: {},
    admin: true,
    examples: ['agentgate policy status'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'GET', '/admin/policy'), (body) =>
        keyValues([['sha256', body.sha256], ['generation', body.generation], ['loaded_at', body.loaded_at]]));
    },
  },
  {
    words: ['policy', 'reload'],
    summary: 'Reload the policy artefact; a refused one (422 reload_rejected, exit 1) leaves the old one serving',
    args: [],
    options: {},
    admin: true,
    examples: ['agentgate policy reload'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'POST', '/admin/policy/reload'), (body) =>
        keyValues([['sha256', body.sha256], ['generation', body.generation]]));
    },
  },
];
