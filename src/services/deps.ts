// What the use cases need, passed explicitly by the composition root (src/app.ts).
import type { AgentAuthenticator } from '../auth/agent-auth.ts';
import type { HostAuthenticator } from '../auth/host-auth.ts';
import type { JwksKeys } from '../auth/jwks-keys.ts';
import type { AgentKeyCache } from '../auth/key-cache.ts';
import type { Clock } from '../common/clock.ts';
import type { Config } from '../config.ts';
import type { Catalog } from '../catalog/catalog.ts';
import type { CapabilityRunner } from '../execution/handlers.ts';
import type { Logger } from '../logger.ts';
import type { PasskeySettings } from '../people/passkeys.ts';
import type { PersonSessions } from '../people/sessions.ts';
import type { OperatorRegistry } from '../operators/registry.ts';
import type { PluginSandbox } from '../operators/sandbox.ts';
import type { ReloadOutcome } from '../policy/reloader.ts';
import type { PolicyEngine } from '../policy/types.ts';
import type { RateLimits } from '../ratelimit/limits.ts';
import type { Store } from '../store/store.ts';
import type { AuditLog } from '../audit/log.ts';
import type { CandidatePolicies } from '../policy/candidates.ts';
import type { DecisionLog } from './decision-log.ts';
import type { ShadowDisagreements } from './policy-rollout.ts';

/** The candidate policies and what this instance keeps of its shadow's disagreements. */
export interface PolicyRollout {
  candidates: CandidatePolicies;
  disagreements: ShadowDisagreements;
}
import type { UserCodes } from './approvals/user-codes.ts';
import type { ApprovalNotifier } from '../notify/approval-notifier.ts';

export interface ServiceDeps {
  config: Config;
  store: Store;
  clock: Clock;
  policy: PolicyEngine;
  catalog: Catalog;
  operators: OperatorRegistry;
  /** Derives, matches and indexes RFC 8628 user codes. */
  userCodes: UserCodes;
  /** Tells people that a CIBA approval waits for them; absent when no channel is configured (then CIBA is not offered). */
  notifier?: ApprovalNotifier | undefined;
  /** Where plugin operators run at execute: worker threads with a time budget. */
  pluginSandbox: PluginSandbox;
  hostAuth: HostAuthenticator;
  agentAuth: AgentAuthenticator;
  keys: AgentKeyCache;
  /** Keys delivered by JWKS URLs (registration reads an agent's from its agent_jwks_url). */
  jwks: JwksKeys;
  runCapability: CapabilityRunner;
  limits: RateLimits;
  /** Reloads the policy artefact (admin call), or loads the given bytes instead; absent when the engine cannot reload. */
  reloadPolicy?: (artefact?: Uint8Array) => Promise<ReloadOutcome>;
  /** Re-imports the operator plugins and swaps the registry's plugin set (admin call). */
  reloadOperators?: () => Promise<string[]>;
  logger: Logger;
  /** The audit trail's writer: services record what creates, changes or uses authority. */
  audit: AuditLog;
  /** Recorded policy decisions, for previews of a candidate policy (the policy above records into it). */
  decisions: DecisionLog;
  /** Candidate policies run off the request path, previews and the shadow (admin calls); absent where none run. */
  rollout?: PolicyRollout;
  /** The policy artefact file's bytes as they are on disk now (what a reload would load). */
  readPolicyArtefact?: () => Promise<Uint8Array>;
}

/** What the use cases of a signed-in person need besides: their sessions and the passkey settings. */
export interface PersonServiceDeps extends ServiceDeps {
  sessions: PersonSessions;
  /** WebAuthn settings for presence approvals; null when the issuer's host cannot be an RP id. */
  passkeys: PasskeySettings | null;
}

/**
 * Some of the use cases' dependencies, with the store narrowed to the roles (store.ts) the use case
 * reads and writes: a use case that names its roles says what it can touch.
 */
export type DepsWith<Name extends keyof ServiceDeps, Roles> = Pick<ServiceDeps, Exclude<Name, 'store'>> & { store: Roles };

/** Every dependency of the use cases, with the store narrowed to the roles a module's use cases touch. */
export type ServiceDepsOver<Roles> = Omit<ServiceDeps, 'store'> & { store: Roles };

/** The same for the use cases of a signed-in person. */
export type PersonServiceDepsOver<Roles> = Omit<PersonServiceDeps, 'store'> & { store: Roles };
