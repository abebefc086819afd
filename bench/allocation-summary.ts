// `node bench/allocation-summary.ts <file.heapprofile> [top] [requests]`: where a sampling heap
// profile (bench/allocation-profile.ts, BENCH_ALLOCATION_PROFILE_DIR) says the bytes were allocated.
// Prints the sampled bytes by source (a package, a file of ours, Node's internals), by function
// (self size: allocated in that function itself; and again with builtins such as Map or
// JSON.parse charged to the function that called them), by function including callees (each of our
// functions once per stack), and by stack (the function and its three nearest callers), `top` rows
// each (30 by default). With `requests` (the window's completed requests, from the benchmark's row)
// every row also shows bytes per request.
//
// The profile's sizes are V8's estimates from its samples (one per ~512 bytes allocated), so small
// rows are noisy; the total is close to what bench/heap-allocation-probe.ts counts for the window.
import { readFileSync } from 'node:fs';
import { sourceOf } from './profile-frames.ts';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  callFrame: CallFrame;
  selfSize: number;
  id: number;
  children: ProfileNode[];
}

interface HeapProfile {
  head: ProfileNode;
}

const [file, topArg, requestsArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node bench/allocation-summary.ts <file.heapprofile> [top] [requests]\n');
  process.exit(2);
}
const top = Number(topArg ?? 30);
const requests = requestsArg === undefined ? undefined : Number(requestsArg);
const profile = JSON.parse(readFileSync(file, 'utf8')) as HeapProfile;

/** Where a frame's code lives (profile-frames.ts). */
function frameSource(frame: CallFrame): string {
  return sourceOf(frame.url, frame.functionName);
}

function nameOf(frame: CallFrame): string {
  const where = frame.url ? ` ${frameSource(frame)}:${frame.lineNumber + 1}` : '';
  return `${frame.functionName || '(anonymous)'}${where}`;
}

const isOurs = (frame: CallFrame) => /\/(src|plugins)\//.test(frame.url);

const bySource = new Map<string, number>();
/** As bySource, but a builtin (no script: Map, Array.prototype.map, JSON.parse...) is charged to the function that called it. */
const byCallerOfBuiltins = new Map<string, number>();
const byFunction = new Map<string, number>();
const byStack = new Map<string, number>();
const inclusiveOfOurs = new Map<string, number>();
let total = 0;

const add = (map: Map<string, number>, key: string, bytes: number) => map.set(key, (map.get(key) ?? 0) + bytes);

// Iterative, so a deep profile cannot overflow the stack: each entry is a node and its ancestors' names.
const pending: Array<{ node: ProfileNode; stack: string[]; ours: string[]; scripted: string }> = [{ node: profile.head, stack: [], ours: [], scripted: '(root)' }];
while (pending.length > 0) {
  const { node, stack, ours, scripted: callerName } = pending.pop()!;
  const name = nameOf(node.callFrame);
  const scripted = node.callFrame.url === '' ? callerName : name;
  const here = [...stack, name];
  const oursHere = isOurs(node.callFrame) && !ours.includes(name) ? [...ours, name] : ours;
  const bytes = node.selfSize;
  if (bytes > 0) {
    total += bytes;
    add(bySource, frameSource(node.callFrame), bytes);
    add(byCallerOfBuiltins, scripted, bytes);
    add(byFunction, name, bytes);
    add(byStack, here.slice(-4).reverse().join(' ← '), bytes);
    for (const ourName of oursHere) add(inclusiveOfOurs, ourName, bytes);
  }
  for (const child of node.children) pending.push({ node: child, stack: here, ours: oursHere, scripted });
}

const table = (title: string, entries: Map<string, number>) => {
  const rows = [...entries].sort((a, b) => b[1] - a[1]).slice(0, top);
  const perRequest = requests !== undefined && requests > 0;
  const lines = [`| ${title} | KB | % |${perRequest ? ' bytes/req |' : ''}`, `|---|---|---|${perRequest ? '---|' : ''}`];
  for (const [k, bytes] of rows) {
    lines.push(`| ${k.replaceAll('|', '\\|')} | ${(bytes / 1024).toFixed(0)} | ${((100 * bytes) / total).toFixed(1)} |${perRequest ? ` ${Math.round(bytes / requests)} |` : ''}`);
  }
  return lines.join('\n');
};

process.stdout.write(
  `Allocation profile ${file}: ${(total / 1024 / 1024).toFixed(1)} MB sampled`
  + `${requests !== undefined && requests > 0 ? `, ${Math.round(total / requests)} bytes per request over ${requests} requests` : ''}.\n\n`
  + `${table('source (self size)', bySource)}\n\n${table('function (self size)', byFunction)}\n\n`
  + `${table('function (self size, builtins charged to the function that called them)', byCallerOfBuiltins)}\n\n`
  + `${table('our function (total size, callees included)', inclusiveOfOurs)}\n\n${table('stack (self size; function ← its callers)', byStack)}\n`,
);
