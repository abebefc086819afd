// `agentgate register`: registers an agent as its host would (protocol §4.3), signing the host+jwt
// that src/auth/host-auth.ts and src/services/registration.ts expect. An unknown host registers
// itself on the way (dynamic host registration), proving its key with `host_public_key`.
import { jsonObjectOption, printAnswer, stringList, stringOption, type CommandSpec } from '../command.ts';
import { discover, endpointUrl } from '../discovery.ts';
import { UsageError } from '../errors.ts';
import { isRecord } from '../http.ts';
import { readKeyFile, signingKeyOf, thumbprintOf, type KeyFile } from '../keys.ts';
import type { Io } from '../output.ts';
import { safe } from '../output.ts';
import { freshTokenInputs, hostRegistrationClaims, signJwt } from '../tokens.ts';
import { agentLines } from './agents.ts';

const MODES = ['delegated', 'autonomous'] as const;

/** A private key file others can read is said once, on stderr (never its content). */
export function warnIfExposed(io: Io, file: KeyFile): void {
  if (file.exposed) io.stderr(`warning: ${safe(file.path)} holds a private key and can be read by other users; chmod 600 it\n`);
}

/**
 * The `capabilities` member: names, or `{name, constraints}` for those --constraints covers. A
 * constraint for a capability not asked for is a mistake worth stopping at.
 */
export function requestedCapabilities(names: readonly string[], constraints: Record<string, unknown> | undefined): Array<string | { name: string; constraints: Record<string, unknown> }> {
  const byName = constraints ?? {};
  for (const [name, value] of Object.entries(byName)) {
    if (!names.includes(name)) throw new UsageError(`--constraints names ${JSON.stringify(name)}, which no --capability asks for`);
    if (!isRecord(value)) throw new UsageError(`--constraints for ${JSON.stringify(name)} must be a JSON object ({field: value} or {field: {operator: operand}})`);
  }
  return names.map((name) => (isRecord(byName[name]) ? { name, constraints: byName[name] } : name));
}

export const registerCommand: CommandSpec = {
  words: ['register'],
  summary: 'Register an agent as its host would (signs a host+jwt with the host key)',
  details: 'An unknown host registers itself with its first agent. A delegated agent usually waits for a person: '
    + 'the answer carries the code and the link to show them. --agent-key may be the public or the private JWK file.',
  args: [],
  options: {
    'host-key': { type: 'string', valueName: 'FILE', required: true, description: "the host's private JWK file" },
    'agent-key': { type: 'string', valueName: 'FILE', required: true, description: "the new agent's JWK file (its public half is registered)" },
    name: { type: 'string', valueName: 'NAME', required: true, description: "the agent's name" },
    mode: { type: 'string', valueName: 'MODE', description: 'delegated (acts for a person; default) or autonomous' },
    capability: { type: 'string', multiple: true, valueName: 'CAPABILITY', description: 'a capability to ask for (repeatable)' },
    constraints: { type: 'string', valueName: 'JSON', description: 'constraints per capability: {"transfer_money": {"amount": {"max": 100}}}' },
    'host-name': { type: 'string', valueName: 'NAME', description: "the host's name, shown to the person who approves (kept when this registration creates the host)" },
    reason: { type: 'string', valueName: 'TEXT', description: 'why the agent needs its capabilities, shown to the person who approves' },
  },
  admin: false,
  examples: [
    'agentgate register --host-key host.private.jwk.json --agent-key agent.private.jwk.json --name mailer --capability echo',
    `agentgate register --host-key host.private.jwk.json --agent-key agent.public.jwk.json --name mailer --host-name build-server --capability echo --reason 'to send the nightly report'`,
    `agentgate register --host-key host.private.jwk.json --agent-key agent.public.jwk.json --name payer --capability transfer_money --constraints '{"transfer_money":{"amount":{"max":100}}}'`,
  ],
  async run(ctx) {
    const mode = stringOption(ctx.values, 'mode') ?? 'delegated';
    if (!(MODES as readonly string[]).includes(mode)) throw new UsageError(`--mode must be one of ${MODES.join(', ')}`);
    const capabilities = requestedCapabilities(stringList(ctx.values, 'capability'), jsonObjectOption(ctx.values, 'constraints'));
    const hostKey = await readKeyFile(stringOption(ctx.values, 'host-key')!, ctx.cwd, '--host-key');
    const agentKey = await readKeyFile(stringOption(ctx.values, 'agent-key')!, ctx.cwd, '--agent-key');
    warnIfExposed(ctx.io, hostKey);
    const signingKey = await signingKeyOf(hostKey, '--host-key');
    const discovery = await discover(ctx.http);
    const claims = hostRegistrationClaims({
      hostThumbprint: await thumbprintOf(hostKey.publicJwk),
      issuer: discovery.issuer,
      hostPublicJwk: hostKey.publicJwk,
      agentPublicJwk: agentKey.publicJwk,
      ...freshTokenInputs(),
    });
    const token = await signJwt(claims, 'host+jwt', signingKey, hostKey.alg);
    const url = endpointUrl(ctx.http, discovery.endpoints?.register, '/agent/register');
    // The approval page names the host by `host_name` ("a host that gave no name" without one) and
    // shows `reason`; the server records the name only when this registration creates the host.
    const hostName = stringOption(ctx.values, 'host-name');
    const reason = stringOption(ctx.values, 'reason');
    const answer = await ctx.http.send('POST', url, {
      token,
      json: {
        name: stringOption(ctx.values, 'name')!, mode, ...(capabilities.length > 0 ? { capabilities } : {}),
        ...(hostName !== undefined ? { host_name: hostName } : {}), ...(reason !== undefined ? { reason } : {}),
      },
    });
    printAnswer(ctx, answer, (agent) => {
      const waiting = agent.status === 'pending' && isRecord(agent.approval)
        ? `\nwaiting for a person: show them ${safe(agent.approval.verification_uri_complete)} (code ${safe(agent.approval.user_code)}),\nor approve it yourself: agentgate agents approve ${safe(agent.agent_id)} --user-id <person>\n`
        : '';
      return agentLines(agent) + waiting;
    });
  },
};
