// Read-decide-write on one agent with optimistic concurrency: the decision is a pure function of
// the snapshot, and the store applies it only if nobody changed the agent in between. Two racing
// transitions can therefore never both win; the loser re-reads and decides again.
//
// Contention (docs/stances.md): a loser waits a short, random time and tries again, so a handful
// of concurrent writers all succeed in turn. Only when the agent keeps changing under it for
// MAX_ATTEMPTS rounds does the request give up, with 409 `conflict`: the store is fine (a 503 would
// say otherwise) and a retry succeeds.
import type { AgentSnapshot } from '../domain/types.ts';
import { ApiError } from '../errors.ts';
import type { AgentChange, AgentRecords } from '../store/store.ts';

const MAX_ATTEMPTS = 8;
/** Back-off before retry n (1-based): up to 2^n ms, randomised so racing losers spread out. */
const backoffMs = (attempt: number) => Math.random() * 2 ** Math.min(attempt, 6);

/** `decide` returns the change to apply, or null when nothing must change. It may throw ApiError. */
export async function transitionAgent(
  store: AgentRecords,
  agentId: string,
  decide: (snapshot: AgentSnapshot) => AgentChange | null,
): Promise<AgentSnapshot> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const snapshot = await store.getAgent(agentId);
    if (!snapshot) throw new ApiError('agent_not_found', 'no agent has this id');
    const change = decide(snapshot);
    if (!change) return snapshot;
    const result = await store.casAgent(agentId, snapshot.agent.version, change);
    if (result.ok) return result.snapshot;
    if (result.reason === 'not_found') throw new ApiError('agent_not_found', 'no agent has this id');
    if (attempt < MAX_ATTEMPTS) await new Promise((resolve) => setTimeout(resolve, backoffMs(attempt)));
  }
  throw new ApiError('conflict', 'the agent was changed concurrently too many times; retry');
}
