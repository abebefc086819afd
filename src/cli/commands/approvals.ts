// `agentgate approvals list`: agents waiting for a person (GET /admin/approvals).
import { adminCall, integerOption, printAnswer, type CommandSpec } from '../command.ts';
import { isRecord } from '../http.ts';
import { list, table } from '../output.ts';

/** The server's own bound on the list (src/services/approvals/waiting.ts). */
const MAX_LISTED = 500;

function approvalsTable(body: Record<string, unknown>): string {
  const items = Array.isArray(body.approvals) ? body.approvals.filter(isRecord) : [];
  if (items.length === 0) return 'no agents are waiting for approval\n';
  const rows = items.map((a) => [
    a.agent_id,
    a.host_id,
    a.name,
    a.status,
    list(Array.isArray(a.capabilities) ? a.capabilities.filter(isRecord).map((g) => g.capability) : []),
    a.user_code ?? '-',
    a.expires_at === undefined ? '-' : `${String(a.expires_at)}${a.user_code === undefined ? ' (lapsed)' : ''}`,
  ]);
  const note = body.truncated === true ? `\nmore agents are waiting than listed; raise --limit (at most ${MAX_LISTED}) or decide these first\n` : '';
  return table(['agent', 'host', 'name', 'status', 'capabilities', 'user code', 'expires'], rows) + note;
}

export const approvalsCommands: CommandSpec[] = [
  {
    words: ['approvals', 'list'],
    summary: 'List agents waiting for a person: pending registrations and open capability requests',
    details: 'A lapsed approval has no code any more: the agent must ask again (or its host fetch a new code), or it is cleaned up.',
    args: [],
    options: {
      limit: { type: 'string', valueName: 'N', description: `list at most N agents (1-${MAX_LISTED}; default ${MAX_LISTED})` },
    },
    admin: true,
    examples: ['agentgate approvals list', 'agentgate approvals list --json | jq -r ".approvals[].agent_id"'],
    async run(ctx) {
      const limit = integerOption(ctx.values, 'limit', MAX_LISTED);
      const answer = await adminCall(ctx, 'GET', '/admin/approvals', { query: { limit: limit === undefined ? undefined : String(limit) } });
      printAnswer(ctx, answer, approvalsTable);
    },
  },
];
