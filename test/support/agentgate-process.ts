// agentgate as a process of its own, started the way `npm start` starts it (`node src/main.ts`), for
// the tests of what only the real start-up path does: signals, cluster mode, the start-up line, the
// HTTP layer with small limits, the last-resort handlers, a busy port.
//
// A test waits for the server's own start-up line ("agentgate listening", which src/main.ts logs
// once the port is bound) rather than polling /healthz against a short deadline. The bound is
// generous because start-up is CPU, on the main thread and on the plugin workers: about 0.7 s of it
// per server with Node's compile cache (vitest.config.ts, src/main.ts), 1 s without, and several
// times that in wall-clock time on a busy two-core machine, where a test that started three servers
// at once (five processes, with cluster mode) used to miss a 10 s deadline. Everything the process
// prints is kept, and a failure to start says why with it: the exit status, or the bound, and the
// output.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SERVICE_POLICY_ENV } from './policies.ts';
import { freePort, startupLines } from './net.ts';

/** How long a server may take to log that it listens before the test fails with its output. */
export const STARTUP_BOUND_MS = 60_000;

/**
 * The timeout of a test or hook that starts servers (vitest's own is shorter): the start-up bound,
 * and as long again for what the test then does.
 */
export const WITH_SERVERS_TIMEOUT_MS = 2 * STARTUP_BOUND_MS;

/** Where `npm start` runs: the checkout these tests belong to, whatever the working directory. */
const REPOSITORY = fileURLToPath(new URL('../../', import.meta.url));

/** How much of a process's output a failure message quotes (the end of it, where the cause is). */
const QUOTED_OUTPUT_CHARS = 20_000;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A started process whose whole output is kept. */
export interface Spawned {
  child: ChildProcess;
  /** Everything it printed so far, stdout and stderr interleaved as they arrived. */
  output(): string;
  /** Resolves when it has exited and its output is all read. */
  exited: Promise<Exit>;
  /** Sends `signal` (to its whole process group if it has one) and waits until it exits. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

export interface Agentgate extends Spawned {
  port: number;
  /** `http://127.0.0.1:<port>`. */
  base: string;
  /** The start-up line, parsed (the first worker's, in cluster mode). */
  startup: Record<string, unknown>;
}

export interface AgentgateOptions {
  /** Settings on top of the test defaults (SERVICE_POLICY, memory store, no file watching, info logs). */
  env?: Record<string, string>;
  /** `npm start` instead of `node src/main.ts`: npm and a shell between the test and the server. */
  via?: 'node' | 'npm';
  /** A process group of its own, as a terminal gives a foreground job (Ctrl-C reaches the whole group). */
  detached?: boolean;
  /** The port; a free one by default. */
  port?: number;
}

const running = new Set<ChildProcess>();
/** Children started in a process group of their own: a signal goes to the whole group. */
const groupLeaders = new WeakSet<ChildProcess>();
let exitHookInstalled = false;

/** However the test ended, no server it started outlives the test process. */
function killOnExit(child: ChildProcess): void {
  running.add(child);
  child.once('close', () => running.delete(child));
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const left of running) signalProcess(left, 'SIGKILL');
  });
}

/** Signals the process, or its whole group when it leads one; a process already gone is no error. */
function signalProcess(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (groupLeaders.has(child)) process.kill(-child.pid!, signal);
    else child.kill(signal);
  } catch {
    // already gone
  }
}

/** The end of `text`, for a failure message. */
function tail(text: string): string {
  return text.length > QUOTED_OUTPUT_CHARS ? `…${text.slice(-QUOTED_OUTPUT_CHARS)}` : text;
}

/** Starts `command` with its stdout and stderr kept; it is killed when the test process exits. */
function spawnKept(command: string, args: readonly string[], options: { env: NodeJS.ProcessEnv; cwd?: string; detached?: boolean }): Spawned {
  const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: options.detached ?? false });
  if (options.detached) groupLeaders.add(child);
  killOnExit(child);
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const exited = new Promise<Exit>((resolve) => {
    // 'close', not 'exit': it comes once the output is all read, so a test reading it after the
    // exit sees every line (and, with a process group, once every process that shared it is gone).
    child.once('close', (code, signal) => resolve({ code, signal }));
    // A command that cannot be started at all (ENOENT) never exits; it is reported as this exit.
    child.once('error', (error) => {
      output += `\n[${command} could not be started: ${error.message}]\n`;
      resolve({ code: null, signal: null });
    });
  });
  return {
    child,
    output: () => output,
    exited,
    stop: async (signal = 'SIGTERM') => {
      // A group outlives its leader (npm may be gone while the server it started is not).
      if (groupLeaders.has(child) || (child.exitCode === null && child.signalCode === null)) signalProcess(child, signal);
      return exited;
    },
  };
}

