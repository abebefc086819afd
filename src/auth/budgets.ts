// What a verified caller spends is the use cases' to decide (services/budgets.ts); authentication
// only calls these at the moment the spending is due, so it needs no rate limiter of its own.

export interface CallerBudgets {
  /** A known host, once its signature and jti verified and before its status is judged. */
  host(hostId: string, budget: 'host' | 'status'): Promise<void>;
  /** An agent whose token is used up (jti recorded), and its host. */
  agent(agentId: string, hostId: string): Promise<void>;
  /** A host (by id, or an unknown one by thumbprint) whose request may make us fetch a JWKS. */
  jwksFetch(callerKey: string): Promise<void>;
}
