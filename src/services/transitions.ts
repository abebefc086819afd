// Read-decide-write on one agent with optimistic concurrency: the decision is a pure function of
// the snapshot, and the store applies it only if nobody changed the agent in between. Two racing
// transitions can therefore never both win; the loser re-reads and decides again.
import type { AgentSnapshot } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { AgentChange, Store } from '../store/store.ts';

const MAX_ATTEMPTS = 5;

/** `decide` returns the change to apply, or null when nothing must change. It may throw ApiError. */
export async function transitionAgent(
  store: Store,
  agentId: string,
  decide: (snapshot: AgentSnapshot) => AgentChange | null,
): Promise<AgentSnapshot> {
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const snapshot = await store.getAgent(agentId);
    if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
    const change = decide(snapshot);
    if (!change) return snapshot;
    const result = await store.casAgent(agentId, snapshot.agent.version, change);
    if (result.ok) return result.snapshot;
    if (result.reason === 'not_found') throw new ApiError('agent_not_found', 'no agent has this id');
  }
  throw new ApiError('service_unavailable', 'the agent is being changed concurrently; retry');
}
