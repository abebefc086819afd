// After an agent's key or status changes (rotation, revocation, a host cascade), every instance
// must stop using its cached copy of the key: this one at once, the others through the store's
// pub/sub channel (DESIGN §2 step 2). One function, so no change forgets half of it.
import type { StoreBackend } from '../store/store.ts';
import type { DepsWith } from './deps.ts';

export async function forgetCachedKeyEverywhere(deps: DepsWith<'keys', Pick<StoreBackend, 'publishAgentInvalidation'>>, agentId: string): Promise<void> {
  deps.keys.invalidate(agentId);
  await deps.store.publishAgentInvalidation(agentId);
}
