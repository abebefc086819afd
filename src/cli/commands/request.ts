// `agentgate request`: asks for more capabilities as the agent (protocol §4.4), signing the agent+jwt
// that src/auth/agent-auth.ts checks, for the issuer audience every agent endpoint but execute uses.
import { jsonObjectOption, printAnswer, stringList, stringOption, type CommandSpec } from '../command.ts';
import { endpointUrl } from '../discovery.ts';
import { UsageError } from '../errors.ts';
import { isRecord } from '../http.ts';
import { safe } from '../output.ts';
import { agentLines } from './agents.ts';
import { agentToken } from './execute.ts';
import { requestedCapabilities } from './register.ts';

export const requestCommand: CommandSpec = {
  words: ['request'],
  summary: 'Ask for more capabilities as an agent (signs an agent+jwt with the agent key)',
  details: 'What needs a person waits for one: the answer carries the code and the link to show them, and the grants it covers stay pending until then.',
  args: [],
  options: {
    'agent-key': { type: 'string', valueName: 'FILE', required: true, description: "the agent's private JWK file" },
    'agent-id': { type: 'string', valueName: 'ID', required: true, description: 'the agent id registration answered' },
    'host-key': { type: 'string', valueName: 'FILE', description: "the agent's host's JWK file, to name it in iss" },
    capability: { type: 'string', multiple: true, valueName: 'CAPABILITY', description: 'a capability to ask for (repeatable, at least one)' },
    constraints: { type: 'string', valueName: 'JSON', description: 'constraints per capability: {"transfer_money": {"amount": {"max": 100}}}' },
    reason: { type: 'string', valueName: 'TEXT', description: 'why, shown to the person who approves' },
  },
  admin: false,
  examples: [`agentgate request --agent-key agent.private.jwk.json --agent-id agt_0123 --capability echo --reason 'to say hello'`],
  async run(ctx) {
    const names = stringList(ctx.values, 'capability');
    if (names.length === 0) throw new UsageError('request needs at least one --capability');
    const capabilities = requestedCapabilities(names, jsonObjectOption(ctx.values, 'constraints'));
    const { discovery, token } = await agentToken(ctx, (d) => d.issuer);
    const url = endpointUrl(ctx.http, discovery.endpoints?.request_capability, '/agent/request-capability');
    const reason = stringOption(ctx.values, 'reason');
    const answer = await ctx.http.send('POST', url, { token, json: { capabilities, ...(reason !== undefined ? { reason } : {}) } });
    printAnswer(ctx, answer, (body) => {
      const waiting = body.status === 'pending' && isRecord(body.approval)
        ? `\nwaiting for a person: show them ${safe(body.approval.verification_uri_complete)} (code ${safe(body.approval.user_code)})\n`
        : '';
      return agentLines(body) + waiting;
    });
  },
};
