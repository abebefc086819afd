// `agentgate hosts add|show|revoke`: the admin API's host routes (README, "Admin API"); and
// `agentgate hosts enroll`, which a host runs to bind its key with a person's enrollment token.
import { adminCall, printAnswer, stringList, stringOption, userIdOf, type CommandSpec } from '../command.ts';
import { discover } from '../discovery.ts';
import { readKeyFile, signingKeyOf, thumbprintOf } from '../keys.ts';
import { keyValues, list } from '../output.ts';
import { freshTokenInputs, hostKeyClaims, signJwt } from '../tokens.ts';
import { warnIfExposed } from './register.ts';

/** A host as `key value` lines (the admin API's host view). */
function hostLines(host: Record<string, unknown>, extra: ReadonlyArray<readonly [string, unknown]> = []): string {
  return keyValues([
    ['host_id', host.host_id],
    ['name', host.name],
    ['status', host.status],
    ['user_id', host.user_id],
    ['default_capabilities', list(Array.isArray(host.default_capabilities) ? host.default_capabilities : [])],
    ['created_at', host.created_at],
    ['activated_at', host.activated_at],
    ...extra,
  ]);
}

const path = (hostId: string) => `/admin/hosts/${encodeURIComponent(hostId)}`;

export const hostsCommands: CommandSpec[] = [
  {
    words: ['hosts', 'add'],
    summary: 'Pre-register a host by its public key, linked to a person, with default capabilities',
    details: 'A host that exists already with this key is linked to the person and gets these defaults. '
      + 'The key file may be the public or the private JWK; only the public half is sent.',
    args: [],
    options: {
      'public-key': { type: 'string', valueName: 'FILE', required: true, description: "the host's JWK file" },
      name: { type: 'string', valueName: 'NAME', description: "the host's display name" },
      'default-capability': { type: 'string', multiple: true, valueName: 'CAPABILITY', description: 'granted to its agents without asking (repeatable)' },
      'user-id': { type: 'string', valueName: 'USER', description: 'the person the admin acts for, e.g. admin:alice (default: $AGENTGATE_USER_ID; required)' },
    },
    admin: true,
    examples: ['agentgate hosts add --public-key host.public.jwk.json --name build-bot --default-capability echo --user-id admin:alice'],
    async run(ctx) {
      const key = await readKeyFile(stringOption(ctx.values, 'public-key')!, ctx.cwd, '--public-key');
      const name = stringOption(ctx.values, 'name');
      const answer = await adminCall(ctx, 'POST', '/admin/hosts', {
        json: {
          public_key: key.publicJwk,
          user_id: userIdOf(ctx),
          default_capabilities: stringList(ctx.values, 'default-capability'),
          ...(name !== undefined ? { name } : {}),
        },
      });
      const thumbprint = await thumbprintOf(key.publicJwk);
      printAnswer(ctx, answer, (host) => hostLines(host, [['thumbprint', thumbprint]]));
    },
  },
  {
    words: ['hosts', 'enroll'],
    summary: "Bind this host's key with a person's enrollment token (the host becomes theirs)",
    details: 'Run on the host: it signs a host JWT with its private key, which proves it holds the key, and sends the key with the token. '
      + 'The token is the one the person got when they set up the host (docs/approving.md, "Enrolling a host"); it works once, within the hour.',
    args: [],
    options: {
      token: { type: 'string', valueName: 'TOKEN', required: true, description: 'the enrollment token (agent_enroll_…)' },
      'host-key': { type: 'string', valueName: 'FILE', required: true, description: "the host's private JWK file" },
      name: { type: 'string', valueName: 'NAME', description: "the host's name, instead of the one the person gave" },
    },
    admin: false,
    examples: ['agentgate hosts enroll --token agent_enroll_… --host-key host.private.jwk.json'],
    async run(ctx) {
      const hostKey = await readKeyFile(stringOption(ctx.values, 'host-key')!, ctx.cwd, '--host-key');
      warnIfExposed(ctx.io, hostKey);
      const signingKey = await signingKeyOf(hostKey, '--host-key');
      const discovery = await discover(ctx.http);
      const claims = hostKeyClaims({ hostThumbprint: await thumbprintOf(hostKey.publicJwk), issuer: discovery.issuer, hostPublicJwk: hostKey.publicJwk, ...freshTokenInputs() });
      const name = stringOption(ctx.values, 'name');
      const answer = await ctx.http.send('POST', ctx.http.url('/host/enroll'), {
        token: await signJwt(claims, 'host+jwt', signingKey, hostKey.alg),
        json: { token: stringOption(ctx.values, 'token')!, public_key: hostKey.publicJwk, ...(name !== undefined ? { name } : {}) },
      });
      printAnswer(ctx, answer, (host) => hostLines(host));
    },
  },
  {
    words: ['hosts', 'show'],
    summary: 'Show a host',
    args: ['ID'],
    options: {},
    admin: true,
    examples: ['agentgate hosts show hst_0123'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'GET', path(ctx.args.ID!)), (host) => hostLines(host));
    },
  },
  {
    words: ['hosts', 'revoke'],
    summary: 'Revoke a host and every agent on it (permanent)',
    args: ['ID'],
    options: {},
    admin: true,
    examples: ['agentgate hosts revoke hst_0123'],
    async run(ctx) {
      printAnswer(ctx, await adminCall(ctx, 'POST', `${path(ctx.args.ID!)}/revoke`), (body) =>
        keyValues([['host_id', body.host_id], ['status', body.status], ['agents_revoked', body.agents_revoked]]));
    },
  },
];
