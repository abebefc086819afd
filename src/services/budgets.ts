// Rate budgets are spent by this layer only: neither the transport nor authentication holds a rate
// limiter. Authentication says WHEN a verified caller spends (after its signature and its jti
// proved it, before its status is judged, so a revoked host's refused calls still cost it), through
// the CallerBudgets it is given; this module says WHAT is spent. A request that carries no JWT has
// no caller to charge, so the handlers of those endpoints (discovery, an anonymous capability list
// or describe, introspection) charge its address here, first thing. Execute, batch execute,
// registration and the approval page spend their own budgets where they decide (services/execute.ts,
// services/registration.ts, services/approvals/by-person.ts).
import type { CallerBudgets } from '../auth/budgets.ts';
import type { RateLimits } from '../ratelimit/limits.ts';

/** What a verified host or agent spends: a host its own budget (status polls their own, higher one); an agent its and its host's. */
export function callerBudgets(limits: RateLimits): CallerBudgets {
  return {
    host: (hostId, budget) => limits.consume(budget, hostId),
    // Both budgets, as execute spends them: a host's agents share its budget for everything they
    // do, so a host of many agents cannot multiply what one agent may cost (in requests or in
    // audit events).
    agent: async (agentId, hostId) => {
      await Promise.all([limits.consume('agent', agentId), limits.consume('host', hostId)]);
    },
    jwksFetch: (callerKey) => limits.consume('jwksFetch', callerKey),
  };
}

/**
 * A call that carries no JWT (discovery, an anonymous capability list or describe, introspection
 * before its bearer token is checked) spends its address's budget (protocol §11.5).
 */
export function spendAddressBudget(deps: { limits: RateLimits }, clientIp: string | undefined): Promise<void> {
  return deps.limits.consume('ip', clientIp ?? 'unknown');
}
