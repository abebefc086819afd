// The account page's HTML (DESIGN §8): what a signed-in person approved — their agents with each
// grant, their hosts, their passkeys — and the forms that take it back. The same rules as the
// approval page (http/device/pages/device-pages.ts): templates that escape (html.ts), no inline script,
// every form with the session's CSRF token, every name or reason an agent or host chose shown as
// its claim (cleaned, length-limited, with look-alike warnings: `claim`), and constraints in words
// and in full, as execute enforces them (`constraintsInWords`, domain/consent-text.ts).
import type { PluginLookup } from '../../../domain/consent-text.ts';
import { effectiveStatus } from '../../../domain/lifecycle.ts';
import type { AgentSnapshot, AgentStatus, GrantRecord, HostRecord, HostStatus } from '../../../domain/types.ts';
import type { Passkey } from '../../../people/passkeys.ts';
import { ACCOUNT_PATH, claim, constraintsInWords, dataBlock, LIMITS } from './device-pages.ts';
import { displayText, html, type SafeHtml } from './html.ts';

/** What the account page shows, read for one person. */
interface AccountView {
  personId: string;
  csrfToken: string;
  nowMs: number;
  /** One page of the person's agents (services/person-account.ts myAgents), each with its host. */
  agents: ReadonlyArray<{ host: HostRecord; snapshot: AgentSnapshot }>;
  /** The link to the next page of agents; null on the last. */
  nextAgentsUrl: string | null;
  /** True when this page is not the first (it started at a cursor). */
  laterPage: boolean;
  hosts: readonly HostRecord[];
  /** The person's passkeys; null when passkeys cannot work on this server (an IP issuer). */
  passkeys: readonly Passkey[] | null;
  /** Names an agent or host might imitate: the server's and the person's hosts'. */
  known: readonly string[];
  plugins: PluginLookup;
  /** A capability's description from the catalog, when it is still offered. */
  describe: (capability: string) => string | undefined;
  /** What the form the person just sent did, in words (one of NOTICES). */
  notice?: string | undefined;
  /** The capabilities a host may get as defaults (offered, none needing presence), for the set-up form's hint. */
  defaultable: readonly string[];
}

/**
 * What a form on this page did, said back after its redirect. The query names one of these keys;
 * anything else shows nothing, so no text from a URL reaches the page.
 */
export const NOTICES = {
  agent_revoked: 'The agent is revoked: it can do nothing more, and its host cannot bring it back.',
  grant_revoked: 'The capability is revoked: the agent cannot use it from now on.',
  host_unlinked: 'The host is unlinked: its agents are revoked, and any agent it starts from now on waits for a new approval.',
  host_revoked: 'The host is revoked, and every agent on it with it. This is final.',
  passkey_removed: 'The passkey is removed.',
} as const;
export type Notice = keyof typeof NOTICES;

