// The discovery document (protocol §2), read before acting as a host or an agent: it names the
// audiences the server expects (`issuer`, `default_location`) and the endpoints' paths. Requests
// still go to --url: discovery decides what the tokens say, the operator decides where to send them.
import { z } from 'zod';
import { ServerRefused } from './errors.ts';
import type { HttpClient } from './http.ts';

const discoverySchema = z.looseObject({
  issuer: z.string().min(1).max(2048),
  default_location: z.string().min(1).max(2048),
  endpoints: z.looseObject({
    register: z.string().min(1).max(2048).optional(),
    execute: z.string().min(1).max(2048).optional(),
    request_capability: z.string().min(1).max(2048).optional(),
  }).optional(),
});

export type Discovery = z.infer<typeof discoverySchema>;

export async function discover(http: HttpClient): Promise<Discovery> {
  const answer = await http.send('GET', http.url('/.well-known/agent-configuration'));
  const parsed = discoverySchema.safeParse(answer.body);
  if (!parsed.success) {
    throw new ServerRefused(answer.status, 'invalid_response', 'the discovery document lacks issuer or default_location; is --url an agentgate server?', '', null);
  }
  return parsed.data;
}

/**
 * Where to send a request for an endpoint discovery names: its path under --url (an absolute
 * endpoint contributes only its path), or `fallbackPath` when discovery does not name it.
 */
export function endpointUrl(http: HttpClient, endpoint: string | undefined, fallbackPath: string): URL {
  if (endpoint === undefined) return http.url(fallbackPath);
  if (endpoint.startsWith('/')) return http.url(endpoint);
  try {
    const absolute = new URL(endpoint);
    return http.url(`${absolute.pathname}${absolute.search}`);
  } catch {
    return http.url(fallbackPath);
  }
}
