// The shapes of the views of src/http/views.ts, in zod: the records every router answers with (an
// agent, its grants and approval, a host, an agent waiting for a person) and the primitives the
// other answers in responses.ts share. views.ts is typed with what these infer, so a view can neither
// send a member these do not describe nor leave out one they require.
import { z } from 'zod';
import { AGENT_STATUSES, HOST_STATUSES, MODES } from '../domain/types.ts';

export const isoTime = z.iso.datetime().describe('ISO 8601, UTC');
export const jsonObject = z.record(z.string(), z.unknown());
export const seconds = (what: string) => z.number().int().min(0).describe(`${what}, in seconds`);
export const agentStatus = z.enum(AGENT_STATUSES);
export const hostStatus = z.enum(HOST_STATUSES);
export const mode = z.enum(MODES);

export const deviceApprovalViewSchema = z.object({
  method: z.literal('device_authorization'),
  verification_uri: z.url().describe('where the person approves'),
  verification_uri_complete: z.url().describe('the same, with the user code filled in'),
  user_code: z.string(),
  expires_in: seconds('how long the code is good for'),
  interval: seconds('the least time between two polls of GET /agent/status'),
}).describe('Protocol §10: RFC 8628 device authorization');

const cibaApprovalViewSchema = z.object({
  method: z.literal('ciba'),
  binding_message: z.string().optional().describe('as the caller sent it: the person is shown it, to compare with what the agent shows'),
  expires_in: seconds('how long the person has to decide'),
  interval: seconds('the least time between two polls of GET /agent/status'),
}).describe('Protocol §10: CIBA; the person is told and decides in their inbox');

export const approvalViewSchema = z.discriminatedUnion('method', [deviceApprovalViewSchema, cibaApprovalViewSchema])
  .describe('Protocol §10: how a person approves');

const grantIdentity = { id: z.string(), capability: z.string() };
const activeGrantViewSchema = z.object({
  ...grantIdentity,
  status: z.literal('active'),
  constraints: jsonObject.optional(),
  granted_by: z.string().optional(),
  reason: z.string().optional(),
  expires_at: isoTime.optional(),
  description: z.string().optional().describe("the capability's, from the catalog"),
  input: jsonObject.optional().describe("the capability's input JSON Schema"),
  output: jsonObject.optional().describe("the capability's output JSON Schema"),
});
const pendingGrantViewSchema = z.object({ ...grantIdentity, status: z.literal('pending'), constraints: jsonObject.optional(), reason: z.string().optional() });
const closedGrantViewSchema = z.object({ ...grantIdentity, status: z.enum(['denied', 'revoked']), reason: z.string().optional(), denied_by: z.string().optional() });
export const grantViewSchema = z.discriminatedUnion('status', [activeGrantViewSchema, pendingGrantViewSchema, closedGrantViewSchema])
  .describe('Protocol §8.3: a grant; an active one carries its constraints and the capability\'s schemas');

export const agentViewSchema = z.object({
  agent_id: z.string(),
  host_id: z.string(),
  name: z.string(),
  status: agentStatus.describe('effective now: an elapsed session or lifetime shows as expired or revoked'),
  mode,
  user_id: z.string().optional(),
  agent_capability_grants: z.array(grantViewSchema),
  created_at: isoTime,
  activated_at: isoTime.optional(),
  last_used_at: isoTime.optional(),
  expires_at: isoTime.optional().describe('while active: when the agent expires unless used'),
  approval: approvalViewSchema.optional().describe('while pending: how a person approves it'),
}).describe('Protocol §4.5: the full agent view');

export const hostViewSchema = z.object({
  host_id: z.string(),
  name: z.string().optional(),
  status: hostStatus,
  user_id: z.string().optional().describe('the person the host is linked to'),
  default_capabilities: z.array(z.string()),
  created_at: isoTime,
  activated_at: isoTime.optional(),
});

/** A host a person set up with its key (POST /people/me/hosts), or bound by an enrollment token (POST /host/enroll). */
export const hostCreatedViewSchema = z.object({
  host_id: z.string(),
  status: z.literal('active'),
  name: z.string().optional(),
  default_capabilities: z.array(z.string()),
}).describe('A host made for a person: active, linked to them, with their default capabilities');

/** POST /people/me/hosts: the enrollment that waits for its host to prove its key and bind it. */
export const hostSetUpViewSchema = z.object({
  enrollment_id: z.string(),
  status: z.literal('pending_enrollment'),
  enrollment_token: z.string().describe('shown this once (only its hash is kept): the host sends it, with its public key and a host JWT signed by that key, to POST /host/enroll'),
  expires_in: seconds('how long the token binds a key'),
  name: z.string(),
  default_capabilities: z.array(z.string()),
  key_thumbprint: z.string().optional().describe('when a public_key was given: its RFC 7638 thumbprint, the only key the token binds'),
}).describe('An enrollment waiting for its host to prove its key and bind it');

export const waitingAgentViewSchema = z.object({
  agent_id: z.string(),
  host_id: z.string(),
  name: z.string(),
  mode,
  status: agentStatus.describe('as stored'),
  registration: z.boolean().describe('the registration itself waits, not only some grants'),
  approval_id: z.string().optional(),
  expires_at: isoTime.optional().describe("the approval's, open or lapsed"),
  user_code: z.string().optional().describe('while the approval is open'),
  verification_uri_complete: z.url().optional().describe('while the approval is open'),
  capabilities: z.array(z.object({ grant_id: z.string(), capability: z.string(), constraints: jsonObject.optional(), reason: z.string().optional() })),
}).describe('An agent waiting for a person (GET /admin/approvals)');

export type ApprovalView = z.infer<typeof approvalViewSchema>;
export type DeviceApprovalView = z.infer<typeof deviceApprovalViewSchema>;
export type ActiveGrantView = z.infer<typeof activeGrantViewSchema>;
export type PendingGrantView = z.infer<typeof pendingGrantViewSchema>;
export type ClosedGrantView = z.infer<typeof closedGrantViewSchema>;
export type GrantView = z.infer<typeof grantViewSchema>;
export type AgentView = z.infer<typeof agentViewSchema>;
export type HostView = z.infer<typeof hostViewSchema>;
export type WaitingAgentView = z.infer<typeof waitingAgentViewSchema>;
export type HostCreatedView = z.infer<typeof hostCreatedViewSchema>;
export type HostSetUpView = z.infer<typeof hostSetUpViewSchema>;
