// The approval page's HTML (protocol §10; DESIGN §8). Server-rendered, no inline script, one
// stylesheet; every form carries a CSRF token; every string an agent or host chose is shown as its
// claim, cleaned (displayText), escaped (html), never a link, with a warning when it mixes alphabets
// or imitates a known name. Constraints are shown in words and in full, exactly as execute enforces
// them, with any name outside printable ASCII marked (domain/consent-text.ts). Plain words: a
// person should know what they are about to allow, and that they should only go on if they started it.
import { MAX_BINDING_MESSAGE_CHARS } from '../../../domain/approval-method.ts';
import { claimWarnings, constraintLines, jsonText, outsidePrintableAscii, type PluginLookup } from '../../../domain/consent-text.ts';
import type { Constraints } from '../../../domain/types.ts';
import type { ApprovalForPerson, RequestedGrant } from '../../../services/approvals/view.ts';
import { displayText, html, trusted, type SafeHtml } from './html.ts';

/** Display lengths of what an agent or host chose (they are stored bounded too: names 200, reasons 1000). */
export const LIMITS = { name: 200, hostName: 200, reason: 1000, description: 500 } as const;

export function layout(title: string, body: SafeHtml, signedInAs?: { name: string; csrfToken: string }): SafeHtml {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · agentgate</title>
<link rel="stylesheet" href="/static/agentgate.css">
</head>
<body>
<header><strong>agentgate</strong>${signedInAs ? html` <span class="who">signed in as ${displayText(signedInAs.name, 80)}</span>
<a href="/inbox">Your requests</a>
<a href="/account">Your agents</a>
<form method="post" action="/signout" class="inline"><input type="hidden" name="csrf" value="${signedInAs.csrfToken}"><button type="submit" class="link">Sign out</button></form>` : ''}</header>
<main>
${body}
</main>
</body>
</html>
`;
}

export function codePage(error?: string, prefill?: string): SafeHtml {
  return html`<h1>Connect an agent</h1>
<p>An agent asked for permission to act for you. Enter the code it shows to see exactly what it asks for. <strong>Only go on if you started this yourself.</strong></p>
${error ? html`<p class="error" role="alert">${error}</p>` : ''}
<form method="get" action="/device">
<label for="user_code">Code</label>
<input id="user_code" name="user_code" autocomplete="off" autocapitalize="characters" spellcheck="false" maxlength="16" placeholder="XXXX-XXXX" value="${prefill ?? ''}" required>
<button type="submit">Continue</button>
</form>`;
}

/** How the approval page handles capabilities that need presence. */
export type PresenceOnPage =
  | { kind: 'not_needed' }
  /** The person has a passkey: the options the browser proves presence with. */
  | { kind: 'ready'; options: unknown }
  /** No passkey yet: it can be added first. */
  | { kind: 'no_passkey'; addUrl: string }
  /** Passkeys cannot work on this server (its issuer is an IP address). */
  | { kind: 'unavailable' };

/**
 * A JSON data block (not executed, so the CSP allows it): `<` is escaped as \u003c so the data can
 * never close the element, and the id is one of our constants.
 */
export function dataBlock(id: 'presence-options' | 'passkey-registration-options' | 'passkey-proof-options' | 'passkey-removal-options', value: unknown): SafeHtml {
  const json = JSON.stringify(value).replace(/</g, '\\u003c');
  return trusted(`<script type="application/json" id="${id}">${json}</script>`);
}

/** What the approval page needs besides the approval itself. */
interface ApprovalPageContext {
  csrfToken: string;
  /**
   * The code the person typed: the form carries it, so a refusal's page can link back here. Absent
   * for an item of the person's inbox (CIBA), whose form goes to /inbox/decision.
   */
  userCode?: string | undefined;
  nowMs: number;
  presence: PresenceOnPage;
  /** Names an agent or host might imitate (the server's, the person's other hosts'). */
  known: readonly string[];
  /** Plugin operators' descriptions, for constraints in words. */
  plugins: PluginLookup;
}

/**
 * Something an agent or host chose to call itself, shown as its claim: length-limited, and with a
 * warning under it when it mixes alphabets, imitates a known name or hides characters.
 */
export function claim(text: string | undefined, max: number, known: readonly string[]): SafeHtml {
  const shown = displayText(text, max);
  const warnings = text ? claimWarnings(text, known) : [];
  return html`${shown}${warnings.map((w) => html`<br><span class="warning-inline">Careful: it ${w}.</span>`)}`;
}

/** A name outside printable ASCII, marked with the code points a person could not tell apart. */
function markedName(name: string): SafeHtml {
  const unusual = outsidePrintableAscii(name);
  return unusual.length === 0
    ? html`<code>${name}</code>`
    : html`<code class="unusual">${jsonText(name)}</code> <span class="warning-inline">(not plain letters: ${unusual.join(' ')})</span>`;
}

/** A grant's constraints in words and in full: one line per argument, every condition on it. */
export function constraintsInWords(constraints: Constraints | undefined, plugins: PluginLookup): SafeHtml | string {
  if (!constraints || Object.keys(constraints).length === 0) return '';
  return html`<ul class="limits">${constraintLines(constraints, plugins).map((line) => html`<li>${markedName(line.field)}: ${line.conditions.join(', and ')}</li>`)}</ul>`;
}

/** Whether a capability can be approved here, now. */
const approvable = (r: RequestedGrant, presence: PresenceOnPage) => r.approvalStrength !== 'presence' || presence.kind === 'ready';

export function approvalPage(view: ApprovalForPerson, context: ApprovalPageContext): SafeHtml {
  const { presence, known } = context;
  const minutesLeft = Math.max(1, Math.round((view.expiresAtMs - context.nowMs) / 60_000));
  const hostName = view.host.name ? claim(view.host.name, LIMITS.hostName, known) : html`a host that gave no name (id ${view.host.id})`;
  return html`<h1>Allow this agent?</h1>
<p>Approving lets the agent below act <strong>on your behalf</strong> with the capabilities you tick. <strong>Only approve if you started this yourself.</strong> This request expires in about ${minutesLeft} minute${minutesLeft === 1 ? '' : 's'}.</p>
<p class="hint">The names and reasons below are what the agent and its host say about themselves; agentgate does not vouch for them. What agentgate itself says is marked as agentgate's.</p>
<dl class="facts">
<dt>Agent calls itself</dt><dd>${claim(view.agent.name, LIMITS.name, known)}</dd>
<dt>Running on a host that calls itself</dt><dd>${hostName}</dd>
<dt>Acts</dt><dd>${view.agent.mode === 'delegated' ? 'for you' : 'on its own'}</dd>
${view.agent.reason ? html`<dt>Says why</dt><dd class="quoted">${claim(view.agent.reason, LIMITS.reason, known)}</dd>` : ''}
</dl>
${bindingBlock(view.bindingMessage)}
${view.host.linked ? '' : html`<p class="warning">This host is not linked to anyone yet. Approving links it to you: its agents will act for you.</p>`}
${presenceNote(presence)}
<form method="post" action="${context.userCode === undefined ? INBOX_DECISION_PATH : '/device/decision'}" id="decision-form">
<input type="hidden" name="csrf" value="${context.csrfToken}">
<input type="hidden" name="webauthn_response" id="presence-response" value="">
<input type="hidden" name="agent_id" value="${view.agent.id}">
<input type="hidden" name="approval_id" value="${view.approvalId}">
${context.userCode === undefined ? '' : html`<input type="hidden" name="user_code" value="${context.userCode}">`}
${view.requested.length === 0
    ? html`<p>It asks only to be connected; it gets no capabilities until you grant them.</p>`
    : html`<fieldset><legend>It asks to</legend>
${view.requested.map((r, i) => {
    const can = approvable(r, presence);
    return html`<div class="capability">
<input type="checkbox" id="cap-${i}" name="capabilities" value="${r.capability}" ${r.approvalStrength === 'presence' ? html`data-presence="1" ` : ''}${can ? html`checked` : html`disabled`}>
<label for="cap-${i}"><code>${r.capability}</code>: ${displayText(r.description, LIMITS.description)}</label>
${r.constraints && Object.keys(r.constraints).length > 0 ? html`<p class="limits">Only within these limits:</p>${constraintsInWords(r.constraints, context.plugins)}` : html`<p class="limits">With no limits on its arguments.</p>`}
${r.policyReason ? html`<p class="limits policy">agentgate asks you because: ${displayText(r.policyReason, LIMITS.reason)}</p>` : ''}
${r.reason && r.reason !== view.agent.reason ? html`<p class="limits">The agent says about this request (its claim): <span class="quoted">${claim(r.reason, LIMITS.reason, known)}</span></p>` : ''}
${r.approvalStrength === 'presence' ? html`<p class="limits">${can ? 'Changes things: approving it needs your passkey.' : 'Changes things: it needs a passkey, so it cannot be approved here now and is left unticked.'}</p>` : ''}
</div>`;
  })}
</fieldset>`}
<div class="actions">
<button type="submit" name="verdict" value="approve">Approve ticked</button>
<button type="submit" name="verdict" value="deny" class="secondary">Deny all</button>
</div>
</form>`;
}

/**
 * A CIBA request's binding message, set apart so the person compares it with what their agent
 * shows before anything else: the agent's words, shown as text (escaped, never a link; the API
 * refused control and formatting characters when it was sent).
 */
function bindingBlock(bindingMessage: string | undefined): SafeHtml | string {
  if (bindingMessage === undefined) return '';
  return html`<div class="binding" id="binding-message"><p>Your agent should be showing you this message. <strong>Approve only if it shows exactly the same.</strong></p>
<p class="binding-text">${displayText(bindingMessage, MAX_BINDING_MESSAGE_CHARS)}</p></div>`;
}

/** Where the inbox's approval form posts (http/device/inbox.ts). */
export const INBOX_DECISION_PATH = '/inbox/decision';
/** The person's inbox of CIBA requests. */
export const INBOX_PATH = '/inbox';

/**
 * The person's inbox: the CIBA requests sent to them, latest deadline first, each with its binding
 * message and a link to the item, where they decide. Everything the agent or host chose is shown as
 * its claim.
 */
export function inboxPage(items: readonly ApprovalForPerson[], context: { nowMs: number; known: readonly string[] }): SafeHtml {
  if (items.length === 0) {
    return html`<h1>Your requests</h1><p>Nothing waits for you. When an agent asks you for permission, it appears here and you are told by the channels your administrator set up.</p>`;
  }
  return html`<h1>Your requests</h1>
<p>Agents asked you for permission. Open one to see exactly what it asks for; nothing is approved until you say so there. <strong>Only approve what you started yourself.</strong></p>
${items.map((item) => {
    const minutesLeft = Math.max(1, Math.round((item.expiresAtMs - context.nowMs) / 60_000));
    return html`<section class="item">
<h3><a href="${INBOX_PATH}/${encodeURIComponent(item.approvalId)}">${claim(item.agent.name, LIMITS.name, context.known)}</a></h3>
<p>Asks for ${item.requested.length === 0 ? 'a connection only' : item.requested.map((r, i) => html`${i > 0 ? ', ' : ''}<code>${r.capability}</code>`)}; expires in about ${minutesLeft} minute${minutesLeft === 1 ? '' : 's'}.</p>
${item.bindingMessage === undefined ? '' : html`<p>Message: <span class="binding-text">${displayText(item.bindingMessage, MAX_BINDING_MESSAGE_CHARS)}</span></p>`}
</section>`;
  })}`;
}

function presenceNote(presence: PresenceOnPage): SafeHtml | string {
  switch (presence.kind) {
    case 'not_needed':
      return '';
    case 'ready':
      return html`<p id="passkey-error" class="error" role="alert" hidden></p>
${dataBlock('presence-options', presence.options)}
<script src="/static/simplewebauthn-browser.js" defer></script>
<script src="/static/passkeys.js" defer></script>`;
    case 'no_passkey':
      return html`<p class="warning">Some of what it asks changes things, and approving that needs a passkey. <a href="${presence.addUrl}">Add a passkey</a> first, or approve only the rest.</p>`;
    case 'unavailable':
      return html`<p class="warning">Some of what it asks needs a passkey, which this server cannot use (its address is an IP address). You can approve only the rest; an administrator can decide the others.</p>`;
  }
}

/**
 * The page that adds a passkey: the browser proves one of the person's passkeys first when they
 * hold any (`proof`), then creates the new one; the form posts both.
 */
export function addPasskeyPage(registration: unknown, proof: unknown, csrfToken: string, returnTo: string): SafeHtml {
  return html`<h1>Add a passkey</h1>
<p>Some approvals change things, so agentgate asks you to confirm them with a passkey (your device's fingerprint, face or PIN), which an agent controlling your browser cannot do for you.</p>
${proof ? html`<p>You have a passkey already: your device first asks you to confirm with it, then creates the new one.</p>` : ''}
<p id="passkey-error" class="error" role="alert" hidden></p>
${dataBlock('passkey-registration-options', registration)}
${proof ? dataBlock('passkey-proof-options', proof) : ''}
<form method="post" action="/passkeys">
<input type="hidden" name="csrf" value="${csrfToken}">
<input type="hidden" name="return_to" value="${returnTo}">
<input type="hidden" name="response" id="passkey-response" value="">
<input type="hidden" name="proof" id="passkey-proof" value="">
<button type="submit" id="create-passkey">Create a passkey</button>
</form>
<script src="/static/simplewebauthn-browser.js" defer></script>
<script src="/static/passkeys.js" defer></script>`;
}

/**
 * What the person decided, said back in full: the agent by what it calls itself (with the same
 * warnings as the approval page), what it may now do within which limits, and what it may not.
 */
export function decidedPage(
  verdict: 'approve' | 'deny', agentName: string, approved: ReadonlyArray<{ capability: string; constraints?: Constraints | undefined }>, notApproved: string[],
  context: { known: readonly string[]; plugins: PluginLookup },
): SafeHtml {
  const name = claim(agentName, LIMITS.name, context.known);
  if (verdict === 'deny') {
    return html`<h1>Denied</h1><p>You denied the agent that calls itself <strong>${name}</strong>. It learns this the next time it checks, and this request is closed for good: to try again it must ask anew. You can close this page.</p>`;
  }
  return html`<h1>Done</h1>
<p>You approved the agent that calls itself <strong>${name}</strong>. You can close this page and go back to your agent.</p>
${approved.length > 0
    ? html`<p>It may now:</p><ul>${approved.map((g) => html`<li><code>${g.capability}</code>${g.constraints && Object.keys(g.constraints).length > 0
      ? html`, only within these limits:${constraintsInWords(g.constraints, context.plugins)}`
      : ', with no limits on its arguments'}</li>`)}</ul>`
    : html`<p>It is connected, but may not use any capability yet.</p>`}
${notApproved.length > 0 ? html`<p>Not approved (it may ask again):</p><ul>${notApproved.map((c) => html`<li><code>${c}</code></li>`)}</ul>` : ''}`;
}

/** The sign-in page's opening: why the person is asked to sign in, by where they return to. */
function signInReason(returnTo: string, fresh: boolean): SafeHtml {
  if (fresh) return html`<p>Adding your first passkey needs you to sign in again at your identity provider, entering your credentials now: your browser being signed in is not enough.</p>`;
  if (returnTo === ACCOUNT_PATH || returnTo.startsWith(`${ACCOUNT_PATH}?`) || returnTo.startsWith(`${ACCOUNT_PATH}/`)) {
    return html`<p>Sign in to see the agents you approved, their hosts and your passkeys, and to take back what you no longer want. You are asked again if your last sign-in is not recent: unlinking a host and removing a passkey need a fresh one.</p>`;
  }
  return html`<p>An agent asked for permission to act for you. Sign in to see exactly what it asks for; nothing is approved until you say so on the next page. You are asked again if your last sign-in is not recent: approving needs a fresh one.</p>`;
}

/** The page where a signed-in person sees and takes back what they approved (http/device/account.ts). */
export const ACCOUNT_PATH = '/account';

export function signInPage(returnTo: string, csrfToken: string, methods: { oidc: boolean; dev: boolean; fresh?: boolean }): SafeHtml {
  return html`<h1>Sign in</h1>
${signInReason(returnTo, methods.fresh === true)}
${methods.oidc ? html`<p><a class="button" href="/signin/start?return_to=${encodeURIComponent(returnTo)}${methods.fresh ? '&fresh=1' : ''}">Sign in with your organisation's account</a></p>` : ''}
${methods.dev ? html`<form method="post" action="/signin/dev">
<p class="warning">Development sign-in: anyone can be anyone. Never use it in production (INSECURE_DEV_SIGN_IN).</p>
<input type="hidden" name="csrf" value="${csrfToken}">
<input type="hidden" name="return_to" value="${returnTo}">
<label for="name">Your name</label>
<input id="name" name="name" maxlength="64" required autocomplete="username">
<button type="submit">Sign in</button>
</form>` : ''}
${!methods.oidc && !methods.dev ? html`<p class="error">No sign-in is configured on this server (OIDC_ISSUER, or INSECURE_DEV_SIGN_IN for local use).</p>` : ''}`;
}

/** A refusal, in words; the link goes back to where the person came from (the approval, or their agents) when known. */
export function errorPage(message: string, backTo?: string): SafeHtml {
  const back = !backTo ? html`<a href="/device">Enter a code</a>`
    : backTo.startsWith(ACCOUNT_PATH) ? html`<a href="${backTo}">Back to your agents</a>`
      : html`<a href="${backTo}">Back to the request</a>`;
  return html`<h1>That did not work</h1><p class="error" role="alert">${message}</p><p>${back}</p>`;
}

export const STYLESHEET = `body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;line-height:1.5}
header{display:flex;gap:1rem;align-items:baseline;border-bottom:1px solid #ddd;padding-bottom:.5rem;margin-bottom:1rem}
.who{color:#555}.inline{display:inline;margin:0}
button,.button{font:inherit;padding:.5rem 1rem;border-radius:.4rem;border:1px solid #0b57d0;background:#0b57d0;color:#fff;cursor:pointer;text-decoration:none;display:inline-block}
button.secondary{background:#fff;color:#b3261e;border-color:#b3261e}button.link{background:none;border:none;color:#0b57d0;padding:0;text-decoration:underline}
input[type=text],input:not([type]){font:inherit;padding:.4rem;width:100%;max-width:20rem;display:block;margin:.25rem 0 .75rem}
.error{color:#b3261e}.warning{background:#fff4e5;padding:.5rem;border-radius:.4rem}
.facts dt{font-weight:600}.facts dd{margin:0 0 .5rem}.quoted{font-style:italic;color:#444;white-space:pre-wrap}
fieldset{border:1px solid #ddd;border-radius:.4rem}.capability{margin:.5rem 0}.limits{margin:.25rem 0 0 1.5rem;color:#444}
.actions{display:flex;gap:1rem;margin-top:1rem}code{overflow-wrap:anywhere}pre{white-space:pre-wrap;overflow-wrap:anywhere}
.hint{color:#555;font-size:.9rem}.warning-inline{color:#8a4b00;font-weight:600}code.unusual{background:#fff4e5}
ul.limits{margin:.25rem 0 0 1.5rem;padding-left:1rem;color:#444}
.policy{color:#0b3d91}.notice{background:#e8f5e9;padding:.5rem;border-radius:.4rem}
section.item{border:1px solid #ddd;border-radius:.4rem;padding:.5rem 1rem;margin:.75rem 0}
section.item h3{margin:.25rem 0;font-size:1.05rem}ul.grants{padding-left:1.25rem}ul.grants>li{margin:.5rem 0}
.status{font-weight:600}.status-active{color:#1b5e20}.status-revoked,.status-rejected,.status-denied,.status-claimed{color:#b3261e}
form.action{margin:.25rem 0}button.small{padding:.2rem .6rem;font-size:.9rem}
.binding{border:2px solid #0b57d0;border-radius:.4rem;padding:.5rem 1rem;margin:1rem 0}.binding-text{font-size:1.2rem;font-weight:600;white-space:pre-wrap;overflow-wrap:anywhere}
`;
