// Runs a guide's commands the way a reader does: in a fresh copy of the repository, in one shell, in
// the order the guide gives them, with the system's Node (not the pinned one) first on the PATH. The
// guides say once (README, "Two commands") that their commands run from the checkout through npm
// scripts and `npx agentgate`; this is what holds them to it.
//
// What runs, from a guide's Markdown:
//   - every ```sh block, line by line as one bash script (`set -e`: a command that fails stops it);
//   - every ```ts block whose first line is exactly `// <path>` is written to that path, as a reader
//     creating the file would (plugins/README.md's ends_with.ts);
//   - a block right after `<!-- guides test: not run, … -->` is skipped (the comment says why), and a
//     block right after `<!-- guides test: slow suite only, … -->` runs only when asked for.
// Three things a reader does by eye are made mechanical, and nothing else is changed:
//   - a command whose comment says `# exit N` must exit with N (the walk shows a refusal on purpose);
//   - after a command sent to the background (`npm start &`), the script waits for the server's
//     `agentgate listening` line, which this runner reads from the shell's output and passes on;
//   - the guides' port 3000 becomes a free one (PORT and AGENTGATE_URL say which), so that a guide
//     never meets another server on this machine.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, lstatSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, isAbsolute, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './net.ts';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Set for everything a guide runs, so a guide's own `npm test` does not run the guides again. */
export const NESTED_ENV = 'AGENTGATE_GUIDES_NESTED';

/** How long a command sent to the background may take to print `agentgate listening`. */
const LISTEN_TIMEOUT_SECONDS = 60;
/** The output kept for a failure's message: the end of it, where the failing command is. */
const OUTPUT_KEPT_CHARS = 200_000;

export interface GuideStep {
  kind: 'sh' | 'file';
  /** The line of the opening fence, for messages. */
  line: number;
  text: string;
  /** For a file: where it goes, relative to the repository. */
  path?: string;
  slow: boolean;
}

const MARKER = /^<!--\s*guides test:\s*(not run|slow suite only)\b/;
const FILE_HEADER = /^\/\/ (\S+\.(?:ts|mts|js|mjs))$/;

/** The steps of a guide, in order (see the top of this file for which blocks count). */
export function guideSteps(markdown: string): GuideStep[] {
  const lines = markdown.split('\n');
  const steps: GuideStep[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\w*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const indent = open[1]!.length;
    const lang = open[2]!;
    let end = i + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    const text = lines.slice(i + 1, end).map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length))).join('\n');
    let before = i - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const marker = before >= 0 ? MARKER.exec(lines[before]!.trim())?.[1] : undefined;
    const line = i + 1;
    i = end;
    if (marker === 'not run') continue;
    const slow = marker === 'slow suite only';
    if (lang === 'sh') steps.push({ kind: 'sh', line, text, slow });
    const path = lang === 'ts' ? FILE_HEADER.exec(text.split('\n')[0] ?? '')?.[1] : undefined;
    if (path !== undefined) {
      if (isAbsolute(path) || normalize(path).startsWith('..')) throw new Error(`line ${line}: a file outside the repository: ${path}`);
      steps.push({ kind: 'file', line, text: `${text}\n`, path, slow });
    }
  }
  return steps;
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** The guide as one bash script (see the top of this file for the three changes it makes). */
export function guideScript(guide: string, steps: readonly GuideStep[], port: number): string {
  const out = [
    'set -eEo pipefail',
    `trap 'status=$?; [[ $- == *e* ]] && echo "guides test: exit $status from: $BASH_COMMAND" >&2' ERR`,
    'set -x',
  ];
  for (const step of steps) {
    out.push(`: ${quote(`${guide}:${step.line}`)}`);
    if (step.kind === 'file') {
      out.push(`mkdir -p ${quote(dirname(step.path!))}`, `cat > ${quote(step.path!)} <<'GUIDE_FILE_END'`, step.text.trimEnd(), 'GUIDE_FILE_END');
      continue;
    }
    const lines = step.text.replaceAll(':3000', `:${port}`).split('\n');
    lines.forEach((line, k) => {
      const code = line.replace(/(^|\s)#.*$/, '').trimEnd();
      const continues = k > 0 && lines[k - 1]!.replace(/(^|\s)#.*$/, '').trimEnd().endsWith('\\');
      const expected = /#.*\bexit (\d+)\b/.exec(line)?.[1];
      if (expected !== undefined && !continues && !code.endsWith('\\')) {
        out.push('set +e', line, 'status=$?', 'set -e',
          `[ "$status" -eq ${expected} ] || { echo "guides test: ${guide}:${step.line}: expected exit ${expected}, got $status" >&2; exit 97; }`);
        return;
      }
      out.push(line);
      if (/[^&]&$/.test(code) && !code.endsWith('\\')) {
        out.push(`read -r -t ${LISTEN_TIMEOUT_SECONDS} -u 3 _ || { echo "guides test: ${guide}:${step.line}: no 'agentgate listening' line" >&2; exit 98; }`);
      }
    });
  }
  return `${out.join('\n')}\n`;
}

/** PATH without any node_modules/.bin (npm adds them for `npm test`): the system's PATH. */
export function systemPath(): string {
  return (process.env.PATH ?? '').split(delimiter).filter((dir) => dir !== '' && !dir.includes('node_modules')).join(delimiter);
}

/** The `node` a shell finds on the system PATH, and its version. */
export function systemNode(): { path: string; version: string } {
  const path = systemPath().split(delimiter).map((dir) => join(dir, 'node')).find((file) => existsSync(file));
  if (path === undefined) throw new Error(`no node on the system PATH (${systemPath()})`);
  return { path, version: execFileSync(path, ['--version'], { encoding: 'utf8' }).trim() };
}

/**
 * A copy of the repository as a clone of the working tree would be: the files git tracks or would
 * track (so nothing .gitignore covers: no node_modules, dist or keys), with node_modules linked
 * from this checkout in place of `npm install`. It is a git repository of its own (never committed
 * to), so a guide's run can be asked what `git status` would offer to commit.
 */
export async function repositoryCopy(): Promise<{ dir: string; copy: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'agentgate-guide-'));
  const copy = join(dir, 'agentgate');
  try {
    const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: REPO_ROOT, encoding: 'utf8' });
    for (const file of new Set(listed.split('\0').filter((f) => f !== ''))) {
      // Regular files only: a file deleted in the working tree is gone from a clone too, and a
      // node_modules link (this checkout may itself be such a copy) is made afresh below.
      if (!existsSync(join(REPO_ROOT, file)) || !lstatSync(join(REPO_ROOT, file)).isFile()) continue;
      await mkdir(join(copy, dirname(file)), { recursive: true });
      await copyFile(join(REPO_ROOT, file), join(copy, file));
    }
    await symlink(join(REPO_ROOT, 'node_modules'), join(copy, 'node_modules'));
    execFileSync('git', ['init', '-q'], { cwd: copy });
    return { dir, copy };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** The files `git status` would offer to add. */
