// `node bench/regex-calibration.ts`: the measurements behind plugins/regex.ts MAX_PROGRAM_INSTRUCTIONS. RE2 matches
// in time linear in (compiled program size × argument length), so the operator bounds the program
// size; this script measures what a bound costs. For families of patterns built to keep every
// instruction of the program busy on every character (counted repetition of a class, of an optional
// atom, of a Unicode class), at several program sizes, it times what a plugin worker pays on the
// first call after it starts (compile the pattern, then match a hostile 1024-character argument with
// a cold JIT, as plugins/regex.ts `evaluate` does) in a fresh worker thread, BENCH_REGEX_ROUNDS
// times (default 3; the worst is reported), and the match alone once warm. It ends with each
// pattern's verdict from the plugin's own operand schema. The worst first call at or under the
// bound should stay under half of the default 50 ms PLUGIN_BUDGET_MS.
import { cpus } from 'node:os';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { RE2JS } from 're2js';

interface Job {
  pattern: string;
  input: string;
}

interface Timing {
  instructions: number;
  /** Importing plugins/regex.ts (its warm-up included), as a plugin worker does before it serves. */
  importMs: number;
  firstCallMs: number;
  warmMatchMs: number;
}

const WARM_RUNS = 7;

/** In the worker: one pattern, timed the way a freshly started plugin worker meets it. */
async function measure({ pattern, input }: Job): Promise<Timing> {
  let startedMs = performance.now();
  await import('../plugins/regex.ts');
  const importMs = performance.now() - startedMs;
  startedMs = performance.now();
  const compiled = RE2JS.compile(pattern);
  compiled.matcher(input).find();
  const firstCallMs = performance.now() - startedMs;
  const warm: number[] = [];
  for (let i = 0; i < WARM_RUNS; i++) {
    startedMs = performance.now();
    compiled.matcher(input).find();
    warm.push(performance.now() - startedMs);
  }
  warm.sort((a, b) => a - b);
  return { instructions: compiled.programSize(), importMs, firstCallMs, warmMatchMs: warm[Math.floor(WARM_RUNS / 2)]! };
}

if (!isMainThread) {
  parentPort!.postMessage(await measure(workerData as Job));
} else {
  await main();
}

async function inFreshWorker(job: Job): Promise<Timing> {
  const worker = new Worker(new URL(import.meta.url), { workerData: job });
  try {
    return await new Promise<Timing>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
  } finally {
    await worker.terminate();
  }
}

async function main(): Promise<void> {
  const rounds = Number(process.env.BENCH_REGEX_ROUNDS ?? 3);
  const { MAX_ARGUMENT_CHARS, MAX_PROGRAM_INSTRUCTIONS, operand } = await import('../plugins/regex.ts');
  const a = 'a'.repeat(MAX_ARGUMENT_CHARS);
  const accented = 'é'.repeat(MAX_ARGUMENT_CHARS);
  // Each family at repetition counts that put its program near 250 instructions, at 500 (the bound) or just under, and near 1000.
  const families: Array<{ label: string; pattern: (n: number) => string; counts: number[]; input: string }> = [
    { label: 'class, counted', pattern: (n) => `[a-z]{${n}}`, counts: [250, 498, 1000], input: a },
    { label: "the finding's shape", pattern: (n) => `(?i)(?:[a-z]|[0-9]|_){1,${n}}@`, counts: [125, 249, 500], input: a },
    { label: 'Unicode class, counted', pattern: (n) => `\\pL{${n}}`, counts: [250, 498, 1000], input: accented },
    { label: 'any character, counted', pattern: (n) => `(?s).{${n}}`, counts: [250, 498, 1000], input: a },
    { label: 'optional atom, counted', pattern: (n) => `(?:a?){${n}}`, counts: [125, 249, 500], input: a },
    { label: 'word class, case-folded', pattern: (n) => `(?i)\\w{${n}}x`, counts: [250, 497, 1000], input: a },
    { label: "the audit's shape, unanchored", pattern: (n) => `${`a{0,${n}}`.repeat(5)}b`, counts: [25, 49, 99], input: `${'a'.repeat(MAX_ARGUMENT_CHARS - 1)}b` },
  ];
  const jobs: Array<{ family: string; job: Job }> = families.flatMap((f) => f.counts.map((n) => ({ family: f.label, job: { pattern: f.pattern(n), input: f.input } })));
  jobs.push({ family: 'the finding', job: { pattern: '(?i)(?:[a-z]|[0-9]|_){100,1000}@', input: a } });
  const ordinary = ['^[A-Z]{3}$', '^[a-z0-9._%+-]+@example\\.com$', `^(?:${wordAlternation(200)})$`, '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'];
  for (const pattern of ordinary) jobs.push({ family: 'ordinary', job: { pattern, input: a } });

  console.log(`Machine: ${cpus()[0]?.model.trim() || 'unknown CPU'}, ${cpus().length} cores, Node ${process.version}; ${rounds} fresh workers per pattern, ${MAX_ARGUMENT_CHARS}-character arguments.`);
  console.log('');
  console.log('| family | pattern | instructions | first call in a fresh worker, worst (ms) | warm match (ms) | plugins/regex.ts at grant time |');
  console.log('|---|---|---|---|---|---|');
  const worstAtOrUnder = { bound: 0, over: 0 };
  let worstImportMs = 0;
  for (const { family, job } of jobs) {
    const timings: Timing[] = [];
    for (let round = 0; round < rounds; round++) timings.push(await inFreshWorker(job));
    const instructions = timings[0]!.instructions;
    worstImportMs = Math.max(worstImportMs, ...timings.map((t) => t.importMs));
    const firstCallMs = Math.max(...timings.map((t) => t.firstCallMs));
    const warmMatchMs = Math.max(...timings.map((t) => t.warmMatchMs));
    if (instructions <= MAX_PROGRAM_INSTRUCTIONS) worstAtOrUnder.bound = Math.max(worstAtOrUnder.bound, firstCallMs);
    else worstAtOrUnder.over = Math.max(worstAtOrUnder.over, firstCallMs);
    const verdict = operand.safeParse(job.pattern).success ? 'accepted' : 'refused';
    const shown = job.pattern.length > 48 ? `${job.pattern.slice(0, 45)}...` : job.pattern;
    console.log(`| ${family} | \`${shown.replaceAll('|', '\\|')}\` | ${instructions} | ${firstCallMs.toFixed(1)} | ${warmMatchMs.toFixed(1)} | ${verdict} |`);
  }
  console.log('');
  console.log(`Bound: ${MAX_PROGRAM_INSTRUCTIONS} instructions. Worst first call at or under it: ${worstAtOrUnder.bound.toFixed(1)} ms; over it: ${worstAtOrUnder.over.toFixed(1)} ms. Importing plugins/regex.ts in a fresh worker (its warm-up included): at most ${worstImportMs.toFixed(1)} ms.`);
}

/** Distinct words joined by `|`, cut to `chars` characters: an ordinary allow-list pattern. */
function wordAlternation(chars: number): string {
  const words = 'alpha|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliet|kilo|lima|mike|november|oscar|papa|quebec|romeo|sierra|tango|uniform|victor|whiskey|xray|yankee|zulu|apple|banana|cherry|damson|elder|fig|grape';
  return words.slice(0, chars).replace(/\|+$/, '');
}
