// `node bench/profile-summary.ts <file.cpuprofile> [top]`: the top costs in a V8 CPU profile, as
// `npm run bench` writes with BENCH_PROFILE_DIR. Prints self time per function and per source
// (a package under node_modules, a file of ours, or Node's internals), so a profile can be read
// and recorded in bench/RESULTS.md without a browser.
import { readFileSync } from 'node:fs';
import { sourceOf } from './profile-frames.ts';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node bench/profile-summary.ts <file.cpuprofile> [top]\n');
  process.exit(2);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));

const selfByFunctionUs = new Map<string, number>();
const selfBySourceUs = new Map<string, number>();
let totalUs = 0;
for (let i = 0; i < profile.samples.length; i++) {
  const node = byId.get(profile.samples[i]!);
  const deltaUs = profile.timeDeltas[i] ?? 0;
  if (!node) continue;
  totalUs += deltaUs;
  const { functionName, url, lineNumber } = node.callFrame;
  const source = sourceOf(url, functionName);
  const name = `${functionName || '(anonymous)'} ${url ? `${source}:${lineNumber + 1}` : ''}`.trim();
  selfByFunctionUs.set(name, (selfByFunctionUs.get(name) ?? 0) + deltaUs);
  selfBySourceUs.set(source, (selfBySourceUs.get(source) ?? 0) + deltaUs);
}

// Inclusive time of our own functions (src/, plugins/): self time of a sample counts once for
// every distinct function of ours on its stack, so it shows what a step costs with its callees.
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
const totalOfOursUs = new Map<string, number>();
for (let i = 0; i < profile.samples.length; i++) {
  const seen = new Set<string>();
  // Bounded by the number of nodes, so a malformed profile with a cycle cannot loop forever.
  let depth = 0;
  for (let id: number | undefined = profile.samples[i]; id !== undefined && depth++ < profile.nodes.length; id = parentOf.get(id)) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) break;
    const { functionName, url, lineNumber } = frame;
    if (!/\/(src|plugins)\//.test(url)) continue;
    const name = `${functionName || '(anonymous)'} ${sourceOf(url, functionName)}:${lineNumber + 1}`;
    if (seen.has(name)) continue;
    seen.add(name);
    totalOfOursUs.set(name, (totalOfOursUs.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
}

const idleUs = selfBySourceUs.get('(idle)') ?? 0;
const busyUs = totalUs - idleUs;
const table = (title: string, entries: Map<string, number>) => {
  const rows = [...entries].filter(([k]) => k !== '(idle)' && !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, top);
  const lines = [`| ${title} | ms | % of busy |`, '|---|---|---|'];
  for (const [k, us] of rows) lines.push(`| ${k.replaceAll('|', '\\|')} | ${(us / 1000).toFixed(0)} | ${((100 * us) / busyUs).toFixed(1)} |`);
  return lines.join('\n');
};

process.stdout.write(
  `Profile ${file}: ${(totalUs / 1e6).toFixed(2)} s sampled on the main thread, ${(100 * idleUs / totalUs).toFixed(1)} % idle.\n\n`
  + `${table('source (self time)', selfBySourceUs)}\n\n${table('function (self time)', selfByFunctionUs)}\n\n`
  + `${table('our function (total time, callees included)', totalOfOursUs)}\n`,
);
