// Who is calling, for the endpoints that accept either kind of JWT (capability list and describe,
// revoke-capability). Telling a host token from an agent token is an authentication rule, so it
// lives here and nowhere else: the header's `typ` says which verification applies, and that
// verification then decides whether the token is genuine (a wrong claim of `typ` simply fails).
import type { AgentAuthenticator, VerifiedAgent } from './agent-auth.ts';
import type { HostAuthenticator, HostAuthOptions, VerifiedHost } from './host-auth.ts';
import { decodeJwt } from './jwt.ts';

type Caller =
  | { kind: 'host'; host: VerifiedHost }
  | { kind: 'agent'; agent: VerifiedAgent };

interface CallerOptions {
  host: HostAuthOptions;
  agent: { audiences: readonly string[]; consumeJti: boolean };
}

/** Whether the token says it is a host JWT; anything else is verified as an agent JWT. */
function claimsToBeHost(token: string): boolean {
  try {
    decodeJwt(token, 'host+jwt');
    return true;
  } catch {
    return false;
  }
}

/** Verifies `token` as the kind of JWT it says it is, with that kind's options. */
export async function identifyCaller(
  auth: { hostAuth: HostAuthenticator; agentAuth: AgentAuthenticator }, token: string, options: CallerOptions,
): Promise<Caller> {
  if (claimsToBeHost(token)) return { kind: 'host', host: await auth.hostAuth.verify(token, options.host) };
  return { kind: 'agent', agent: await auth.agentAuth.verify(token, options.agent) };
}
