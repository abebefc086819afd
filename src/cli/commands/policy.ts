// `agentgate policy reload|status`: the active Rego policy artefact (DESIGN §5).
import { adminCallCommand, type CommandSpec } from '../command.ts';
import { keyValues } from '../output.ts';

export const policyCommands: CommandSpec[] = [
  adminCallCommand(['policy', 'status'], 'The active policy artefact: its sha256, generation and load time', { method: 'GET', path: '/admin/policy' }, (body) =>
    keyValues([['sha256', body.sha256], ['generation', body.generation], ['loaded_at', body.loaded_at]])),
  adminCallCommand(
    ['policy', 'reload'],
    'Reload the policy artefact; a refused one (422 reload_rejected, exit 1) leaves the old one serving',
    { method: 'POST', path: '/admin/policy/reload' },
    (body) => keyValues([['sha256', body.sha256], ['generation', body.generation]]),
  ),
];
