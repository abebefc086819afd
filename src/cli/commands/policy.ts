// `agentgate policy status|reload|preview|shadow`: the active Rego policy artefact (DESIGN §5), and
// changing it with its effect known first: a preview of a candidate against the recorded decisions,
// a reload bounded by --max-flips, and a shadow that sees every live decision and decides none.
import { readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { adminCall, adminCallCommand, integerOption, printAnswer, stringOption, type CommandContext, type CommandSpec } from '../command.ts';
import { ServerRefused, UsageError } from '../errors.ts';
import { isRecord } from '../http.ts';
import { keyValues, safe, table } from '../output.ts';

/** The most recorded decisions a preview may be asked to read (the server's own bound). */
const MAX_PREVIEW_DECISIONS = 10_000_000;
/** The largest artefact the server takes (src/http/admin.ts). */
const MAX_ARTEFACT_BYTES = 16 * 1024 * 1024;

/**
 * The artefact a path names: a .wasm file, or a policy directory, whose build output is
 * `dist/policy.wasm` (scripts/build-policy.mjs writes it there).
 */
async function readArtefact(ctx: CommandContext, given: string): Promise<Uint8Array> {
  let path = resolve(ctx.cwd, given);
  try {
    if ((await stat(path)).isDirectory()) path = join(path, 'dist', 'policy.wasm');
    const info = await stat(path);
    if (info.size > MAX_ARTEFACT_BYTES) throw new UsageError(`${given} is ${info.size} bytes, more than the ${MAX_ARTEFACT_BYTES} the server takes`);
    return await readFile(path);
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`cannot read the artefact ${given}: ${(err as Error).message}`, 'give a compiled policy (.wasm) or a policy directory with dist/policy.wasm (npm run policy:build)');
  }
}

const count = (value: unknown): number => (typeof value === 'number' ? value : 0);

/** A preview for people: the totals, then the flips grouped, the largest first. */
export function previewText(body: Record<string, unknown>): string {
  const errors = isRecord(body.errors) ? body.errors : {};
  const lines = keyValues([
    ['candidate', body.sha256],
    ['evaluated', body.evaluated],
    ['decisions', body.decisions],
    ['unchanged', body.unchanged],
    ['allow_to_deny', body.allow_to_deny],
    ['deny_to_allow', body.deny_to_allow],
    ['other_changes', body.other_changes],
    ['errors', errors.count],
    ['truncated', body.truncated === true ? 'yes: the preview stopped before the records ran out' : undefined],
  ]);
  const groups = Array.isArray(body.groups) ? body.groups.filter(isRecord) : [];
  const flips = groups.length === 0 ? '' : `\n${table(['direction', 'count', 'capability', 'host_id', 'rule'], groups.map((g) => [g.direction, g.count, g.capability, g.host_id, g.rule]))}`;
  const errorExamples = Array.isArray(errors.examples) ? errors.examples.filter(isRecord) : [];
  const unevaluable = errorExamples.length === 0 ? '' : `\ncould not evaluate (examples):\n${errorExamples.map((e) => `  ${safe(e.error)}`).join('\n')}\n`;
  return lines + flips + unevaluable;
}

/** `--max-flips 3` or `--max-flips 0.5%`, as the server takes it. */
function maxFlipsOf(ctx: CommandContext): number | string | undefined {
  const text = stringOption(ctx.values, 'max-flips');
  if (text === undefined) return undefined;
  if (/^\d{1,15}$/.test(text)) return Number(text);
  if (/^\d{1,3}(\.\d{1,6})?%$/.test(text) && Number(text.slice(0, -1)) <= 100) return text;
  throw new UsageError('--max-flips must be a count of decisions (3) or a share in percent (0.5%)');
}

const decisionsOption = { type: 'string', valueName: 'N', description: 'the newest recorded decisions to preview against (default: all the server keeps)' } as const;

