// How a granted, validated call runs (DESIGN §7): built-in handlers for demos and benchmarks, and
// an HTTP upstream proxy. A handler returns the `data` of the 200 answer or throws.
import type { Capability } from '../catalog/catalog.ts';
import { NamedError } from '../common/thrown.ts';

interface ExecutionContext {
  agentId: string;
  hostId: string;
  userId: string | undefined;
  grantId: string;
  arguments: Record<string, unknown>;
}

/** A backend failure: logged with its detail, answered as 500 internal_error without it. */
export class CapabilityBackendError extends NamedError {}

interface HandlerOptions {
  maxResponseBytes: number;
}

export type CapabilityRunner = (capability: Capability, context: ExecutionContext) => Promise<unknown>;

export function createCapabilityRunner(options: HandlerOptions): CapabilityRunner {
  return async (capability, context) => {
    const handler = capability.handler;
    switch (handler.type) {
      case 'echo':
        return { capability: capability.name, arguments: context.arguments };
      case 'fail':
        throw new CapabilityBackendError(`capability ${capability.name} is configured to fail`);
      case 'http':
        return callUpstream(handler, context, options.maxResponseBytes);
    }
  };
}

async function callUpstream(
  handler: { url: string; method: string; timeoutMs: number },
  context: ExecutionContext,
  maxResponseBytes: number,
): Promise<unknown> {
  let response: Response;
  try {
    response = await fetch(handler.url, {
      method: handler.method,
      headers: {
        'content-type': 'application/json',
        accept: 'application/json',
        'x-agentgate-agent-id': context.agentId,
        'x-agentgate-host-id': context.hostId,
        'x-agentgate-grant-id': context.grantId,
        ...(context.userId ? { 'x-agentgate-user-id': context.userId } : {}),
      },
      body: JSON.stringify(context.arguments),
      redirect: 'error',
      signal: AbortSignal.timeout(handler.timeoutMs),
    });
  } catch (err) {
    throw new CapabilityBackendError(`upstream ${handler.url} unreachable or timed out`, { cause: err });
  }
  const text = await readBounded(response, maxResponseBytes);
  if (!response.ok) throw new CapabilityBackendError(`upstream ${handler.url} answered ${response.status}`);
  if ((response.headers.get('content-type') ?? '').includes('json')) {
    try {
      return text.length === 0 ? null : (JSON.parse(text) as unknown);
    } catch (err) {
      throw new CapabilityBackendError(`upstream ${handler.url} sent malformed JSON`, { cause: err });
    }
  }
  return text;
}

/** Reads at most `maxBytes` of a body; a larger one is a backend failure, never a memory spike. */
async function readBounded(response: Response, maxBytes: number): Promise<string> {
  if (!response.body) return '';
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of response.body) {
    total += chunk.byteLength;
    if (total > maxBytes) {
      await response.body.cancel().catch(() => {});
      throw new CapabilityBackendError(`upstream response exceeds ${maxBytes} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
