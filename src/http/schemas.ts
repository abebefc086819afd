// Every request shape, in zod, once. Handlers parse with these; the OpenAPI document is generated
// from them (src/http/openapi.ts). Bounds come first: a request over them is refused before any
// JWT verification, Redis call or policy decision.
import { z } from 'zod';
import { batchCallId, firstDuplicateId, MAX_BATCH_CALLS, MAX_BATCH_ID_LENGTH } from '../domain/batch.ts';
import { bindingMessageProblem } from '../domain/approval-method.ts';
import { jsonText } from '../domain/consent-text.ts';
import { uncarriedJsonValue } from '../domain/json-values.ts';

export const MAX_ARGUMENTS = 256;
const id = z.string().min(1).max(128);
const capabilityName = z.string().min(1).max(128);

/** A JSON object (zod's record refuses arrays and null). */
const plainObject = z.record(z.string(), z.unknown());

/**
 * Refuses a member whose value JSON does not carry as sent (src/domain/json-values.ts: 1e400, a
 * lone surrogate), naming the member as `what` calls it.
 */
const carriedMembers = (what: string) => (value: Record<string, unknown>, ctx: z.RefinementCtx) => {
  for (const [name, member] of Object.entries(value)) {
    const problem = uncarriedJsonValue(name) ?? uncarriedJsonValue(member);
    if (problem) {
      ctx.addIssue({ code: 'custom', message: `${what} ${jsonText(name.slice(0, 64))} ${problem}` });
      return;
    }
  }
};

/** `arguments`: a JSON object with a bounded number of top-level fields, each carried as sent. */
const argumentsSchema = plainObject
  .refine((v) => Object.keys(v).length <= MAX_ARGUMENTS, `at most ${MAX_ARGUMENTS} arguments`)
  .superRefine(carriedMembers('argument'));

export const constraintsSchema = plainObject.superRefine(carriedMembers('the constraint on')).describe('{field: exact-value} or {field: {operator: operand}}');

const capabilityRequestSchema = z.union([
  capabilityName,
  z.object({ name: capabilityName, constraints: constraintsSchema.optional() }),
]);

/** How the caller would have its person asked (protocol §10); hints only, the server chooses (services/approvals/ciba.ts). */
const methodHints = {
  preferred_method: z.string().max(64).optional(),
  login_hint: z.string().max(256).optional(),
  binding_message: z.string().superRefine((message, ctx) => {
    const problem = bindingMessageProblem(message);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  }).optional().describe('shown to the person a CIBA approval goes to, as text: one line, at most 500 characters'),
};

const approvalHints = {
  reason: z.string().max(1000).optional(),
  ...methodHints,
};

export const registerBodySchema = z.object({
  name: z.string().min(1).max(200),
  host_name: z.string().max(200).optional(),
  capabilities: z.array(capabilityRequestSchema).max(100).optional(),
  mode: z.string().max(32).default('delegated'),
  force_approval: z.boolean().optional(),
  ...approvalHints,
});

export const requestCapabilityBodySchema = z.object({
  capabilities: z.array(capabilityRequestSchema).min(1).max(100),
  ...approvalHints,
});

/** Unknown members named in a refusal at most; the rest are counted. */
const MAX_NAMED_MEMBERS = 5;

/**
 * The refusal of a member a call's body does not know. Execute bodies are closed because a
 * misspelt member is silently ignored otherwise: `{capability, args}` would run the capability
 * with no arguments at all. Names are escaped as the consent text escapes them (look-alikes).
 */
const closedMembers = (what: string, known: readonly string[]) => ({
  error: (issue: { code?: string; keys?: readonly string[] }) => {
    if (issue.code !== 'unrecognized_keys' || !issue.keys) return undefined;
    const keys = issue.keys;
    const named = keys.slice(0, MAX_NAMED_MEMBERS).map((key) => jsonText(key.slice(0, 64))).join(', ');
    const more = keys.length > MAX_NAMED_MEMBERS ? ` and ${keys.length - MAX_NAMED_MEMBERS} more` : '';
    const hint = keys.includes('args') && known.includes('arguments') ? ' (the arguments go in `arguments`)' : '';
    return `unknown member${keys.length === 1 ? '' : 's'} ${named}${more}; ${what} takes only ${known.join(', ')}${hint}`;
  },
});

export const executeBodySchema = z.strictObject({
  capability: capabilityName,
  arguments: argumentsSchema.optional(),
}, closedMembers('execute', ['capability', 'arguments']));

const batchItemSchema = z.strictObject({
  id: z.string().min(1).max(MAX_BATCH_ID_LENGTH).optional().describe('echoed in the response; default: the item\'s index as a string'),
  capability: capabilityName,
  arguments: argumentsSchema.optional(),
}, closedMembers('a batch item', ['id', 'capability', 'arguments']));

/** Every item is checked here, so one malformed item refuses the whole batch before any verification. */
export const batchExecuteBodySchema = z.strictObject({
  requests: z.array(batchItemSchema).min(1).max(MAX_BATCH_CALLS),
}, closedMembers('batch execute', ['requests'])).superRefine((body, ctx) => {
  const index = firstDuplicateId(body.requests);
  if (index >= 0) {
    const id = batchCallId(body.requests[index]!.id, index);
    ctx.addIssue({ code: 'custom', path: ['requests', index, 'id'], message: `duplicate id ${JSON.stringify(id)} (an item without an id takes its index as its id)` });
  }
});

export const agentIdBodySchema = z.object({ agent_id: id });

/** `POST /agent/reactivate`: the agent, and how its person should be asked when the reactivation needs them. */
export const reactivateBodySchema = z.object({ agent_id: id, ...methodHints });

export const rotateAgentKeyBodySchema = z.object({ agent_id: id, public_key: plainObject });

export const rotateHostKeyBodySchema = z.object({ public_key: plainObject });

/**
 * `POST /host/enroll`: an enrollment token a person was given (services/enrollments.ts), and the
 * key it binds. A token is 56 characters; the bound refuses anything far longer before any work.
 */
export const hostEnrollBodySchema = z.object({
  token: z.string().min(1).max(256).describe('the enrollment_token of POST /people/me/hosts (agent_enroll_...)'),
  public_key: plainObject.describe("the host's public JWK"),
  name: z.string().min(1).max(200).regex(/\S/, 'must not be blank').optional().describe('replaces the name the person gave'),
});

export const revokeCapabilityBodySchema = z.object({
  agent_id: id.optional(),
  capabilities: z.array(capabilityName).min(1).max(100),
});

export const introspectBodySchema = z.object({ token: z.string().min(1).max(8192) });

export const statusQuerySchema = z.object({ agent_id: id });

export const listQuerySchema = z.object({
  query: z.string().max(200).optional(),
  cursor: z.string().max(64).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(50),
});

export const describeQuerySchema = z.object({ name: capabilityName });

/**
 * Who a host is linked to, or who decided an approval: always named by the caller. An admin acting
 * for nobody in particular says so (e.g. "admin:alice"); there is no silent default identity.
 */
const userId = id.describe('the person the admin acts for');

export const adminCreateHostBodySchema = z.object({
  public_key: plainObject,
  name: z.string().max(200).optional(),
  default_capabilities: z.array(capabilityName).max(100).default([]),
  user_id: userId,
});

/** The code the approver was shown; when given, only the approval it names can be decided. */
const userCode = z.string().min(1).max(32).optional();

export const adminApproveBodySchema = z.object({
  capabilities: z.array(capabilityName).max(100).optional(),
  user_id: userId,
  user_code: userCode,
});

export const adminDenyBodySchema = z.object({ user_id: userId, user_code: userCode });