export const policyCommands: CommandSpec[] = [
  adminCallCommand(['policy', 'status'], 'The active policy artefact: its sha256, generation and load time', { method: 'GET', path: '/admin/policy' }, (body) =>
    keyValues([['sha256', body.sha256], ['generation', body.generation], ['loaded_at', body.loaded_at]])),
  {
    words: ['policy', 'reload'],
    summary: 'Reload the policy artefact; a refused one (422 reload_rejected, exit 1) leaves the old one serving',
    details: 'With --max-flips, the artefact on disk is first previewed against the recorded decisions; when it would change more of them '
      + '(flips either way, and decisions it cannot evaluate), the reload is refused (409 max_flips_exceeded, exit 1, the preview printed) and the live policy stays.',
    args: [],
    options: {
      'max-flips': { type: 'string', valueName: 'N|P%', description: 'refuse the reload if its preview changes more than N recorded decisions, or more than P percent of them' },
      decisions: decisionsOption,
    },
    admin: true,
    examples: ['agentgate policy reload', 'agentgate policy reload --max-flips 0', 'agentgate policy reload --max-flips 0.5%'],
    async run(ctx) {
      const maxFlips = maxFlipsOf(ctx);
      const decisions = integerOption(ctx.values, 'decisions', MAX_PREVIEW_DECISIONS);
      const json = { ...(maxFlips === undefined ? {} : { max_flips: maxFlips }), ...(decisions === undefined ? {} : { decisions }) };
      let answer;
      try {
        answer = await adminCall(ctx, 'POST', '/admin/policy/reload', { json });
      } catch (err) {
        // For people, the refusing preview as a preview reads, not as one line of JSON.
        if (!ctx.json && err instanceof ServerRefused && err.code === 'max_flips_exceeded' && isRecord(err.body?.preview)) {
          ctx.io.stderr(`the preview that refused it:\n${previewText(err.body.preview)}`);
          const { preview: _preview, ...rest } = err.body;
          throw new ServerRefused(err.status, err.code, err.message, err.bodyText, rest);
        }
        throw err;
      }
      printAnswer(ctx, answer, (body) => keyValues([['sha256', body.sha256], ['generation', body.generation]])
        + (isRecord(body.preview) ? `\npreview it passed:\n${previewText(body.preview)}` : ''));
    },
  },
  {
    words: ['policy', 'preview'],
    summary: 'What a candidate policy would change among the recorded decisions, before it is live',
    details: 'ARTEFACT is a compiled policy (.wasm) or a policy directory (its dist/policy.wasm). The server runs it off the request path against the '
      + 'newest recorded decisions and reports the decisions that flip (allow to deny, deny to allow), grouped by capability, host and rule, with redacted examples.',
    args: ['ARTEFACT'],
    options: { decisions: decisionsOption },
    admin: true,
    examples: ['agentgate policy preview policies', 'agentgate policy preview candidate.wasm --decisions 10000'],
    async run(ctx) {
      const wasm = await readArtefact(ctx, ctx.args.ARTEFACT!);
      const decisions = integerOption(ctx.values, 'decisions', MAX_PREVIEW_DECISIONS);
      const answer = await adminCall(ctx, 'POST', '/admin/policy/preview', { wasm, query: { decisions: decisions === undefined ? undefined : String(decisions) } });
      printAnswer(ctx, answer, previewText);
    },
  },
  {
    words: ['policy', 'shadow'],
    summary: "The shadow policy's running tally; --load a candidate as the shadow, --promote it to live, or --remove it",
    details: "A shadow sees every live decision of the instance it is loaded on, off the request path, and decides none; it counts where it would have "
      + 'answered differently (also in /metrics: agentgate_policy_shadow_disagreements_total). --promote reloads its artefact as the live policy (golden decisions checked first).',
    args: [],
    options: {
      load: { type: 'string', valueName: 'ARTEFACT', description: 'load this compiled policy (.wasm) or policy directory as the shadow' },
      promote: { type: 'boolean', description: 'make the shadow the live policy' },
      remove: { type: 'boolean', description: 'remove the shadow' },
    },
    admin: true,
    examples: ['agentgate policy shadow --load policies', 'agentgate policy shadow', 'agentgate policy shadow --promote'],
    async run(ctx) {
      const load = stringOption(ctx.values, 'load');
      const promote = ctx.values.promote === true;
      const remove = ctx.values.remove === true;
      if ([load !== undefined, promote, remove].filter(Boolean).length > 1) throw new UsageError('give at most one of --load, --promote and --remove');
      if (load !== undefined) {
        const answer = await adminCall(ctx, 'POST', '/admin/policy/shadow', { wasm: await readArtefact(ctx, load) });
        printAnswer(ctx, answer, (body) => keyValues([['shadow', body.sha256]]));
      } else if (promote) {
        const answer = await adminCall(ctx, 'POST', '/admin/policy/shadow/promote');
        printAnswer(ctx, answer, (body) => keyValues([['sha256', body.sha256], ['generation', body.generation]]));
      } else if (remove) {
        const answer = await adminCall(ctx, 'DELETE', '/admin/policy/shadow');
        printAnswer(ctx, answer, () => 'shadow removed\n');
      } else {
        printAnswer(ctx, await adminCall(ctx, 'GET', '/admin/policy/shadow'), shadowText);
      }
    },
  },
];

function shadowText(body: Record<string, unknown>): string {
  const byCapability = isRecord(body.by_capability) ? Object.entries(body.by_capability).filter(([, v]) => isRecord(v)) as Array<[string, Record<string, unknown>]> : [];
  const lines = keyValues([
    ['shadow', body.sha256], ['loaded_at', body.loaded_at], ['observed', body.observed], ['evaluated', body.evaluated],
    ['agreed', body.agreed], ['disagreed', body.disagreed], ['dropped', body.dropped], ['errors', body.errors],
  ]);
  const rows = byCapability.map(([capability, v]) => [capability, count(v.allow_to_deny), count(v.deny_to_allow), count(v.other)]);
  return lines + (rows.length === 0 ? '' : `\n${table(['capability', 'allow_to_deny', 'deny_to_allow', 'other'], rows)}`);
}
