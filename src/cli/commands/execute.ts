// `agentgate execute`: runs a capability as the agent (protocol §4.11), signing the agent+jwt that
// src/auth/agent-auth.ts checks, for the execute audience discovery names (`default_location`).
import { jsonObjectOption, printAnswer, stringOption, type CommandContext, type CommandSpec } from '../command.ts';
import { discover, endpointUrl, type Discovery } from '../discovery.ts';
import { readKeyFile, signingKeyOf, thumbprintOf } from '../keys.ts';
import { keyValues, safe } from '../output.ts';
import { agentClaims, freshTokenInputs, signJwt } from '../tokens.ts';
import { warnIfExposed } from './register.ts';

/** Pretty JSON, each line made terminal-safe (a capability's answer comes from an upstream). */
const prettyJson = (value: unknown) => `${JSON.stringify(value, null, 2).split('\n').map((line) => safe(line)).join('\n')}\n`;

/**
 * Reads discovery and signs a fresh agent+jwt from the --agent-key, --agent-id and --host-key
 * options, for the audience `audienceOf` picks (execute's location, or the issuer).
 */
export async function agentToken(ctx: CommandContext, audienceOf: (discovery: Discovery) => string): Promise<{ discovery: Discovery; token: string }> {
  const agentKey = await readKeyFile(stringOption(ctx.values, 'agent-key')!, ctx.cwd, '--agent-key');
  warnIfExposed(ctx.io, agentKey);
  const signingKey = await signingKeyOf(agentKey, '--agent-key');
  const hostKeyPath = stringOption(ctx.values, 'host-key');
  const hostThumbprint = hostKeyPath === undefined ? undefined : await thumbprintOf((await readKeyFile(hostKeyPath, ctx.cwd, '--host-key')).publicJwk);
  const discovery = await discover(ctx.http);
  const claims = agentClaims({ agentId: stringOption(ctx.values, 'agent-id')!, audience: audienceOf(discovery), hostThumbprint, ...freshTokenInputs() });
  return { discovery, token: await signJwt(claims, 'agent+jwt', signingKey, agentKey.alg) };
}

export const executeCommand: CommandSpec = {
  words: ['execute'],
  summary: 'Execute a capability as an agent (signs an agent+jwt with the agent key)',
  details: "Prints the capability's data (or, for an asynchronous one, its status URL). "
    + "With --host-key (public or private JWK) the token names the agent's host in `iss`, which the server then checks.",
  args: ['CAPABILITY'],
  options: {
    'agent-key': { type: 'string', valueName: 'FILE', required: true, description: "the agent's private JWK file" },
    'agent-id': { type: 'string', valueName: 'ID', required: true, description: 'the agent id registration answered' },
    'host-key': { type: 'string', valueName: 'FILE', description: "the agent's host's JWK file, to name it in iss" },
    args: { type: 'string', valueName: 'JSON', description: 'the arguments, a JSON object (default: none)' },
  },
  admin: false,
  examples: [
    `agentgate execute --agent-key agent.private.jwk.json --agent-id agt_0123 weather_lookup --args '{"city":"Oslo"}'`,
  ],
  async run(ctx) {
    const args = jsonObjectOption(ctx.values, 'args');
    const { discovery, token } = await agentToken(ctx, (d) => d.default_location);
    const url = endpointUrl(ctx.http, discovery.endpoints?.execute, '/capability/execute');
    const answer = await ctx.http.send('POST', url, { token, json: { capability: ctx.args.CAPABILITY!, ...(args !== undefined ? { arguments: args } : {}) } });
    printAnswer(ctx, answer, (body) => ('data' in body ? prettyJson(body.data) : keyValues([['status', body.status], ['status_url', body.status_url]])));
  },
};
