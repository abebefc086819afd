// The JWTs the tool signs as a host (registration, protocol §5.2) and as an agent (execute,
// protocol §5.3), with exactly the claims src/auth/host-auth.ts and src/auth/agent-auth.ts check.
// The claim builders are pure (time and jti are passed in), so they are tested without a clock.
import { randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import type { PublicJwk, SigningAlgorithm } from './keys.ts';

/** The server's default cap on exp - iat (JWT_MAX_LIFETIME_SECONDS); a server set below 60 s refuses these tokens. */
const TOKEN_LIFETIME_SECONDS = 60;

interface HostRegistrationClaimsInput {
  hostThumbprint: string;
  /** The issuer from discovery: every host endpoint requires it as `aud`. */
  issuer: string;
  hostPublicJwk: PublicJwk;
  agentPublicJwk: PublicJwk;
  nowSeconds: number;
  jti: string;
}

/** A host+jwt that proves its key by `host_public_key`, as an unknown host does (POST /host/enroll). */
export function hostKeyClaims(input: Omit<HostRegistrationClaimsInput, 'agentPublicJwk'>): Record<string, unknown> {
  return {
    iss: input.hostThumbprint,
    aud: input.issuer,
    iat: input.nowSeconds,
    exp: input.nowSeconds + TOKEN_LIFETIME_SECONDS,
    jti: input.jti,
    host_public_key: input.hostPublicJwk,
  };
}

/** A host+jwt for POST /agent/register: an unknown host proves its key by `host_public_key`. */
export function hostRegistrationClaims(input: HostRegistrationClaimsInput): Record<string, unknown> {
  return { ...hostKeyClaims(input), agent_public_key: input.agentPublicJwk };
}

interface AgentClaimsInput {
  agentId: string;
  /** For execute: discovery's `default_location`. */
  audience: string;
  /** When given, `iss`: the server checks it names the agent's host. */
  hostThumbprint?: string | undefined;
  nowSeconds: number;
  jti: string;
}

export function agentClaims(input: AgentClaimsInput): Record<string, unknown> {
  return {
    ...(input.hostThumbprint !== undefined ? { iss: input.hostThumbprint } : {}),
    sub: input.agentId,
    aud: input.audience,
    iat: input.nowSeconds,
    exp: input.nowSeconds + TOKEN_LIFETIME_SECONDS,
    jti: input.jti,
  };
}

/** What jose signs with: here, always an asymmetric private key read from a JWK file. */
export type SigningKey = Parameters<SignJWT['sign']>[0];

/** The current time and a fresh jti, the only impure inputs of a token. */
export const freshTokenInputs = () => ({ nowSeconds: Math.floor(Date.now() / 1000), jti: randomUUID() });

export function signJwt(claims: Record<string, unknown>, typ: 'host+jwt' | 'agent+jwt', key: SigningKey, alg: SigningAlgorithm): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg, typ }).sign(key);
}
