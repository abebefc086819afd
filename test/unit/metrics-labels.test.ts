// Label values of request metrics and access lines come from closed sets, so no client can mint
// time series (a cardinality attack on the metrics backend) or push an id or a code into a label.
import { describe, expect, it } from 'vitest';
import {
  codeLabel, decisionEndpoint, decisionOutcome, methodLabel, routeLabel, RoutePatterns, UNMATCHED_ROUTE,
} from '../../src/metrics/labels.ts';

const patterns = new RoutePatterns(['/capability/execute', '/admin/agents/:agentId/approve', '/admin/hosts/:hostId', '/.well-known/agent-configuration', '/bad/*splat']);

describe('route labels', () => {
  it('a matched route is labelled with its pattern, never with the ids in its URL', () => {
    expect(routeLabel('/admin/agents/:agentId/approve', '/admin/agents/agt_123/approve?x=1', patterns)).toBe('/admin/agents/:agentId/approve');
  });

  it('a request refused before a route took it (bad JSON, no admin token) is labelled with the pattern its path matches', () => {
    expect(routeLabel(undefined, '/admin/agents/agt_secretish/approve', patterns)).toBe('/admin/agents/:agentId/approve');
    expect(routeLabel(undefined, '/capability/execute?user_code=ABCD-EFGH', patterns)).toBe('/capability/execute');
    expect(routeLabel(undefined, '/.well-known/agent-configuration', patterns)).toBe('/.well-known/agent-configuration');
  });

  it('probes of paths nobody declared all share one label, whatever they are', () => {
    for (const path of ['/wp-login.php', '/admin/agents/a/b/approve', '/admin/hosts/', '/bad/anything', `/${'x'.repeat(5000)}`]) {
      expect(routeLabel(undefined, path, patterns)).toBe(UNMATCHED_ROUTE);
    }
  });

  it('a route declared with several paths is labelled with the one requested, and nothing else', () => {
    expect(routeLabel(['/capability/list', '/capability/describe'], '/capability/describe?name=x', patterns)).toBe('/capability/describe');
    expect(routeLabel(['/capability/list'], '/elsewhere', patterns)).toBe(UNMATCHED_ROUTE);
  });

  it('a segment parameter matches one segment only, and dots in patterns are literal', () => {
    const p = new RoutePatterns(['/a/:id', '/v1.0/x']);
    expect(p.match('/a/1')).toBe('/a/:id');
    expect(p.match('/a/1/')).toBe('/a/:id');
    expect(p.match('/a/1/2')).toBe(UNMATCHED_ROUTE);
    expect(p.match('/v1x0/x')).toBe(UNMATCHED_ROUTE);
  });
});

describe('other labels', () => {
  it('unusual methods are one label', () => {
    expect(methodLabel('POST')).toBe('POST');
    expect(methodLabel('PROPFIND')).toBe('OTHER');
    expect(methodLabel('get')).toBe('OTHER');
  });

  it('decision endpoints are the agent-facing decisions, by method and route', () => {
    expect(decisionEndpoint('POST', '/capability/execute')).toBe('execute');
    expect(decisionEndpoint('POST', '/capability/batch-execute')).toBe('batch_execute');
    expect(decisionEndpoint('POST', '/agent/register')).toBe('register');
    expect(decisionEndpoint('GET', '/capability/execute')).toBeUndefined();
    expect(decisionEndpoint('GET', '/agent/status')).toBeUndefined();
  });

  it('outcomes follow the status class, and a decision without a refusal has code none', () => {
    expect([200, 202, 400, 403, 429, 500, 503].map(decisionOutcome)).toEqual(['allowed', 'allowed', 'refused', 'refused', 'refused', 'failed', 'failed']);
    expect(codeLabel(undefined)).toBe('none');
    expect(codeLabel('constraint_violated')).toBe('constraint_violated');
  });
});
