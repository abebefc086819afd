#!/usr/bin/env node
// The `agentgate` command (package.json "bin"). The tool is TypeScript (src/cli/), which only a Node
// that strips types can run, but this file is plain JavaScript so that any Node can start it: it is
// what `npx agentgate`, `node_modules/.bin/agentgate` and an `npm link`ed `agentgate` run, from any
// directory, with whatever `node` comes first on the PATH. It picks the first of these that works:
//
//   1. this Node, when it strips types (process.features.typescript: Node 22.18 and later 22.x,
//      23.6 and later, 24): it imports src/cli/main.ts in this process;
//   2. the Node the project pins (the `node` package in package.json's devDependencies, installed
//      by `npm install` into this checkout's node_modules): it runs this file again with that Node;
//   3. the compiled tool in dist/ (`npm run build`, which targets Node 20), in this process;
//   4. otherwise it says which Node it needs and how to get it, and exits 2 before sending anything.
//
// The README ("Runtime") says why the project pins Node 24; docs/cli.md documents the commands.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Set on the child when this file runs itself again, so that the child never tries a second time. */
const RERUN_MARK = 'AGENTGATE_LAUNCHED_BY';
/** What the tool's usage errors exit with (docs/cli.md, "Exit codes"): nothing was sent anywhere. */
const EXIT_CANNOT_RUN = 2;

// Node runs a bin through its real path (npm's links are symlinks), so this is the checkout's bin/.
const launcher = fileURLToPath(import.meta.url);
const root = dirname(dirname(launcher));
const source = join(root, 'src', 'cli', 'main.ts');
const compiled = join(root, 'dist', 'src', 'cli', 'main.js');
const rerunFrom = process.env[RERUN_MARK];
delete process.env[RERUN_MARK];

if (process.features.typescript) {
  await runInProcess(source);
} else if (rerunFrom === undefined && pinnedNode() !== undefined) {
  rerunWith(pinnedNode());
} else if (existsSync(compiled)) {
  await runInProcess(compiled);
} else {
  cannotRun();
}

async function runInProcess(file) {
  const { main } = await import(pathToFileURL(file).href);
  await main();
}

/** The pinned Node's binary, when `npm install` has put it in this checkout, else undefined. */
function pinnedNode() {
  try {
    const manifestPath = createRequire(launcher).resolve('node/package.json');
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    const bin = typeof manifest.bin === 'string' ? manifest.bin : manifest.bin?.node;
    const binary = bin === undefined ? undefined : join(dirname(manifestPath), bin);
    return binary !== undefined && existsSync(binary) ? binary : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs this file again with `node`, passing the arguments, the streams and the exit status through.
 * SIGTERM and SIGHUP sent to this process are passed on. SIGINT is not: Ctrl-C reaches every process
 * of the terminal's foreground group, the child included, and a second copy would stop the child
 * before it finished stopping cleanly (`audit tail --follow` exits 0 on the first).
 */
function rerunWith(node) {
  const child = spawn(node, [launcher, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, [RERUN_MARK]: process.execPath },
  });
  const forward = (signal) => child.kill(signal);
  process.on('SIGTERM', forward);
  process.on('SIGHUP', forward);
  process.on('SIGINT', () => {});
  child.on('error', (err) => {
    process.stderr.write(`agentgate: cannot start ${node}: ${err.message}\n`);
    process.exit(EXIT_CANNOT_RUN);
  });
  child.on('exit', (code, signal) => {
    if (signal === null) process.exit(code ?? 1);
    // Die of the same signal, so that a shell or a supervisor sees what the child saw.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  });
}

function cannotRun() {
  const which = rerunFrom === undefined
    ? `this Node (${process.version}, ${process.execPath}) cannot run agentgate's TypeScript sources, and the checkout (${root}) has neither the Node it pins (node_modules/node) nor the compiled tool (dist/)`
    : `neither ${rerunFrom} nor the Node the checkout pins (${process.version}, ${process.execPath}) can run agentgate's TypeScript sources`;
  process.stderr.write(
    `agentgate: ${which}.\n` +
      'It needs a Node that strips types by default: 22.18 or a later 22.x, 23.6 or later, or 24.\n' +
      `To get one, run \`npm install\` in ${root}: it installs the Node 24 the project pins, which this command then uses.\n` +
      'Or put Node 24 first on the PATH, or run `npm run build` there to use the compiled tool (dist/) on Node 20.\n',
  );
  process.exit(EXIT_CANNOT_RUN);
}
