// `agentgate agents show|approve|deny|revoke`: the admin API's agent routes (README, "Admin API").
import { adminCall, printAnswer, stringList, stringOption, userIdOf, type CommandContext, type CommandSpec } from '../command.ts';
import { isRecord } from '../http.ts';
import { keyValues, table } from '../output.ts';

/** The agent view (protocol §4.5) as `key value` lines, its grants as a table. */
export function agentLines(agent: Record<string, unknown>): string {
  const approval = isRecord(agent.approval) ? agent.approval : undefined;
  const head = keyValues([
    ['agent_id', agent.agent_id],
    ['host_id', agent.host_id],
    ['name', agent.name],
    ['status', agent.status],
    ['mode', agent.mode],
    ['user_id', agent.user_id],
    ['created_at', agent.created_at],
    ['activated_at', agent.activated_at],
    ['last_used_at', agent.last_used_at],
    ['expires_at', agent.expires_at],
    ['user_code', approval?.user_code],
    ['approve_at', approval?.verification_uri_complete],
    ['approval_expires_in', typeof approval?.expires_in === 'number' ? `${approval.expires_in} s` : undefined],
  ]);
  const grants = Array.isArray(agent.agent_capability_grants) ? agent.agent_capability_grants.filter(isRecord) : [];
  if (grants.length === 0) return `${head}\nno grants\n`;
  return `${head}\n${table(['grant', 'capability', 'status', 'constraints'], grants.map((g) => [g.id, g.capability, g.status, g.constraints ?? '-']))}`;
}

const path = (agentId: string) => `/admin/agents/${encodeURIComponent(agentId)}`;

const userCodeOption = {
  type: 'string', valueName: 'CODE',
  description: 'the code the person was shown: only the approval it names is decided (400 if it was replaced)',
} as const;

const userIdOption = {
  type: 'string', valueName: 'USER', description: 'the person the admin acts for, e.g. admin:alice (default: $AGENTGATE_USER_ID; required)',
} as const;

async function decide(ctx: CommandContext, verdict: 'approve' | 'deny'): Promise<void> {
  const userCode = stringOption(ctx.values, 'user-code');
  const capabilities = stringList(ctx.values, 'capability');
  const json = {
    user_id: userIdOf(ctx),
    ...(userCode !== undefined ? { user_code: userCode } : {}),
    ...(verdict === 'approve' && capabilities.length > 0 ? { capabilities } : {}),
  };
  printAnswer(ctx, await adminCall(ctx, 'POST', `${path(ctx.args.ID!)}/${verdict}`, { json }), agentLines);
}

export const agentsCommands: CommandSpec[] = [
  {
    words: ['agents', 'show'],
    summary: 'Show an agent: status, lifetimes, grants, and its approval code while it waits',
    args: ['ID'],
    options: {},
    admin: true,
    examples: ['agentgate agents show agt_0123'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'GET', path(ctx.args.ID!)), agentLines);
    },
  },
  {
    words: ['agents', 'approve'],
    summary: "Approve what the agent's open approval waits on (all of it, or only the named capabilities)",
    details: 'The capabilities of the approval that are not named are denied. Approving a delegated agent of an unlinked host links the host to the person.',
    args: ['ID'],
    options: {
      capability: { type: 'string', multiple: true, valueName: 'CAPABILITY', description: 'approve only these (repeatable; default: all the approval asks for)' },
      'user-id': userIdOption,
      'user-code': userCodeOption,
    },
    admin: true,
    examples: ['agentgate agents approve agt_0123 --user-id admin:alice', 'agentgate agents approve agt_0123 --capability echo --user-code BCDF-GHJK --user-id admin:alice'],
    run: (ctx) => decide(ctx, 'approve'),
  },
  {
    words: ['agents', 'deny'],
    summary: "Deny what the agent's open approval waits on (a pending agent becomes rejected, for good)",
    args: ['ID'],
    options: { 'user-id': userIdOption, 'user-code': userCodeOption },
    admin: true,
    examples: ['agentgate agents deny agt_0123 --user-id admin:alice'],
    run: (ctx) => decide(ctx, 'deny'),
  },
  {
    words: ['agents', 'revoke'],
    summary: 'Revoke an agent and every grant it holds (permanent; idempotent)',
    args: ['ID'],
    options: {},
    admin: true,
    examples: ['agentgate agents revoke agt_0123'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'POST', `${path(ctx.args.ID!)}/revoke`), agentLines);
    },
  },
];
