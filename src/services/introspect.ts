// POST /agent/introspect (protocol §4.12): RFC 7662-style validation of an agent JWT for resource
// servers. Any failure is {active:false}; the token's jti is not consumed (DESIGN §4).
import { agentRefusal } from '../domain/lifecycle.ts';
import type { AgentSnapshot } from '../domain/types.ts';
import { isApiError } from '../errors.ts';
import type { ServiceDeps } from './deps.ts';

/** Introspection read no store record themselves: authentication reads what it needs. */
type IntrospectionDeps = Omit<ServiceDeps, 'store'>;

type IntrospectionResult =
  | { active: false }
  | { active: true; snapshot: AgentSnapshot; capabilityClaim: string[] | null };

export async function introspectToken(deps: IntrospectionDeps, token: string): Promise<IntrospectionResult> {
  try {
    const verified = await deps.agentAuth.verify(token, { audiences: [deps.config.issuer, deps.config.executeUrl], consumeJti: false });
    const { agent, sessionExpiresAtMs } = verified.snapshot;
    if (agentRefusal(agent, sessionExpiresAtMs, deps.clock.nowMs())) return { active: false };
    return { active: true, snapshot: verified.snapshot, capabilityClaim: verified.capabilityClaim };
  } catch (err) {
    if (isApiError(err)) return { active: false };
    throw err;
  }
}
