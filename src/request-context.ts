// What one HTTP request's access line says about it beyond method, route and status: its id, who
// made it (the agent and host, once a signature proved it) and the error code of a refusal.
//
// Identity is established deep inside auth/, which knows nothing of HTTP, and flows back through
// services that return only what the protocol answers. Rather than thread a context argument
// through every service, the access middleware (src/http/access.ts) runs each request inside an
// AsyncLocalStorage scope holding this object, and auth/ notes the identity it verified into it.
// It is for logs and metrics only: nothing decides anything from it. Outside a request (tests
// calling services directly, the CLI) there is no scope and noting does nothing.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { ErrorCode } from './errors.ts';

export interface RequestContext {
  readonly requestId: string;
  /** The agent whose JWT signature verified (or that the request created). */
  agentId: string | undefined;
  /** The host whose JWT signature verified, or the host of the verified agent. */
  hostId: string | undefined;
  /** The code of the refusal the request was answered with, from the table in src/errors.ts. */
  errorCode: ErrorCode | undefined;
}

const current = new AsyncLocalStorage<RequestContext>();

export function newRequestContext(requestId: string): RequestContext {
  return { requestId, agentId: undefined, hostId: undefined, errorCode: undefined };
}

/** Runs `fn` (the rest of the request's handling) with `context` as the current request's. */
export function runInRequestContext<T>(context: RequestContext, fn: () => T): T {
  return current.run(context, fn);
}

/** The current request's context, if the caller runs inside one. */
export function currentRequestContext(): RequestContext | undefined {
  return current.getStore();
}

/** Records that the current request is an agent's (and its host's), once its signature verified. */
export function noteAgent(agentId: string, hostId: string | undefined): void {
  const context = current.getStore();
  if (!context) return;
  context.agentId = agentId;
  if (hostId !== undefined) context.hostId = hostId;
}

/** Records that the current request is a known host's, once its signature verified. */
export function noteHost(hostId: string): void {
  const context = current.getStore();
  if (context) context.hostId = hostId;
}
