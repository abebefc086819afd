// GET /capability/list and GET /capability/describe (protocol §4.1, §4.2) in three auth modes:
// anonymous (public capabilities), host JWT (all), agent JWT (all, with grant_status).
import { identifyCaller } from '../auth/caller.ts';
import { agentRefusal } from '../domain/lifecycle.ts';
import type { GrantRecord } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { Capability } from '../catalog/catalog.ts';
import type { ServiceDeps } from './deps.ts';

/** The capability views read no store record themselves: authentication reads what it needs. */
type ViewerDeps = Omit<ServiceDeps, 'store'>;

type Viewer =
  | { kind: 'anonymous' }
  | { kind: 'host' }
  | { kind: 'agent'; grants: GrantRecord[] };

/** Identifies the caller from an optional bearer JWT (auth/caller.ts tells hosts from agents). */
export async function resolveViewer(deps: ViewerDeps, token: string | null): Promise<Viewer> {
  if (!token) {
    if (deps.config.CAPABILITY_LIST_REQUIRES_AUTH) {
      throw new ApiError('authentication_required', 'this server requires a host or agent JWT to list capabilities', undefined, {
        'WWW-Authenticate': `AgentAuth discovery="${deps.config.issuer}/.well-known/agent-configuration"`,
      });
    }
    return { kind: 'anonymous' };
  }
  const caller = await identifyCaller(deps, token, {
    // A pending host (anyone can make one) sees no more than an anonymous caller would: DESIGN §9
    // allows it registration and status only.
    host: { allowUnknown: false, allowPending: false },
    agent: { audiences: [deps.config.issuer], consumeJti: true },
  });
  if (caller.kind === 'host') return { kind: 'host' };
  const { snapshot, capabilityClaim: claim } = caller.agent;
  const refusal = agentRefusal(snapshot.agent, snapshot.sessionExpiresAtMs, deps.clock.nowMs());
  if (refusal) throw refusal;
  // A token restricted by its capabilities claim reports grants only for those capabilities.
  return { kind: 'agent', grants: claim ? snapshot.grants.filter((g) => claim.includes(g.capability)) : snapshot.grants };
}

const visible = (viewer: Viewer, c: Capability) => viewer.kind !== 'anonymous' || c.public;

export function grantStatus(viewer: Viewer, name: string): 'granted' | 'not_granted' | undefined {
  if (viewer.kind !== 'agent') return undefined;
  return viewer.grants.some((g) => g.capability === name && g.status === 'active') ? 'granted' : 'not_granted';
}

interface ListQuery {
  query?: string | undefined;
  cursor?: string | undefined;
  limit: number;
}

/** Cursor = base64url of the offset into the filtered list (stable while the catalog is). */
export function listCapabilities(deps: Pick<ServiceDeps, 'catalog'>, viewer: Viewer, q: ListQuery) {
  const needle = q.query?.toLowerCase();
  const matching = deps.catalog
    .list()
    .filter((c) => visible(viewer, c))
    .filter((c) => !needle || c.name.toLowerCase().includes(needle) || c.description.toLowerCase().includes(needle));
  const offset = q.cursor === undefined ? 0 : decodeCursor(q.cursor);
  const page = matching.slice(offset, offset + q.limit);
  const next = offset + page.length;
  return { page, hasMore: next < matching.length, nextCursor: next < matching.length ? Buffer.from(String(next)).toString('base64url') : null };
}

function decodeCursor(cursor: string): number {
  const n = Number(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!Number.isSafeInteger(n) || n < 0) throw new ApiError('invalid_request', 'cursor is not one this server issued');
  return n;
}

export function describeCapability(deps: Pick<ServiceDeps, 'catalog'>, viewer: Viewer, name: string): Capability {
  const capability = deps.catalog.get(name);
  if (!capability || !visible(viewer, capability)) throw new ApiError('capability_not_found', 'no capability has this name');
  return capability;
}
