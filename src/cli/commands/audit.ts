// `agentgate audit tail`: the audit trail (GET /admin/audit), once or followed. The endpoint's
// contract: `?agent_id=&host_id=&type=&since=&until=&cursor=&limit=` answers
// `{events: [{id, at, type, agent_id?, host_id?, outcome?, code?, ...}], next_cursor}`. The order
// of `events` is the server's; the tool prints them oldest first, and when following it asks for
// events `since` the newest it has seen, drops the ones it printed already (by id), and follows
// `next_cursor` within each poll.
import { setTimeout as sleep } from 'node:timers/promises';
import { adminCall, integerOption, stringOption, type CommandContext, type CommandSpec } from '../command.ts';
import { ServerRefused } from '../errors.ts';
import { isRecord, type JsonAnswer } from '../http.ts';
import { safe, table } from '../output.ts';

const MAX_LIMIT = 500;
const DEFAULT_LIMIT = 50;
const DEFAULT_INTERVAL_MS = 2000;
/** Pages read in one poll at most; the rest wait for the next poll, so one poll cannot run forever. */
const MAX_PAGES_PER_POLL = 20;
/** Ids remembered to drop repeats; the oldest are forgotten first, so memory stays bounded. */
const MAX_REMEMBERED_IDS = 10_000;

type AuditEvent = Record<string, unknown> & { id: string };

interface AuditPage {
  answer: JsonAnswer;
  events: AuditEvent[];
  nextCursor: string | null;
}

/** Oldest first by `at` (ISO strings and epoch numbers both order correctly), then by id. */
export function byTime(a: AuditEvent, b: AuditEvent): number {
  const at = typeof a.at === 'number' && typeof b.at === 'number' ? a.at - b.at : String(a.at).localeCompare(String(b.at));
  return at !== 0 ? at : a.id.localeCompare(b.id);
}

/** One event on one line, for following: fields that are absent are left out. */
function eventLine(event: AuditEvent): string {
  const fields = (['agent_id', 'host_id', 'outcome', 'code'] as const)
    .filter((name) => event[name] !== undefined && event[name] !== null)
    .map((name) => `${name.replace('_id', '')}=${safe(event[name])}`);
  return `${safe(event.at)}  ${safe(event.type)}${fields.length > 0 ? `  ${fields.join(' ')}` : ''}\n`;
}

function eventsTable(events: readonly AuditEvent[]): string {
  if (events.length === 0) return 'no audit events\n';
  return table(['at', 'type', 'agent', 'host', 'outcome', 'code'], events.map((e) => [e.at, e.type, e.agent_id ?? '-', e.host_id ?? '-', e.outcome ?? '-', e.code ?? '-']));
}

async function fetchPage(ctx: CommandContext, query: Record<string, string | undefined>): Promise<AuditPage> {
  let answer: JsonAnswer;
  try {
    answer = await adminCall(ctx, 'GET', '/admin/audit', { query });
  } catch (err) {
    // `not_found` is the answer for a path the server does not serve; an unknown agent or host
    // named in a filter would be agent_not_found or host_not_found, and is shown as it is.
    if (err instanceof ServerRefused && err.status === 404 && err.code === 'not_found') {
      throw new ServerRefused(404, 'not_found', 'this server has no audit API (GET /admin/audit answered 404); it needs a newer agentgate', err.bodyText, err.body);
    }
    throw err;
  }
  const body = isRecord(answer.body) ? answer.body : {};
  const events = (Array.isArray(body.events) ? body.events : []).filter((e): e is AuditEvent => isRecord(e) && typeof e.id === 'string');
  const nextCursor = typeof body.next_cursor === 'string' && body.next_cursor !== '' ? body.next_cursor : null;
  return { answer, events, nextCursor };
}

async function follow(ctx: CommandContext, filters: Record<string, string | undefined>, limit: number, intervalMs: number): Promise<void> {
  const seen = new Set<string>();
  const state: { newest: AuditEvent | null } = { newest: null };
  const print = (events: AuditEvent[]) => {
    for (const event of events.filter((e) => !seen.has(e.id)).sort(byTime)) {
      seen.add(event.id);
      if (seen.size > MAX_REMEMBERED_IDS) seen.delete(seen.values().next().value!);
      if (state.newest === null || byTime(event, state.newest) > 0) state.newest = event;
      ctx.io.stdout(ctx.json ? `${JSON.stringify(event)}\n` : eventLine(event));
    }
  };
  // Runs until SIGINT or SIGTERM; every poll reads at most MAX_PAGES_PER_POLL pages.
  while (!ctx.stop.aborted) {
    const at = state.newest?.at;
    const since = typeof at === 'number' ? String(at) : safeQueryValue(at);
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES_PER_POLL && !ctx.stop.aborted; page++) {
      const { events, nextCursor } = await fetchPage(ctx, { ...filters, limit: String(limit), since, cursor });
      print(events);
      if (nextCursor === null) break;
      cursor = nextCursor;
    }
    await sleep(intervalMs, undefined, { signal: ctx.stop }).catch(() => undefined);
  }
}

const safeQueryValue = (value: unknown): string | undefined => (typeof value === 'string' && value.length <= 64 ? value : undefined);

export const auditCommands: CommandSpec[] = [
  {
    words: ['audit', 'tail'],
    summary: 'Show recent audit events, or follow new ones as they happen',
    details: 'Without --follow: one page of events (the server picks which; the newest, for a tail), printed oldest first. '
      + 'With --follow: polls until interrupted (Ctrl-C ends it with exit 0); with --json, one event per line (JSON Lines). '
      + 'A server without the audit API answers 404: "this server has no audit API" (exit 1). '
      + 'Successful reads of the trail are not recorded in it, so following it adds nothing to it.',
    args: [],
    options: {
      follow: { type: 'boolean', short: 'f', description: 'keep polling and print new events until interrupted' },
      agent: { type: 'string', valueName: 'ID', description: "only this agent's events" },
      host: { type: 'string', valueName: 'ID', description: "only this host's events" },
      type: { type: 'string', valueName: 'TYPE', description: 'only events of this type (execute.refused) or family (execute); the server refuses one that names no type' },
      limit: { type: 'string', valueName: 'N', description: `events per request (1-${MAX_LIMIT}; default ${DEFAULT_LIMIT})` },
      'interval-ms': { type: 'string', valueName: 'MS', description: `how often --follow polls (default ${DEFAULT_INTERVAL_MS})` },
    },
    admin: true,
    examples: ['agentgate audit tail --agent agt_0123 --limit 20', 'agentgate audit tail --follow --type execute'],
    async run(ctx) {
      const limit = integerOption(ctx.values, 'limit', MAX_LIMIT) ?? DEFAULT_LIMIT;
      const intervalMs = integerOption(ctx.values, 'interval-ms', 600_000) ?? DEFAULT_INTERVAL_MS;
      const filters = { agent_id: stringOption(ctx.values, 'agent'), host_id: stringOption(ctx.values, 'host'), type: stringOption(ctx.values, 'type') };
      if (ctx.values.follow === true) return follow(ctx, filters, limit, intervalMs);
      const { answer, events } = await fetchPage(ctx, { ...filters, limit: String(limit) });
      if (ctx.json) ctx.io.stdout(answer.text.endsWith('\n') ? answer.text : `${answer.text}\n`);
      else ctx.io.stdout(eventsTable([...events].sort(byTime)));
    },
  },
];