export function untrackedFiles(copy: string): string[] {
  return execFileSync('git', ['ls-files', '-z', '--others', '--exclude-standard'], { cwd: copy, encoding: 'utf8' }).split('\0').filter((f) => f !== '');
}

export interface GuideRun {
  code: number | null;
  /** stdout and stderr interleaved as they came (the end of it, when long). */
  output: string;
  stdout: string;
  /** Files the run left that `git status` would offer to commit. */
  newUntracked: string[];
}

/**
 * Runs a guide's steps in a fresh copy of the repository; `slow` includes the blocks marked for the
 * slow suite. Every process the guide started is stopped (SIGTERM to the shell's process group, as
 * Ctrl-C-and-wait would) before this resolves.
 */
export async function runGuide(guide: string, options: { slow: boolean; timeoutMs: number }): Promise<GuideRun> {
  const steps = guideSteps(await readFile(join(REPO_ROOT, guide), 'utf8')).filter((s) => options.slow || !s.slow);
  const { dir, copy } = await repositoryCopy();
  try {
    const before = new Set(untrackedFiles(copy));
    const port = await freePort();
    const script = join(dir, 'guide.sh');
    await writeFile(script, guideScript(guide, steps, port));
    const env: Record<string, string> = {
      PATH: systemPath(),
      HOME: process.env.HOME ?? dir,
      TMPDIR: tmpdir(),
      LANG: 'C.UTF-8',
      PORT: String(port),
      AGENTGATE_URL: `http://127.0.0.1:${port}`,
      [NESTED_ENV]: '1',
      // npx keeps a link to each checkout it ran a bin from; a throwaway cache keeps the copies' out of ~/.npm.
      npm_config_cache: join(dir, 'npm-cache'),
      npm_config_update_notifier: 'false',
      npm_config_fund: 'false',
      npm_config_audit: 'false',
    };
    const { code, output, stdout } = await runScript(script, copy, env, options.timeoutMs);
    return { code, output, stdout, newUntracked: untrackedFiles(copy).filter((f) => !before.has(f)) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function runScript(script: string, cwd: string, env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; output: string; stdout: string }> {
  return new Promise((resolve, reject) => {
    // Its own process group, so that the servers a guide leaves running can be stopped together.
    const child = spawn('bash', ['--norc', '--noprofile', script], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    const ready = child.stdio[3] as NodeJS.WritableStream;
    let output = '';
    let stdout = '';
    let partial = '';
    const keep = (text: string) => (output = (output + text).slice(-OUTPUT_KEPT_CHARS));
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      keep(chunk);
      stdout = (stdout + chunk).slice(-OUTPUT_KEPT_CHARS);
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.includes('"msg":"agentgate listening"')) ready.write('listening\n');
    });
    child.stderr!.setEncoding('utf8').on('data', keep);
    const stopGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // the group is gone already
      }
    };
    let exitCode: number | null = null;
    const timer = setTimeout(() => {
      stopGroup('SIGKILL');
      reject(new Error(`the guide did not finish within ${timeoutMs} ms; its output ends:\n${output.slice(-20_000)}`));
    }, timeoutMs);
    // The shell's exit ends the guide; servers it sent to the background still hold its output open.
    child.on('exit', (code) => {
      exitCode = code;
      stopGroup('SIGTERM');
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', () => {
      clearTimeout(timer);
      resolve({ code: exitCode, output, stdout });
    });
  });
}