/** An instant as a person reads it, in UTC (the page runs no script that could localise it). */
export function when(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

const AGENT_STATUS_WORDS: Record<AgentStatus, string> = {
  active: 'active',
  pending: 'waiting for approval',
  expired: 'expired (its session or lifetime ran out; its host may reactivate it)',
  revoked: 'revoked',
  rejected: 'denied',
  claimed: 'stopped (it acted on its own until its host was linked to you)',
};

const HOST_STATUS_WORDS: Record<HostStatus, string> = {
  active: 'active',
  pending: 'waiting for a person to vouch for it',
  revoked: 'revoked',
  rejected: 'rejected',
};

const GRANT_STATUS_WORDS: Record<GrantRecord['status'], string> = {
  active: 'allowed',
  pending: 'waiting for approval',
  revoked: 'revoked',
  denied: 'denied',
};

/**
 * Who granted a capability, from the grant record (`grantedBy`): agentgate's policy (a default
 * capability of the host), the person, or someone else. An administrator who approves for a person
 * is recorded in the person's name; the audit trail says which door a decision came through.
 */
function grantedBy(grant: GrantRecord, personId: string): string | null {
  if (grant.grantedBy === undefined) return null;
  if (grant.grantedBy === 'policy') return "automatically, by agentgate's policy (a default capability of its host)";
  if (grant.grantedBy === personId) return 'in your name (by you, or by an administrator for you)';
  return 'by someone else';
}

const statusClass = (status: string) => `status status-${status}`;

/** A form posting one action of this page, with the session's CSRF token and the ids it acts on. */
function actionForm(action: string, csrfToken: string, fields: Record<string, string>, label: string, note: string): SafeHtml {
  return html`<form method="post" action="${action}" class="action">
<input type="hidden" name="csrf" value="${csrfToken}">
${Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}
<button type="submit" class="secondary small">${label}</button> <span class="hint">${note}</span>
</form>`;
}

function grantItem(view: AccountView, agentId: string, grant: GrantRecord, canChange: boolean): SafeHtml {
  const description = view.describe(grant.capability);
  const by = grantedBy(grant, view.personId);
  const hasLimits = grant.constraints !== undefined && Object.keys(grant.constraints).length > 0;
  const live = grant.status === 'active' || grant.status === 'pending';
  return html`<li class="grant">
<code>${grant.capability}</code>: ${description ? displayText(description, LIMITS.description) : '(this capability is no longer offered)'}
<br><span class="${statusClass(grant.status)}">${GRANT_STATUS_WORDS[grant.status]}</span>${grant.status === 'active' ? '' : html`, ${when(grant.updatedAtMs)}`}${grant.status === 'denied' && grant.deniedBy === view.personId ? ' by you' : ''}
${hasLimits ? html`<p class="limits">Only within these limits:</p>${constraintsInWords(grant.constraints, view.plugins)}` : html`<p class="limits">With no limits on its arguments.</p>`}
${by ? html`<p class="limits">Granted ${by}${grant.status === 'active' ? html`, ${when(grant.updatedAtMs)}` : ''}.</p>` : ''}
${grant.expiresAtMs !== undefined && grant.status === 'active' ? html`<p class="limits">Until ${when(grant.expiresAtMs)}.</p>` : ''}
${live && canChange ? actionForm(`${ACCOUNT_PATH}/grants/revoke`, view.csrfToken, { agent_id: agentId, grant_id: grant.id }, `Revoke ${grant.capability}`, 'The agent keeps its other capabilities.') : ''}
</li>`;
}

/** What still allows (or waits) first, then what ended; by capability within each. */
const byLiveThenName = (a: GrantRecord, b: GrantRecord) => {
  const ended = (g: GrantRecord) => (g.status === 'active' || g.status === 'pending' ? 0 : 1);
  return ended(a) - ended(b) || (a.capability < b.capability ? -1 : a.capability > b.capability ? 1 : 0);
};

/** How the agent came to act: when it was connected and what granted its capabilities. */
function approvedHow(view: AccountView, snapshot: AgentSnapshot): SafeHtml | string {
  const { agent, grants } = snapshot;
  if (agent.activatedAtMs === undefined) return agent.status === 'pending' ? 'not yet' : 'never';
  const hows = [...new Set(grants.map((g) => grantedBy(g, view.personId)).filter((h): h is string => h !== null))];
  return html`${when(agent.activatedAtMs)}; ${hows.length === 0 ? 'connected with no capabilities' : html`its capabilities granted ${hows.join(', and ')}`}`;
}

function agentItem(view: AccountView, host: HostRecord, snapshot: AgentSnapshot): SafeHtml {
  const { agent, grants } = snapshot;
  const status = effectiveStatus(agent, snapshot.sessionExpiresAtMs, view.nowMs).status;
  const canChange = status !== 'revoked' && status !== 'rejected' && status !== 'claimed';
  const hostName = host.name ? claim(host.name, LIMITS.hostName, view.known) : html`a host that gave no name (id ${host.id})`;
  return html`<section class="item agent">
<h3>An agent that calls itself ${claim(agent.name, LIMITS.name, view.known)}</h3>
<dl class="facts">
<dt>Running on a host that calls itself</dt><dd>${hostName}</dd>
<dt>Acts</dt><dd>${agent.mode === 'delegated' ? 'for you' : 'on its own'}</dd>
<dt>Status</dt><dd><span class="${statusClass(status)}">${AGENT_STATUS_WORDS[status]}</span></dd>
<dt>Approved</dt><dd>${approvedHow(view, snapshot)}</dd>
${agent.lastUsedAtMs !== undefined ? html`<dt>Last used</dt><dd>${when(agent.lastUsedAtMs)}</dd>` : ''}
${agent.reason ? html`<dt>Says why</dt><dd class="quoted">${claim(agent.reason, LIMITS.reason, view.known)}</dd>` : ''}
</dl>
${grants.length === 0 ? html`<p>It holds no capabilities.</p>` : html`<p>Capabilities:</p><ul class="grants">${[...grants].sort(byLiveThenName).map((g) => grantItem(view, agent.id, g, canChange))}</ul>`}
${canChange ? actionForm(`${ACCOUNT_PATH}/agents/revoke`, view.csrfToken, { agent_id: agent.id }, 'Revoke this agent', 'Final: it loses every capability, and its host cannot bring it back.') : ''}
<p class="hint">Agent id <code>${agent.id}</code></p>
</section>`;
}

function hostItem(view: AccountView, host: HostRecord): SafeHtml {
  const live = host.status === 'active' || host.status === 'pending';
  return html`<section class="item host">
<h3>${host.name ? html`A host that calls itself ${claim(host.name, LIMITS.hostName, view.known)}` : html`A host that gave no name`}</h3>
<dl class="facts">
<dt>Status</dt><dd><span class="${statusClass(host.status)}">${HOST_STATUS_WORDS[host.status]}</span></dd>
<dt>Registered</dt><dd>${when(host.createdAtMs)}</dd>
<dt>Agents it starts for you get without asking</dt><dd>${host.defaultCapabilities.length === 0 ? 'nothing' : host.defaultCapabilities.map((c, i) => html`${i > 0 ? ', ' : ''}<code>${c}</code>`)}</dd>
</dl>
${live ? html`${actionForm(`${ACCOUNT_PATH}/hosts/unlink`, view.csrfToken, { host_id: host.id }, 'Unlink', 'You stop vouching for it: every agent on it is revoked, and each agent it starts later waits for a new approval. Needs a recent sign-in.')}
${actionForm(`${ACCOUNT_PATH}/hosts/revoke`, view.csrfToken, { host_id: host.id }, 'Revoke', 'Final: the host and every agent on it stop for good (for a lost or stolen machine).')}` : ''}
<p class="hint">Host id <code>${host.id}</code></p>
</section>`;
}

/** Most capability names the set-up form lists as possible defaults; the rest are named by count. */
const DEFAULTABLE_LISTED = 50;

/**
 * The form that sets up a host for the person (services/enrollments.ts): a name, the default
 * capabilities, and the host's public key if they have it; without one they get an enrollment token.
 */
function hostSetupSection(view: AccountView): SafeHtml {
  const listed = view.defaultable.slice(0, DEFAULTABLE_LISTED);
  const more = view.defaultable.length - listed.length;
  return html`<h2>Set up a host</h2>
<p class="hint">You get an enrollment token for the machine that will be the host; once it binds its key with it, the host is linked to you and the agents it starts for you get its default capabilities without asking, as if you had approved them. Needs a recent sign-in.</p>
<form method="post" action="${ACCOUNT_PATH}/hosts/new" class="setup">
<input type="hidden" name="csrf" value="${view.csrfToken}">
<p><label for="host-name">Name</label><br><input type="text" id="host-name" name="name" maxlength="200" required></p>
<p><label for="host-defaults">Default capabilities</label> <span class="hint">(names, separated by spaces or commas; none is fine)</span><br><input type="text" id="host-defaults" name="default_capabilities" maxlength="13000"></p>
<p class="hint">${listed.length === 0 ? 'No capability can be a default here.' : html`Possible: ${listed.map((c, i) => html`${i > 0 ? ', ' : ''}<code>${c}</code>`)}${more > 0 ? ` and ${more} more` : ''}. Capabilities that need your passkey for every approval never can.`}</p>
<p><label for="host-key">Its public key (JWK), if you have it</label><br><textarea id="host-key" name="public_key" rows="4" cols="60" maxlength="16000"></textarea></p>
<p class="hint">The token is shown once, and works within an hour. With a key, it binds that key only.</p>
<button type="submit" class="secondary">Set up the host</button>
</form>`;
}

/**
 * The answer to the set-up form: the enrollment token, shown this once (only its hash is kept), and
 * how the host uses it. Every value goes through the escaping template.
 */
export function enrollmentTokenPage(enrollment: { name: string; defaultCapabilities: readonly string[]; expiresAtMs: number; keyThumbprint?: string | undefined }, token: string, issuer: string): SafeHtml {
  return html`<h1>Your enrollment token</h1>
<p>For the host <strong>${displayText(enrollment.name, LIMITS.hostName)}</strong>, with ${enrollment.defaultCapabilities.length === 0 ? 'no default capabilities' : html`the default capabilities ${enrollment.defaultCapabilities.map((c, i) => html`${i > 0 ? ', ' : ''}<code>${c}</code>`)}`}.</p>
${enrollment.keyThumbprint === undefined ? '' : html`<p>It binds only the key you gave (thumbprint <code>${enrollment.keyThumbprint}</code>).</p>`}
<p class="warning">Copy it now: it is shown only this once. Anyone who has it can register a host in your name until ${when(enrollment.expiresAtMs)}, so give it only to the machine that will be the host.</p>
<p><code class="token" id="enrollment-token">${token}</code></p>
<p>On the host, bind its key with it: the host proves it holds the key by signing the request. With agentgate's command-line tool:</p>
<pre><code>npx agentgate hosts enroll --url ${issuer} --token ${token} --host-key host.private.jwk.json</code></pre>
<p>Or send <code>{"token", "public_key"}</code> to <code>POST ${issuer}/host/enroll</code> with a host JWT signed by that key (<code>Authorization: Bearer</code>), as any host signs its calls.</p>
<p>The host is then linked to you and appears under Hosts on <a href="${ACCOUNT_PATH}">your agents page</a>. The token works once, within the hour.</p>`;
}

/** A passkey by a short, stable part of its id, which is all that tells two of them apart. */
const passkeyLabel = (passkey: Passkey) => (passkey.id.length > 12 ? `${passkey.id.slice(0, 12)}…` : passkey.id);

function passkeysSection(view: AccountView): SafeHtml {
  if (view.passkeys === null) {
    return html`<p>Passkeys cannot work on this server (its address is an IP address); an administrator decides what needs one.</p>`;
  }
  return html`${view.passkeys.length === 0
    ? html`<p>You have no passkey. Approving capabilities that change things needs one.</p>`
    : html`<ul class="passkeys">${view.passkeys.map((p) => html`<li>Passkey <code>${passkeyLabel(p)}</code>: added ${when(p.createdAtMs)}, last used ${p.lastUsedAtMs === undefined ? 'never' : when(p.lastUsedAtMs)}.
<a href="${ACCOUNT_PATH}/passkeys/remove?passkey_id=${encodeURIComponent(p.id)}">Remove…</a></li>`)}</ul>`}
<p><a href="/passkeys/new?return_to=${encodeURIComponent(ACCOUNT_PATH)}">Add a passkey</a></p>`;
}

export function accountPage(view: AccountView): SafeHtml {
  return html`<h1>Your agents</h1>
${view.notice ? html`<p class="notice" role="status">${view.notice}</p>` : ''}
<p>These agents act with what you approved, and what they do counts as done by you. Take back anything you no longer want: revoking works at once.</p>
<p class="hint">Names and reasons are what the agents and hosts say about themselves; agentgate does not vouch for them.</p>
<h2>Agents</h2>
${view.laterPage ? html`<p><a href="${ACCOUNT_PATH}">Back to the first page</a></p>` : ''}
${view.agents.length === 0 ? html`<p>${view.laterPage ? 'No more agents.' : 'No agent acts for you yet.'}</p>` : view.agents.map(({ host, snapshot }) => agentItem(view, host, snapshot))}
${view.nextAgentsUrl ? html`<p><a href="${view.nextAgentsUrl}" rel="next">More agents</a></p>` : ''}
<h2>Hosts</h2>
<p class="hint">The machines or services your agents run on. A host you approved an agent on is linked to you: the agents it starts for you later may get its default capabilities without asking.</p>
${view.hosts.length === 0 ? html`<p>No host is linked to you.</p>` : view.hosts.map((h) => hostItem(view, h))}
${hostSetupSection(view)}
<h2>Passkeys</h2>
${passkeysSection(view)}`;
}

/**
 * The page that removes one passkey: the browser proves one of the person's passkeys (this one or
 * another) for the challenge in the data block, and the form posts the answer. The session alone
 * never removes one (people/passkeys.ts removePasskey says why).
 */
export function removePasskeyPage(passkey: Passkey, remaining: number, options: unknown, csrfToken: string): SafeHtml {
  return html`<h1>Remove a passkey</h1>
<p>Passkey <code>${passkeyLabel(passkey)}</code>, added ${when(passkey.createdAtMs)}, last used ${passkey.lastUsedAtMs === undefined ? 'never' : when(passkey.lastUsedAtMs)}.</p>
<p>To remove it, confirm with one of your passkeys (this one or another): your device asks you now. Being signed in is not enough, so an agent controlling your browser cannot remove your passkeys.</p>
${remaining === 0 ? html`<p class="warning">It is your last passkey: approving capabilities that change things will need a new one, and adding your first needs a fresh sign-in at your identity provider.</p>` : ''}
<p id="passkey-error" class="error" role="alert" hidden></p>
${dataBlock('passkey-removal-options', options)}
<form method="post" action="${ACCOUNT_PATH}/passkeys/remove">
<input type="hidden" name="csrf" value="${csrfToken}">
<input type="hidden" name="passkey_id" value="${passkey.id}">
<input type="hidden" name="assertion" id="passkey-assertion" value="">
<div class="actions">
<button type="submit" id="remove-passkey" class="secondary">Remove this passkey</button>
<a class="button" href="${ACCOUNT_PATH}">Keep it</a>
</div>
</form>
<script src="/static/simplewebauthn-browser.js" defer></script>
<script src="/static/passkeys.js" defer></script>`;
}