/**
 * `node src/main.ts` (or `npm start`) with the test defaults and `env`, without waiting for anything:
 * for the tests of a start that must fail. `startAgentgate` is the one that waits for it to listen.
 */
export function spawnAgentgate(env: Record<string, string>, options: Pick<AgentgateOptions, 'via' | 'detached'> = {}): Spawned {
  const [command, args] = options.via === 'npm' ? ['npm', ['start']] : [process.execPath, ['src/main.ts']];
  return spawnKept(command, args, {
    cwd: REPOSITORY,
    env: { ...process.env, ...SERVICE_POLICY_ENV, HOST: '127.0.0.1', REDIS_URL: '', POLICY_WATCH: 'false', LOG_LEVEL: 'info', ...env },
    detached: options.detached ?? false,
  });
}

/**
 * How the process exits, for a start that must fail (it exits by itself) or a command that ends.
 * Past `boundMs` it is killed and this rejects with its output: it did not exit by itself.
 */
export async function exitOf(started: Spawned, what: string, boundMs = STARTUP_BOUND_MS): Promise<Exit> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      void started.stop('SIGKILL');
      reject(new Error(`${what} was still running after ${boundMs} ms; its output:\n${tail(started.output())}`));
    }, boundMs);
  });
  try {
    return await Promise.race([started.exited, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts agentgate on a free port of 127.0.0.1 and resolves once it has logged that it listens: in
 * cluster mode (WORKERS > 1), once every worker has. Rejects, with everything the process printed,
 * if it exits first or has not listened within STARTUP_BOUND_MS (it is then killed).
 */
export async function startAgentgate(options: AgentgateOptions = {}): Promise<Agentgate> {
  const env = options.env ?? {};
  const level = env.LOG_LEVEL ?? 'info';
  if (level !== 'info' && level !== 'debug') throw new Error(`startAgentgate reads the start-up line, which is logged at info; LOG_LEVEL ${level} hides it`);
  // A port this picks is free when picked, but another process (a suite running beside this one)
  // may bind it before the server does: then the server exits with EADDRINUSE, and a start on
  // another free port is the same test. Only that failure, and only for a port this picked (the
  // issuer names no port of its own), is started again, a bounded number of times.
  const picksPort = options.port === undefined && env.PORT === undefined && env.ISSUER === undefined;
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (env.PORT === undefined ? await freePort() : Number(env.PORT));
    const workers = Number(env.WORKERS ?? '1');
    const started = spawnAgentgate({ PORT: String(port), ...env }, options);
    const what = `${options.via === 'npm' ? 'npm start' : 'node src/main.ts'} on port ${port}${workers > 1 ? ` with ${workers} workers` : ''}`;
    try {
      const startup = await listeningLines(started, Math.max(workers, 1), what);
      return { ...started, port, base: `http://127.0.0.1:${port}`, startup };
    } catch (error) {
      const taken = started.output().includes(`EADDRINUSE 127.0.0.1:${port}`);
      if (!picksPort || !taken || attempt === PORT_ATTEMPTS) throw error;
    }
  }
}

/** Starts on another free port after a port was taken between picking and binding, at most this often in all. */
const PORT_ATTEMPTS = 3;

/** The first start-up line, once `count` processes have logged one; on failure, the process is killed. */
async function listeningLines(started: Spawned, count: number, what: string): Promise<Record<string, unknown>> {
  try {
    return (await startupLines(started.child, count, STARTUP_BOUND_MS))[0]!;
  } catch (error) {
    await started.stop('SIGKILL');
    throw new Error(`${what} ${(error as Error).message}; its output:\n${tail(started.output())}`);
  }
}
